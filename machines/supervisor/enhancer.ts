// The prompt enhancer's steps inside an image job (spec 4.7, CONTRACT 8), as pure steps
// (effects.ts).
//
// - "image | enhancer answered | the job holds every GPU | enhancer unloaded, image worker
//   started": the enhancer ends before the image worker starts, and nothing else slips in between
//   (`enhancerDone`). With the enhancer on the GPUs the job holds them from its grant, and its
//   image start was planned with it: it is granted at once.
// - An enhancer on the CPU held no GPU: once it answered, the job's image step waits for every GPU
//   in the job's place in the FIFO order (`due`), and its memory check (`imageStepVerdict`) starts
//   the image worker on every GPU, or takes the job's reservation back with the refusal.
import { decideStart, type CheckInput, type StartFacts } from './fit.js';
import { Draft, revoke, startWorker, unchanged, unload, type StepResult } from './effects.js';
import { admitImageStep } from './schedule.js';
import type { SupervisorContext, SupervisorEvent } from './supervisor.types.js';

/** The enhancer of an image job answered: it ends now, and the job's image start is due (4.7). */
export function enhancerDone(context: SupervisorContext, event: Extract<SupervisorEvent, { type: 'enhancer.done' }>): StepResult {
  const job = context.jobs[event.jobId];
  if (!job?.steps || job.phase !== 'running') return unchanged(context);
  const draft = new Draft(context);
  if (draft.workers.enhancer.generation === job.steps.enhancer) unload(draft, 'enhancer', 'enhancer_done', 'the enhancer answered: it ends before the image worker starts');
  const image = job.steps.image;
  let next: 'due' | null = null;
  if (image === 'later') {
    // An enhancer on the CPU: now the image step waits for every GPU, in the job's place.
    next = 'due';
  } else if (image && image !== 'due') {
    // An enhancer on the GPUs: the job holds them; its image start was planned with its grant.
    draft.do({ type: 'grant', jobId: event.jobId, worker: 'image', generation: image.generation, start: image.plan, gpus: job.gpus, step: 'image' });
    startWorker(draft, 'image', image.generation, job.spec, image.plan, job.gpus);
  }
  draft.setJob(event.jobId, { ...job, steps: { ...job.steps, image: next } });
  return draft.result();
}

/**
 * The memory check of a running image job's image step (its enhancer on the CPU has answered):
 * the image worker starts on every GPU, or the job's reservation is taken back with the refusal.
 */
export function imageStepVerdict(draft: Draft, jobId: string, facts: StartFacts, input: CheckInput): void {
  // Chat or TTS may have started while the facts were gathered: the step waits again.
  if (admitImageStep(draft.context).type !== 'start') return;
  const judged = decideStart(facts, input);
  if (judged.verdict === 'refuse') {
    revoke(draft, (j) => j.spec.id === jobId, judged.code === 'enhancer_failed' ? 'start_check_failed' : judged.code, judged.message);
    return;
  }
  if (judged.verdict === 'unload-first') {
    for (const kind of judged.kinds) unload(draft, kind, 'make_room', judged.message);
    return;
  }
  const job = draft.jobs[jobId]!;
  const generation = draft.before.starts + 1;
  const gpus = facts.gpus.map((g) => g.uuid);
  draft.setJob(jobId, { ...job, gpus, steps: { enhancer: job.steps!.enhancer, image: null } });
  draft.set({ starts: generation });
  draft.do({ type: 'grant', jobId, worker: 'image', generation, start: judged.plan, gpus, step: 'image' });
  startWorker(draft, 'image', generation, job.spec, judged.plan, gpus);
}
