// The audio memory policy (spec 2.4, 3.6) per kind: auto, warm with a chosen profile, or per
// request; its errors and retry state as the service reports them, live. Below, the speech test
// (the WAV played in the page) and the transcription test (a WAV file uploaded).
import { useEffect, useMemo, useState } from 'preact/hooks';
import { api, request } from '../api.js';
import { audioPolicy, notify, status } from '../state.js';
import type { AudioPolicyView } from '../types.js';
import { Alert, Badge, ProfileSelect, Section, attempt, useProfiles, useSubmit } from '../ui.js';

const MODES = [
  ['auto', 'Auto: loaded at the first job and kept loaded'],
  ['warm', 'Warm: the chosen profile is preloaded while the endpoint runs, and reloaded after it is displaced'],
  ['per_request', 'Per request: unloaded after each request'],
] as const;

function KindPolicy({ kind, view }: { kind: 'tts' | 'stt'; view: AudioPolicyView }) {
  const setting = view.settings.find((s) => s.kind === kind);
  const [mode, setMode] = useState<string>(setting?.mode ?? 'auto');
  const [profileId, setProfileId] = useState<string>(setting?.profile_id ?? '');
  useEffect(() => {
    setMode(setting?.mode ?? 'auto');
    setProfileId(setting?.profile_id ?? '');
  }, [setting?.mode, setting?.profile_id]);
  const profiles = (status.value?.profiles ?? []).filter((p) => p.category === kind);
  const errors = view.errors.filter((e) => e.kind === kind);
  const title = kind === 'tts' ? 'Speech (TTS)' : 'Transcription (STT)';
  return (
    <Section title={title} id={`audio-${kind}`}>
      <p>
        Now: <Badge tone={errors.length > 0 ? 'bad' : 'ok'}>{view.states[kind]}</Badge>
      </p>
      <form
        onSubmit={async (event) => {
          event.preventDefault();
          const saved = await attempt(`${title} policy`, () => api('POST', '/api/v1/audio-policy', { kind, mode, profile_id: profileId === '' ? null : profileId }));
          if (saved) {
            audioPolicy.value = saved as AudioPolicyView;
            notify('info', `${title}: ${mode} saved.`);
          }
        }}
      >
        <fieldset>
          <legend>Mode</legend>
          {MODES.map(([value, text]) => (
            <label key={value} class="choice">
              <input type="radio" name={`mode-${kind}`} value={value} checked={mode === value} onChange={() => setMode(value)} /> {text}
            </label>
          ))}
        </fieldset>
        <div class="field">
          <label for={`audio-profile-${kind}`}>Profile</label>
          <select id={`audio-profile-${kind}`} value={profileId} onChange={(e) => setProfileId(e.currentTarget.value)}>
            <option value="">(none)</option>
            {profiles.map((p) => (
              <option key={p.id} value={p.id}>
                {p.name}
                {p.executable ? '' : ' (cannot run)'}
              </option>
            ))}
          </select>
          <small class="hint">Warm needs an executable profile.</small>
        </div>
        <button class="btn primary" type="submit">
          Save
        </button>
      </form>
      {errors.length > 0 ? (
        <ul class="attention">
          {errors.map((e) => (
            <li key={e.code} class="bad" role="alert">
              {e.message} ({e.code}
              {e.attempts > 0 ? `, tried ${e.attempts} times, retried later` : ''})
            </li>
          ))}
        </ul>
      ) : null}
    </Section>
  );
}

/** Speaks a text with a TTS profile (POST /api/v1/speech-tests) and plays the WAV in the page. */
function SpeechTest() {
  const { profiles, profileId, setProfileId } = useProfiles('tts');
  const [text, setText] = useState('');
  const [language, setLanguage] = useState('English');
  const [audio, setAudio] = useState<{ url: string; bytes: number } | null>(null);
  const { busy, error, run } = useSubmit();
  useEffect(() => () => (audio ? URL.revokeObjectURL(audio.url) : undefined), [audio]);
  return (
    <Section title="Speech test">
      <form
        onSubmit={(event) => {
          event.preventDefault();
          void run(async () => {
            const response = await request('POST', '/api/v1/speech-tests', { profile_id: profileId, input: text, language });
            const blob = await response.blob();
            setAudio({ url: URL.createObjectURL(blob), bytes: blob.size });
          });
        }}
      >
        <ProfileSelect id="speech-profile" label="TTS profile" profiles={profiles} value={profileId} onChange={setProfileId} />
        <div class="field">
          <label for="speech-text">Text</label>
          <textarea id="speech-text" rows={3} maxLength={1000} required value={text} onInput={(e) => setText(e.currentTarget.value)} />
        </div>
        <div class="field">
          <label for="speech-language">Language</label>
          <input id="speech-language" value={language} onInput={(e) => setLanguage(e.currentTarget.value)} />
          <small class="hint">A language name such as English or German (the API's default is German).</small>
        </div>
        <button class="btn primary" type="submit" disabled={busy || !profileId || !text.trim()} aria-busy={busy}>
          Speak
        </button>
        <Alert text={error} />
      </form>
      {audio ? (
        <div class="field">
          <label for="speech-audio">The answer ({Math.round(audio.bytes / 1024)} KiB WAV)</label>
          <audio id="speech-audio" controls src={audio.url} />
        </div>
      ) : null}
    </Section>
  );
}

/** Transcribes an uploaded WAV with an STT profile (POST /api/v1/transcription-tests). */
function TranscriptionTest() {
  const { profiles, profileId, setProfileId } = useProfiles('stt');
  const [file, setFile] = useState<File | null>(null);
  const [language, setLanguage] = useState('');
  const [heard, setHeard] = useState<{ text: string; language: string } | null>(null);
  const { busy, error, run } = useSubmit();
  const fileUrl = useMemo(() => (file ? URL.createObjectURL(file) : null), [file]);
  useEffect(() => () => (fileUrl ? URL.revokeObjectURL(fileUrl) : undefined), [fileUrl]);
  return (
    <Section title="Transcription test">
      <form
        onSubmit={(event) => {
          event.preventDefault();
          if (!file) return;
          const form = new FormData();
          form.append('profile_id', profileId);
          if (language) form.append('language', language);
          form.append('file', file);
          void run(async () => setHeard(await api<{ text: string; language: string }>('POST', '/api/v1/transcription-tests', form)));
        }}
      >
        <ProfileSelect id="transcription-profile" label="STT profile" profiles={profiles} value={profileId} onChange={setProfileId} />
        <div class="field">
          <label for="transcription-file">Recording</label>
          <input id="transcription-file" type="file" accept=".wav,audio/wav" required onChange={(e) => setFile(e.currentTarget.files?.[0] ?? null)} />
          <small class="hint">PCM16 WAV, mono, 16 kHz, at most 120 s and 8 MiB.</small>
        </div>
        <div class="field">
          <label for="transcription-language">Language</label>
          <select id="transcription-language" value={language} onChange={(e) => setLanguage(e.currentTarget.value)}>
            <option value="">the profile's default</option>
            <option value="de">de</option>
            <option value="en">en</option>
            <option value="auto">auto</option>
          </select>
        </div>
        <button class="btn primary" type="submit" disabled={busy || !profileId || !file} aria-busy={busy}>
          Transcribe
        </button>
        <Alert text={error} />
      </form>
      {fileUrl ? <audio controls src={fileUrl} aria-label="The recording" /> : null}
      {heard ? (
        <p>
          Heard ({heard.language}): <q data-testid="transcript">{heard.text || '(nothing)'}</q>
        </p>
      ) : null}
    </Section>
  );
}

export function Audio() {
  const view = audioPolicy.value;
  if (!view) return <p class="loading">Waiting for the audio policy…</p>;
  return (
    <div class="grid two">
      <KindPolicy kind="tts" view={view} />
      <KindPolicy kind="stt" view={view} />
      <SpeechTest />
      <TranscriptionTest />
    </div>
  );
}
