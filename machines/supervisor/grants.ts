// Who runs next, carried out (spec 3.2-3.7, 8), as pure steps (effects.ts): `schedule` turns the
// steps of plan() (schedule.ts) into grants, memory checks, unloads and the GUI test's conflicts;
// `verdict` judges the facts a memory check gathered with decideStart() (fit.ts) and starts the
// worker, refuses the job, or unloads idle workers first; `checkFailed` refuses a job whose facts
// could not be gathered.
//
// - "resources free and memory check passes: the worker starts with the stored parameters". One
//   check at a time (`checking`); the supervisor's `checks` region runs it.
// - The world may move while the facts are gathered: only a start that is still due goes ahead.
// - Each start granted takes the next generation (`starts`); the grant names it, and so does every
//   report and unload of that start.
// - An image job with an enhancer step (4.7) starts its enhancer first, under the same
//   reservation; its image start is planned with the grant (on the GPUs) or checked on its own
//   once the enhancer answered (on the CPU: enhancer.ts).
import { decideStart, type CheckInput, type StartFacts } from './fit.js';
import { boundTimer, deny, Draft, grantOn, revokePreloads, startWorker, unchanged, unload, type StepResult } from './effects.js';
import { imageStepVerdict } from './enhancer.js';
import { releaseLost } from './gpuWatch.js';
import { admit, enhancerOnCpu, imageStepDue, plan, unloadableFor } from './schedule.js';
import type { SupervisorContext } from './supervisor.types.js';

/** What the start check of the job under check needs to know. */
export function checkInput(context: SupervisorContext): CheckInput | undefined {
  const job = context.checking === null ? undefined : context.jobs[context.checking];
  if (!job) return undefined;
  // An enhancer on the CPU is checked alone and unloads nothing of ours; its image step is checked
  // once the GPUs are free.
  const step = imageStepDue(job) ? 'image' : enhancerOnCpu(job.spec) ? 'enhancer' : undefined;
  if (step) return { job: job.spec, workers: context.workers, idle: [], step };
  return { job: job.spec, workers: context.workers, idle: unloadableFor(context, job.spec) };
}

/** Carries out `plan()`: grants, start checks, unloads and the GUI test's conflicts. */
export function schedule(context: SupervisorContext): StepResult {
  if (context.unloadWaiters.length > 0) return unchanged(context);
  const steps = plan(context);
  if (steps.length === 0) return unchanged(context);
  const draft = new Draft(context);
  for (const step of steps) {
    if (step.do === 'unload') {
      revokePreloads(draft, step.kind, step.reason);
      unload(draft, step.kind, step.code, step.reason);
      continue;
    }
    const job = draft.jobs[step.jobId];
    if (!job) continue;
    if (step.do === 'check') {
      draft.set({ checking: step.jobId });
      // An image step keeps its job running: its reservation is held while it is checked.
      if (!imageStepDue(job)) draft.setJob(step.jobId, { ...job, phase: 'checking' });
    } else if (step.do === 'grant') {
      draft.do({ type: 'toQueue', event: { type: 'job.dispatch', jobId: step.jobId } });
      grantOn(draft, job, step.worker);
    } else {
      draft.do({ type: 'toQueue', event: { type: 'job.cancel', jobId: step.jobId } });
      deny(draft, step.jobId, step.code, step.message);
    }
  }
  return draft.result();
}

/** The memory check's facts are in: start the worker, refuse the job, or unload idle workers first. */
export function verdict(context: SupervisorContext, facts: StartFacts): StepResult {
  const input = checkInput(context);
  const jobId = context.checking;
  const draft = new Draft(context);
  draft.set({ checking: null, gpus: facts.gpus });
  releaseLost(draft, facts.gpus);
  if (!input || jobId === null) return draft.result();
  const job = draft.jobs[jobId]!;
  if (input.step === 'image') {
    imageStepVerdict(draft, jobId, facts, input);
    return draft.result();
  }
  // The world may have moved while the facts were gathered: only a start that is still due goes ahead.
  if (admit(context, job.spec).type !== 'start') {
    draft.setJob(jobId, { ...job, phase: 'waiting' });
    return draft.result();
  }
  const judged = decideStart(facts, input);
  if (judged.verdict === 'refuse') {
    draft.do({ type: 'toQueue', event: { type: 'job.cancel', jobId } });
    deny(draft, jobId, judged.code, judged.message);
    return draft.result();
  }
  if (judged.verdict === 'unload-first') {
    for (const kind of judged.kinds) {
      revokePreloads(draft, kind, judged.message);
      unload(draft, kind, 'make_room', judged.message);
    }
    draft.setJob(jobId, { ...job, phase: 'waiting' });
    return draft.result();
  }
  const { spec } = job;
  if (input.step === 'enhancer') {
    // An enhancer on the CPU: the job runs its enhancer step and holds no GPU; chat and TTS stay.
    const generation = context.starts + 1;
    draft.setJob(jobId, { ...job, phase: 'running', worker: 'image', gpus: [], steps: { enhancer: generation, image: spec.enhancer?.image ? 'later' : null } });
    draft.set({ starts: generation });
    draft.do({ type: 'toQueue', event: { type: 'job.dispatch', jobId } });
    draft.do({ type: 'grant', jobId, worker: 'image', generation, start: null, gpus: [], enhancer: { generation, plan: judged.plan } });
    startWorker(draft, 'enhancer', generation, spec, judged.plan);
    return draft.result();
  }
  const gpus = spec.kind === 'image' ? facts.gpus.map((g) => g.uuid) : judged.plan.gpus;
  const enhancer = spec.kind === 'image' && spec.enhancer ? judged.plan.enhancer : undefined;
  // image | enhancer on: the enhancer starts first, under the same reservation; the image
  // start's generation is taken now and given to the image worker once the enhancer answered.
  const first = context.starts + 1;
  const generation = enhancer ? first + 1 : first;
  if (enhancer) {
    const image = spec.enhancer?.image ? { generation, plan: judged.plan } : null;
    draft.setJob(jobId, { ...job, phase: 'running', worker: spec.kind, gpus, steps: { enhancer: first, image } });
  } else {
    draft.setJob(jobId, { ...job, phase: 'running', worker: spec.kind, gpus });
    if (job.switchBound) draft.do({ type: 'cancelTimer', id: boundTimer(jobId) });
  }
  draft.set({ starts: generation });
  draft.do({ type: 'toQueue', event: { type: 'job.dispatch', jobId } });
  const granted = { type: 'grant', jobId, worker: spec.kind, generation, start: judged.plan, gpus } as const;
  draft.do(enhancer ? { ...granted, enhancer: { generation: first, plan: enhancer } } : granted);
  if (enhancer) startWorker(draft, 'enhancer', first, spec, enhancer);
  else startWorker(draft, spec.kind, generation, spec, judged.plan, gpus);
  return draft.result();
}

/** The facts could not be gathered: the job under check is refused, naming why. */
export function checkFailed(context: SupervisorContext, error: unknown): StepResult {
  const jobId = context.checking;
  const draft = new Draft(context);
  draft.set({ checking: null });
  if (jobId === null || !context.jobs[jobId]) return draft.result();
  draft.do({ type: 'toQueue', event: { type: 'job.cancel', jobId } });
  deny(draft, jobId, 'start_check_failed', `the memory check before the worker start failed: ${error instanceof Error ? error.message : String(error)}`);
  return draft.result();
}
