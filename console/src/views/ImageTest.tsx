// The image test (spec 3.3, 4.7): one image through the same reservation and worker as the API;
// a busy reservation is a 409 `image_busy` shown at once (the API would wait). Progress comes as
// the image process prints its steps; the finished PNG, stripped of its metadata, is shown.
import { useEffect, useState } from 'preact/hooks';
import { api, message } from '../api.js';
import { imageTest } from '../state.js';
import type { ImageTestJob } from '../types.js';
import { ActionButton, Alert, Facts, ProfileSelect, Section, attempt, duration, failureText, useProfiles } from '../ui.js';

const ENDED = new Set(['done', 'cancelled', 'failed']);

export function ImageTest() {
  const { profiles, profileId, setProfileId } = useProfiles('image');
  const [prompt, setPrompt] = useState('');
  const [refusal, setRefusal] = useState<string | null>(null);
  const [picture, setPicture] = useState<{ id: string; src: string } | null>(null);
  const job = imageTest.value;
  const running = job !== null && !ENDED.has(job.phase);

  // The event stream leaves the image out; it is fetched once when the job is done.
  useEffect(() => {
    if (!job || job.phase !== 'done' || !job.has_image || picture?.id === job.id) return;
    api<{ job: ImageTestJob | null }>('GET', '/api/v1/image-tests').then(
      ({ job: full }) => {
        if (full?.b64_png) setPicture({ id: full.id, src: `data:image/png;base64,${full.b64_png}` });
      },
      (error: unknown) => setRefusal(`The image could not be read: ${message(error)}`),
    );
  }, [job?.id, job?.phase]);

  async function start() {
    setRefusal(null);
    try {
      const { job: started } = await api<{ job: ImageTestJob }>('POST', '/api/v1/image-tests', { profile_id: profileId, prompt });
      // The event stream may already have brought a later state of this job.
      if (imageTest.value?.id !== started.id) imageTest.value = started;
    } catch (error) {
      setRefusal(failureText(error));
    }
  }

  const progress = job?.progress;
  return (
    <div class="grid two">
      <Section title="Prompt">
        <form
          onSubmit={(event) => {
            event.preventDefault();
            void start();
          }}
        >
          <ProfileSelect id="image-profile" label="Image profile" profiles={profiles} value={profileId} onChange={setProfileId} />
          <div class="field">
            <label for="image-prompt">Prompt</label>
            <textarea id="image-prompt" rows={4} required value={prompt} onInput={(e) => setPrompt(e.currentTarget.value)} />
            <small class="hint">sd-cli gets the prompt on its command line: while the image is made, local users who can list processes can read it, unless /proc is mounted with hidepid.</small>
          </div>
          <div class="form-actions">
            <button class="btn primary" type="submit" disabled={!profileId || !prompt.trim()}>
              Generate
            </button>
            <ActionButton disabled={!running} onClick={() => attempt('Cancel', () => api('POST', '/api/v1/image-tests/cancel', {}))}>
              Cancel
            </ActionButton>
          </div>
          <Alert text={refusal} testId="image-refusal" />
        </form>
      </Section>
      <Section title="Result">
        {job ? (
          <>
            <Facts
              items={[
                ['Phase', job.phase],
                ['Started', new Date(job.started_at).toLocaleTimeString()],
                ['Took', job.finished_at ? duration(Date.parse(job.finished_at) - Date.parse(job.started_at)) : '—'],
                ['Size', job.result?.size ?? '—'],
                ['Metadata removed', job.result ? job.result.removed_chunks.join(', ') || 'none' : '—'],
              ]}
            />
            {progress ? (
              <div class="field">
                <label for="image-progress">
                  Step {progress.step} of {progress.steps}
                </label>
                <progress id="image-progress" max={progress.steps} value={progress.step} />
              </div>
            ) : running ? (
              <p>{job.phase === 'waiting' ? 'Waiting for the image reservation…' : 'Loading the model…'}</p>
            ) : null}
            {job.error ? (
              <p class="error" role="alert">
                {job.error.message} ({job.error.code ?? 'no code'})
              </p>
            ) : null}
            {picture && picture.id === job.id ? <img class="result" src={picture.src} alt={`The test image of job ${job.id.slice(0, 8)}`} /> : null}
          </>
        ) : (
          <p class="empty">No image test has run since the service started.</p>
        )}
      </Section>
    </div>
  );
}
