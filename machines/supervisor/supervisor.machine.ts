// The supervisor (spec 1, 3, 3.7, 7, 8): the root actor. It shares the scarce GPUs and the RAM
// between the chat, image, TTS and STT workers through reservations and a FIFO queue:
//
// - "A scheduler serialises access to GPUs and memory through reservations and a FIFO queue."
// - Reservation is an event protocol: a job sends `gpu.reserve`, waits in the queue child, and hears
//   `gpu.granted` (with the worker start plan when its worker must start) or `gpu.denied`. It holds
//   the reservation for its whole life ("streaming keeps the model reservation until the output
//   ends") and gives it back with `gpu.release`. `gpu.revoked` takes it back early (a foreign GPU
//   process appeared, the worker died, the endpoint stopped).
// - Every rule is a pure step, `(context, event) → { context, effects }`, one file per subject:
//   reservations.ts (reserve, the queue's reports, release), grants.ts (plan() carried out, the
//   memory check's verdict), workerReports.ts, gpuWatch.ts, profiles.ts, enhancer.ts and stop.ts.
//   Which job runs next is `plan()` (schedule.ts); whether a worker start fits is `decideStart()`
//   (fit.ts). This machine keeps the chart: the states the spec names, the guards by name, which
//   step each event takes; its one action, `carryOut`, assigns a step's context and carries out its
//   effects (effects.ts) with emit, sendTo, raise and cancel.
// - The queue child keeps the waiting order: its `job.queued` gives each job a ticket, and `plan()`
//   walks the jobs by ticket (`waitingOrder`). The supervisor keeps no copy of the order. When
//   nobody waits and its loaded worker has a slot free, a job is granted at once, without the
//   queue's round trip (FIFO holds: it overtakes nobody; `runsAtOnce` in schedule.ts). A release
//   that nobody waits for, with no worker due for an idle unload, skips `plan()`
//   (`releaseLeavesNothingToPlan`).
// - (3.2) "additional foreign GPU process during operation → unloaded: only the service's own
//   worker is ended". Foreign processes are never signalled.
// - (3.1, 7) endpoint stop: waiting requests are discarded, then every worker is unloaded.
//
// The listener (spec 3.1), the queue (3.7) and the five worker machines are children with their
// systemIds. The workers are commanded with `worker.start`, sent with the grant that planned the
// start (so no worker record is loading without a start under way, whatever becomes of the job),
// and `worker.unload`; they report back with `worker.*` events, each worker machine for itself:
// `worker.unloaded` only once its process is gone, `worker.lost` when it outlived SIGKILL (its
// memory stays reserved until the GPU probe no longer shows it).
import { assertEvent, enqueueActions, setup } from 'xstate';
import { SYSTEM_IDS, WORKER_IDS } from '../ids.js';
import { QUEUE_LIMITS, type QueueEvent } from '../queue/index.js';
import type { StartFacts } from './fit.js';
import { emptyWorker, type Effect, type StepResult } from './effects.js';
import { gpuWatchNeeded, inventory } from './gpuWatch.js';
import { checkFailed, checkInput, schedule, verdict } from './grants.js';
import { enhancerDone } from './enhancer.js';
import { audioMode, buildChanged, profileChanged } from './profiles.js';
import { fromQueue, grantAtOnce, refusal, release, reserve, switchBoundReached } from './reservations.js';
import { exclusiveImageMode, releaseLeavesNothingToPlan, runsAtOnce } from './schedule.js';
import { closeDown, discard, opened, unloadAll, unloadRequest } from './stop.js';
import { supervisorActors } from './supervisor.actors.js';
import type { SupervisorContext, SupervisorEmitted, SupervisorEvent, SupervisorInput, WorkerStart } from './supervisor.types.js';
import { DEFAULT_SCHEDULING, WORKER_KINDS } from './supervisor.types.js';
import { allUnloaded, replyUnloadWaiters, restartStalled, stallHoldsOthers, workerReport } from './workerReports.js';

/** The supervisor's commands to a worker machine. */
type WorkerCommand = { type: 'worker.start'; start: WorkerStart } | { type: 'worker.unload'; generation: number; reason: string };

/** The part of `enqueue` the effects are carried out with. */
interface Enqueue {
  emit(event: SupervisorEmitted): void;
  sendTo(to: string, event: QueueEvent | WorkerCommand): void;
  raise(event: SupervisorEvent, options?: { delay: number; id: string }): void;
  cancel(id: string): void;
}

/** The effects that are emitted events of the same fields (for the routes, the adapters and the metrics). */
const EMITTED = { grant: 'gpu.granted', deny: 'gpu.denied', revoke: 'gpu.revoked', queued: 'job.queued', reply: 'supervisor.reply' } as const;

/** Carries out one effect of a step. */
function carry(enqueue: Enqueue, effect: Effect): void {
  switch (effect.type) {
    case 'unload':
      // The worker machine carries it out and reports its own `worker.unloaded` (or `worker.lost`).
      enqueue.sendTo(WORKER_IDS[effect.kind], { type: 'worker.unload', generation: effect.generation, reason: effect.reason });
      enqueue.emit({ ...effect, type: 'worker.unload' });
      return;
    case 'start':
      return enqueue.sendTo(WORKER_IDS[effect.kind], { type: 'worker.start', start: effect.start });
    case 'toQueue':
      return enqueue.sendTo(SYSTEM_IDS.queue, effect.event);
    case 'timer':
      return enqueue.raise(effect.event, { delay: effect.delay, id: effect.id });
    case 'cancelTimer':
      return enqueue.cancel(effect.id);
    case 'abandonCheck':
      return enqueue.raise({ type: 'check.abandoned' });
    default:
      return enqueue.emit({ ...effect, type: EMITTED[effect.type] } as SupervisorEmitted);
  }
}

/** A transition's step: the machine's one action, given what the step decided. */
function step<E>(rule: (context: SupervisorContext, event: E) => StepResult) {
  return { type: 'carryOut' as const, params: ({ context, event }: { context: SupervisorContext; event: E }) => rule(context, event) };
}

export const supervisorMachine = setup({
  types: {
    context: {} as SupervisorContext,
    events: {} as SupervisorEvent,
    input: {} as SupervisorInput,
    emitted: {} as SupervisorEmitted,
  },
  actors: supervisorActors,
  delays: {
    closingLimit: 60_000,
  },
  guards: {
    /** Every worker is gone, or lost (nothing more can be done for a process that outlives SIGKILL). */
    allUnloaded: ({ context }) => allUnloaded(context),
    checkPending: ({ context }) => context.checking !== null,
    /** Nobody waits (FIFO: it overtakes no one) and its worker is loaded with its profile with a slot free. */
    nobodyWaitsAndSlotFree: ({ context, event }) => {
      assertEvent(event, 'gpu.reserve');
      return (
        context.jobs[event.job.id] === undefined &&
        context.unloadWaiters.length === 0 &&
        refusal(context, event.job) === null &&
        runsAtOnce(context, event.job)
      );
    },
    /** Nobody waits for the released slot (FIFO has nobody to serve) and no worker falls due for an idle unload. */
    nobodyWaitsAndNothingToUnload: ({ context, event }) => {
      assertEvent(event, 'gpu.release');
      return releaseLeavesNothingToPlan(context, event.jobId);
    },
    /** Neither: nothing on the GPUs to watch. */
    nothingToWatch: ({ context }) => !gpuWatchNeeded(context),
    /** A chat worker holds a GPU (foreign processes there are noticed), or a lost worker does (its end is noticed). */
    gpuWatchNeeded: ({ context }) => gpuWatchNeeded(context),
    /** An image job runs, or its image or enhancer process is not yet gone. */
    exclusiveImageMode: ({ context }) => exclusiveImageMode(context),
    llmModeAgain: ({ context }) => !exclusiveImageMode(context),
    /** The stalled job still runs on that start of its worker, and another job (not a preload) waits for that worker or runs on it. */
    stallHoldsOthers: ({ context, event }) => {
      assertEvent(event, 'worker.stalled');
      return stallHoldsOthers(context, event);
    },
  },
  actions: {
    /** The one action: a step's next context is assigned, and its effects are carried out in their order. */
    carryOut: enqueueActions(({ context, enqueue }, result: StepResult) => {
      if (result.context !== context) enqueue.assign(result.context);
      for (const effect of result.effects) carry(enqueue, effect);
    }),
  },
}).createMachine({
  id: 'supervisor',
  context: ({ input }) => ({
    jobs: {},
    workers: { chat: emptyWorker('chat'), image: emptyWorker('image'), tts: emptyWorker('tts'), stt: emptyWorker('stt'), enhancer: emptyWorker('enhancer') },
    workerLimits: input.workers ?? {},
    checking: null,
    starts: 0,
    revisions: {},
    gpus: [],
    audio: { tts: 'auto', stt: 'auto' },
    accepting: true,
    unloadWaiters: [],
    listenerInput: input.listener,
    scheduling: { ...DEFAULT_SCHEDULING, ...input.scheduling },
    chatLoads: {},
    chatAnswers: {},
    limits: {
      maxWaiting: input.queue?.maxWaiting ?? QUEUE_LIMITS.maxWaiting,
      maxWaitMs: input.queue?.maxWaitMs ?? QUEUE_LIMITS.maxWaitMs,
      retryAfterSeconds: input.queue?.retryAfterSeconds ?? QUEUE_LIMITS.retryAfterSeconds,
    },
  }),
  // The worker machines live as long as the supervisor: the closing state waits for their unloads.
  invoke: WORKER_KINDS.map((kind) => ({
    id: WORKER_IDS[kind],
    systemId: WORKER_IDS[kind],
    src: WORKER_IDS[kind],
    input: ({ context }: { context: SupervisorContext }) => ({ ...context.workerLimits[kind], reportToParent: true }),
  })),
  initial: 'active',
  states: {
    active: {
      type: 'parallel',
      invoke: [
        {
          id: SYSTEM_IDS.listener,
          systemId: SYSTEM_IDS.listener,
          src: 'listener',
          input: ({ context }) => context.listenerInput,
          onDone: {
            target: 'closing',
            actions: [step(closeDown)],
            description: 'the service ends once the listener is off: nothing waits any more, and every worker is unloaded (also those an admin test loaded while the endpoint was stopped)',
          },
        },
        {
          id: SYSTEM_IDS.queue,
          systemId: SYSTEM_IDS.queue,
          src: 'queue',
          input: ({ context }) => ({ ...context.limits, reportToParent: true }),
        },
      ],
      on: {
        'gpu.reserve': [
          {
            guard: 'nobodyWaitsAndSlotFree',
            actions: [step(grantAtOnce)],
            description:
              'FIFO queue: nobody waits, and "the same profile may answer in parallel up to its configured slot count" has a slot free: the job runs at once, without entering the queue',
          },
          {
            actions: [step(reserve)],
            description: 'a job asks for its reservation: it waits in the FIFO queue (at most 16, at most 600 s)',
          },
        ],
        'job.queued': { actions: [step(fromQueue), step(schedule)], description: 'the queue took the job: plan who runs next' },
        'job.rejected': {
          actions: [step(fromQueue), step(schedule)],
          description: 'queue full, waited 600 s, its profile changed, or the endpoint stopped: the job is refused',
        },
        'job.removed': { actions: [step(fromQueue), step(schedule)], description: 'a client that disconnected left the queue' },
        'gpu.release': [
          {
            guard: 'nobodyWaitsAndNothingToUnload',
            actions: [step(release)],
            description:
              'the job ended (a stream after its last byte), and nobody waits for "its reservation goes to the next job": its chat slot is free, its worker stays loaded, and no plan is made',
          },
          {
            actions: [step(release), step(schedule)],
            description: 'the job ended (a stream after its last byte): its reservation goes to the next job',
          },
        ],
        'job.cancel': {
          actions: [step(release), step(schedule)],
          description: 'the client disconnected: it leaves the queue at once, or frees its running reservation',
        },
        'worker.started': { actions: [step(workerReport)], description: 'the worker process exists: its pid is ours, not foreign' },
        'worker.loaded': { actions: [step(workerReport), step(schedule)], description: 'the worker is ready' },
        'worker.unloaded': {
          actions: [step(workerReport), step(replyUnloadWaiters), step(schedule)],
          description: 'the worker is gone: its GPUs and RAM are free for the next start',
        },
        'worker.lost': {
          actions: [step(workerReport), step(replyUnloadWaiters), step(schedule)],
          description: 'an unload failed (the process outlived SIGKILL): the worker is lost, its memory stays reserved until it is gone',
        },
        'worker.exited': {
          actions: [step(workerReport), step(replyUnloadWaiters), step(schedule)],
          description: 'the worker died: its running jobs fail with worker_failed and the next request reloads',
        },
        'gpu.inventory': {
          actions: [step(inventory), step(schedule)],
          description: 'loaded | additional foreign GPU process during operation | unloaded: only the own chat worker is ended',
        },
        'profile.changed': {
          actions: [step(profileChanged), step(schedule)],
          description: 'waiting requests of a changed or deactivated profile are rejected; a new revision unloads and restarts the worker',
        },
        'worker.buildChanged': {
          actions: [step(buildChanged), step(schedule)],
          description: 'loaded | a new build | unloaded (spec 3.5, 9): an idle worker goes now, a busy one after its jobs; new jobs wait for the new build',
        },
        'endpoint.discard': { actions: [step(discard)], description: 'endpoint stop: waiting requests are discarded; no new requests accepted' },
        'endpoint.opened': { actions: [step(opened), step(schedule)], description: 'the inference listener is bound: new reservations are accepted' },
        'worker.stalled': {
          guard: 'stallHoldsOthers',
          actions: [step(restartStalled), step(schedule)],
          description:
            'loaded | a request has had no token past its limit, the worker answers no status probe, and others wait | unloaded, then started again for them: the answers on it fail with worker_failed (beyond the spec: its 120 s silence limit ends a request, but not the grammar that holds the worker)',
        },
        'worker.unloadRequest': {
          actions: [step(unloadRequest), step(schedule)],
          description: 'loaded | explicit unload in the chat test | no active requests | unloaded; with active requests the unload is rejected',
        },
        'audio.mode': {
          actions: [step(audioMode), step(schedule)],
          description: 'audio memory policy (3.6): auto keeps a speech worker loaded after its job, per_request unloads it after each request',
        },
        'enhancer.done': {
          actions: [step(enhancerDone), step(schedule)],
          description:
            'image | enhancer answered | the job holds every GPU | enhancer unloaded, image worker started: the enhancer ends before the image worker starts, and nothing else slips in between; an enhancer on the CPU held no GPU: the image step now waits for every GPU in its job\'s place',
        },
        'switch.bound': {
          actions: [step(switchBoundReached), step(schedule)],
          description:
            'a request for a different profile | its bound passed (swap-aware order) | | chats for the loaded profile no longer overtake it: it goes first once the running answers end ("cannot be overtaken indefinitely by new chats")',
        },
        'workers.unloadAll': {
          actions: [step(unloadAll), step(replyUnloadWaiters)],
          description: 'endpoint stop: then workers are unloaded; own workers receive SIGTERM; TTS and STT workers too',
        },
      },
      states: {
        checks: {
          initial: 'idle',
          states: {
            idle: {
              always: { guard: 'checkPending', target: 'checking', description: 'memory check before every worker start, one at a time' },
            },
            checking: {
              on: {
                'check.abandoned': {
                  target: 'idle',
                  description: 'the job left while its check ran: the check is abandoned (its facts would belong to another job)',
                },
              },
              invoke: {
                src: 'gatherStartFacts',
                input: ({ context }) => checkInput(context)!,
                onDone: {
                  target: 'idle',
                  actions: [step((context, event: { output: StartFacts }) => verdict(context, event.output)), step(schedule)],
                  description: 'resources free and memory check passes: the worker starts with the stored parameters',
                },
                onError: { target: 'idle', actions: [step((context, event: { error: unknown }) => checkFailed(context, event.error)), step(schedule)], description: 'the facts could not be gathered: the job is refused' },
              },
            },
          },
        },
        gpuMode: {
          initial: 'llm',
          description: 'the GPU mode the spec names (3.3, 3.4, 3.6): what the GPUs serve now',
          states: {
            llm: {
              description:
                'LLM GPU mode: "a loaded chat profile may coexist with a loaded TTS worker while the 7 GiB condition holds"; an idle one of the two gives way to the other\'s start when it does not fit beside it (incompatible GPU profile change); TTS preloads only here',
              always: {
                guard: 'exclusiveImageMode',
                target: 'exclusiveImage',
                description: 'an image job holds every GPU: "the chat model is unloaded before generation", and "the speech model is unloaded before image generation"',
              },
            },
            exclusiveImage: {
              description: 'exclusive image mode: an image job (its enhancer, then its image) holds every GPU; chat and TTS starts wait until its processes are gone',
              always: { guard: 'llmModeAgain', target: 'llm', description: 'the image job ended and its image process is terminated completely' },
            },
          },
        },
        gpuWatch: {
          initial: 'idle',
          states: {
            idle: { always: { guard: 'gpuWatchNeeded', target: 'watching' } },
            watching: {
              description: 'a chat worker holds a GPU: foreign processes that appear there are noticed; a lost worker holds one: its end is noticed',
              always: { guard: 'nothingToWatch', target: 'idle', description: 'nothing of ours holds a GPU any more: nothing to watch' },
              invoke: { src: 'watchGpus' },
            },
          },
        },
      },
    },
    closing: {
      description: 'the service is ending: it waits until every worker has reported its unload (at most closingLimit)',
      always: { guard: 'allUnloaded', target: 'off' },
      after: { closingLimit: { target: 'off', description: 'a worker that never reports its unload does not keep the service from ending' } },
      on: {
        'gpu.reserve': { actions: step(reserve), description: 'no new reservations while the service ends' },
        'worker.started': { actions: step(workerReport) },
        'worker.unloaded': { actions: step(workerReport) },
        'worker.lost': { actions: step(workerReport) },
        'worker.exited': { actions: step(workerReport) },
      },
    },
    off: { type: 'final', description: 'the service has ended' },
  },
});
