// The image test (spec 3.3, 4.7): one image through the same reservation and worker as the API;
// a busy reservation is a 409 `image_busy` shown at once (the API would wait). Progress comes as
// the image process prints its steps; the finished PNG, stripped of its metadata, is shown.
// The enhancer preview runs the profile's prompt enhancer alone (no image): the original beside
// the suggestion, then an image made from either, which that job does not enhance again.
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, message } from '../api.js';
import { enhancers, imageTest, notify, status } from '../state.js';
import type { EnhancerPreview, ImageTestJob, PreviewAnswer, ProfileView } from '../types.js';
import { ActionButton, Alert, Facts, ProfileSelect, Section, attempt, duration, failureText, useProfiles, useSubmit } from '../ui.js';
import { EnhancerActivity, PreviewPrompts, PromptText, shapeText } from './enhancerPreview.js';

const ENDED = new Set(['done', 'cancelled', 'failed']);

/** The operator's choice on a preview: the image from its suggestion, or from the original. */
type Choice = 'accept' | 'keep';

/**
 * Why the last preview cannot be chosen for this test, as the service would refuse it (409
 * `preview_mismatch`): another profile, a newer revision, reference images, another prompt.
 */
function mismatch(preview: EnhancerPreview, profile: ProfileView | undefined, prompt: string): string | null {
  if (!profile || preview.profile_id !== profile.id) {
    const name = status.value?.profiles.find((p) => p.id === preview.profile_id)?.name ?? preview.profile_id;
    return `This preview is for profile ${name}: preview again for the chosen profile.`;
  }
  if (preview.revision !== profile.revision) return `The profile was saved since this preview (revision ${preview.revision}, now ${profile.revision}): preview again.`;
  if (preview.task !== 't2i') return 'This preview read reference images (i2i); the image test makes images from text only.';
  if (preview.original !== prompt) return 'The prompt has changed since this preview: the preview is for another prompt. Preview again, or put the previewed prompt back.';
  return null;
}

/** What the enhancer did for the job: ran, skipped by a preview choice, failed, or off. */
function enhancerText(job: ImageTestJob, choice: Choice | undefined): string {
  if (job.enhancer === 'ran') return 'ran: the image was made from its rewrite';
  if (job.enhancer === 'preview') {
    const from = choice === 'accept' ? "the preview's suggestion" : choice === 'keep' ? 'the original prompt' : 'the choice on the preview';
    return `skipped: made from ${from}`;
  }
  if (job.error?.code === 'enhancer_failed') return 'failed: no image was made';
  // Done without a rewrite: the profile has its enhancer off. Running, cancelled or failed otherwise: not known yet or moot.
  return job.phase === 'done' ? 'did not run (off for this profile)' : '—';
}

export function ImageTest() {
  const { profiles, profileId, setProfileId } = useProfiles('image');
  const [prompt, setPrompt] = useState('');
  const [refusal, setRefusal] = useState<string | null>(null);
  const [picture, setPicture] = useState<{ id: string; src: string } | null>(null);
  const [chosen, setChosen] = useState<{ jobId: string; choice: Choice } | null>(null);
  const previewing = useSubmit();
  const abort = useRef<AbortController | null>(null);
  const job = imageTest.value;
  const running = job !== null && !ENDED.has(job.phase);
  const preview = enhancers.value?.preview ?? null;
  const profile = profiles.find((p) => p.id === profileId);
  const unfit = preview ? mismatch(preview, profile, prompt) : null;
  const ready = Boolean(profileId && prompt.trim());

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

  /** Starts a test; with a choice, from the last preview (the service checks it is for this prompt). */
  async function start(choice?: Choice) {
    const report = choice ? previewing.setError : setRefusal;
    setRefusal(null);
    previewing.setError(null);
    try {
      const body = choice ? { profile_id: profileId, prompt, preview: choice } : { profile_id: profileId, prompt };
      const { job: started } = await api<{ job: ImageTestJob }>('POST', '/api/v1/image-tests', body);
      if (choice) setChosen({ jobId: started.id, choice });
      // The event stream may already have brought a later state of this job.
      if (imageTest.value?.id !== started.id) imageTest.value = started;
    } catch (error) {
      report(failureText(error));
    }
  }

  const runPreview = () =>
    previewing.run(async () => {
      const controller = new AbortController();
      abort.current = controller;
      const asked = { profile_id: profileId, prompt };
      let answer: PreviewAnswer;
      try {
        answer = await api<PreviewAnswer>('POST', '/api/v1/prompt-enhancers/preview', asked, { signal: controller.signal });
      } catch (error) {
        if (!controller.signal.aborted) throw error;
        notify('info', 'Preview cancelled: the enhancer was stopped.');
        return;
      } finally {
        abort.current = null;
      }
      // The event stream brings the same preview with its revision and time; until then the answer stands for it.
      const current = enhancers.value;
      const known = current?.preview;
      if (current && !(known?.profile_id === asked.profile_id && known.original === answer.original && known.suggestion === answer.suggestion)) {
        enhancers.value = { ...current, preview: { ...answer, profile_id: asked.profile_id, revision: profile?.revision ?? 0, images: 0, created_at: new Date().toISOString() } };
      }
    });

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
            <button class="btn primary" type="submit" disabled={!ready || previewing.busy}>
              Generate
            </button>
            <button class="btn plain" type="button" disabled={!ready || previewing.busy} aria-busy={previewing.busy} onClick={() => void runPreview()}>
              Preview enhancement
            </button>
            <ActionButton disabled={!running} onClick={() => attempt('Cancel', () => api('POST', '/api/v1/image-tests/cancel', {}))}>
              Cancel
            </ActionButton>
          </div>
          <small class="hint">Preview enhancement runs the profile's prompt enhancer on this prompt without making an image; then make the image from its suggestion or from the original.</small>
          <Alert text={refusal} testId="image-refusal" />
        </form>
        <section class="preview" aria-labelledby="preview-heading">
          <h3 id="preview-heading">Enhancer preview</h3>
          {previewing.busy ? (
            <div class="inline">
              <EnhancerActivity profileId={profileId} before="Waiting for the image reservation…" after="The enhancer has answered; ending it and freeing the reservation…" />
              <button class="btn danger" type="button" onClick={() => abort.current?.abort()}>
                Cancel preview
              </button>
            </div>
          ) : null}
          <Alert text={previewing.error} testId="preview-refusal" />
          {preview ? (
            <>
              <PreviewPrompts preview={preview} />
              {unfit ? (
                <p class="hint" data-testid="preview-mismatch">
                  {unfit}
                </p>
              ) : null}
              <div class="form-actions">
                <button class="btn primary" type="button" disabled={unfit !== null || previewing.busy} onClick={() => void start('accept')}>
                  Make image with suggestion
                </button>
                <button class="btn plain" type="button" disabled={unfit !== null || previewing.busy} onClick={() => void start('keep')}>
                  Make image with original
                </button>
                {unfit && profile && preview.profile_id === profile.id && preview.original !== prompt ? (
                  <button class="btn plain" type="button" onClick={() => setPrompt(preview.original)}>
                    Put the previewed prompt back
                  </button>
                ) : null}
              </div>
            </>
          ) : previewing.busy ? null : (
            <p class="empty">No preview yet.</p>
          )}
        </section>
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
                ['Prompt enhancer', enhancerText(job, chosen?.jobId === job.id ? chosen.choice : undefined)],
              ]}
            />
            {job.enhanced ? (
              <div class="rewrite">
                <PromptText caption="The enhancer's rewrite, which the image was made from" text={job.enhanced.prompt} testId="job-rewrite" />
                <p class="hint">{shapeText(job.enhanced.wh_ratio)}</p>
              </div>
            ) : null}
            {progress ? (
              <div class="field">
                <label for="image-progress">
                  Step {progress.step} of {progress.steps}
                </label>
                <progress id="image-progress" max={progress.steps} value={progress.step} />
              </div>
            ) : running ? (
              job.phase === 'waiting' ? (
                <p>Waiting for the image reservation…</p>
              ) : (
                <EnhancerActivity key={job.id} profileId={job.profile_id} before="Loading the model…" after="The enhancer has rewritten the prompt; loading the image model…" />
              )
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
