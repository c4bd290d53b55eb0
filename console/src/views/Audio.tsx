// The audio memory policy (spec 2.4, 3.6) per kind: auto, warm with a chosen profile, or per
// request; its errors and retry state as the service reports them, live.
import { useEffect, useState } from 'preact/hooks';
import { api } from '../api.js';
import { audioPolicy, notify, status } from '../state.js';
import type { AudioPolicyView } from '../types.js';
import { Badge, Section, attempt } from '../ui.js';

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

export function Audio() {
  const view = audioPolicy.value;
  if (!view) return <p class="loading">Waiting for the audio policy…</p>;
  return (
    <div class="grid two">
      <KindPolicy kind="tts" view={view} />
      <KindPolicy kind="stt" view={view} />
    </div>
  );
}
