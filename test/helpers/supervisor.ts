// A running supervisor (with its real listener and queue children) on a simulated clock, with
// simulated worker children (they take the supervisor's start and unload commands and report
// back; a test may give a real worker machine instead) and start facts that tests set. Used by the table tests, the property test and bench/scheduler.
import { createActor, fromCallback, fromPromise, SimulatedClock, type AnyActorLogic, type InspectionEvent } from 'xstate';
import { listenerMachine } from '../../machines/listener/index.js';
import { WORKER_IDS } from '../../machines/ids.js';
import {
  supervisorMachine,
  waitingOrder,
  WORKER_KINDS,
  type CheckInput,
  type GpuView,
  type JobSpec,
  type ModelShape,
  type SchedulingPolicy,
  type StartFacts,
  type SupervisorEmitted,
  type SupervisorEvent,
  type WorkerKind,
  type WorkerStart,
} from '../../machines/supervisor/index.js';

export const GIB = 1024;

/** A model of `layers` blocks of `layerMiB` each, with a small KV cache. */
export function model(layers = 32, layerMiB = 200): ModelShape {
  return {
    layerCount: layers,
    headCountKv: [8],
    keyLength: 128,
    valueLength: 128,
    layerBytes: Array.from({ length: layers }, () => layerMiB * 1024 * 1024),
    inputBytes: 250 * 1024 * 1024,
    outputBytes: 250 * 1024 * 1024,
  };
}

export function gpu(uuid: string, totalMiB = 24 * GIB, freeMiB = totalMiB, processes: GpuView['processes'] = []): GpuView {
  return { uuid, memoryTotalMiB: totalMiB, memoryFreeMiB: freeMiB, processes };
}

export interface World {
  gpus: GpuView[];
  ramMiB: number;
  gpuReserveMiB: number;
  ramReserveMiB: number;
  /** Per profile id: the chat model and its stored parameters. */
  chat: Record<string, { model: ModelShape; context: number; gpuSplit: number[] | null; gpuLayers: number | null }>;
  /** The TTS profile's designated device and memory need. */
  tts: { device: string; memoryMiB: number };
  imageMiB: number;
  /** Make the next fact gathering fail with this message. */
  failNext: string | null;
  /** The prompt enhancer's model (4.7), or why it cannot be read. */
  enhancer: { model: ModelShape; context: number } | { problem: string };
}

export function defaultWorld(): World {
  return {
    gpus: [],
    ramMiB: 20 * GIB,
    gpuReserveMiB: 512,
    ramReserveMiB: 1024,
    chat: {},
    tts: { device: 'cpu', memoryMiB: 0 },
    imageMiB: 6 * GIB,
    failNext: null,
    enhancer: { model: model(16, 100), context: 8192 },
  };
}

/** What the real fact gatherer returns, computed from the simulated world. */
export function factsFrom(world: World, input: CheckInput): StartFacts {
  const base = {
    gpus: world.gpus.map((g) => ({ ...g, processes: [...g.processes] })),
    gpuReserveMiB: Object.fromEntries(world.gpus.map((g) => [g.uuid, world.gpuReserveMiB])),
    ram: { availableMiB: world.ramMiB, reserveMiB: world.ramReserveMiB, limitedBy: 'host' },
  };
  const { job } = input;
  if (job.kind === 'chat') {
    const p = world.chat[job.profileId] ?? { model: model(8, 50), context: 4096, gpuSplit: null, gpuLayers: null };
    return { ...base, demand: { kind: 'chat', model: p.model, context: p.context, slots: job.slots, gpuSplit: p.gpuSplit, gpuLayers: p.gpuLayers, buildFit: null } };
  }
  if (job.kind === 'tts') {
    return { ...base, demand: { kind: 'tts', device: world.tts.device, gpuMiB: world.tts.memoryMiB, ramMiB: 300, basis: 'TTS profile memoryMiB' } };
  }
  if (job.kind === 'image') {
    const demand = { kind: 'image', device: 'first-gpu', gpuMiB: world.imageMiB, ramMiB: 1024, basis: 'image model files' } as const;
    if (!job.enhancer) return { ...base, demand };
    const e = world.enhancer;
    if ('problem' in e) return { ...base, demand, enhancerProblem: e.problem };
    return { ...base, demand, enhancer: { kind: 'chat', model: e.model, context: e.context, slots: 1, gpuSplit: null, gpuLayers: null, buildFit: null } };
  }
  return { ...base, demand: { kind: 'stt', device: 'cpu', gpuMiB: 0, ramMiB: 400, basis: 'STT model' } };
}

export interface HarnessOptions {
  world?: Partial<World>;
  /** Workers answer `worker.unload` and `worker.start` on their own (default true). */
  autoWorkers?: boolean;
  /** Worker kinds run by the given machine instead of a simulated child (a real worker machine with a simulated engine). */
  workers?: Partial<Record<WorkerKind, AnyActorLogic>>;
  maxWaiting?: number;
  /** The queue order (default: the supervisor's, swap-aware with a 30 s bound). */
  scheduling?: Partial<SchedulingPolicy>;
  /** Kinds whose process outlives SIGKILL: their unload is answered with `worker.lost`, not `worker.unloaded`. */
  stuck?: WorkerKind[];
  /** The actor system's inspection observer (the metrics' hook). */
  inspect?: (event: InspectionEvent) => void;
  /** What the engine measured for a start of the worker kind with this profile (`worker.loaded`'s `loadMs`; none by default). */
  loadMs?: (kind: WorkerKind, profileId: string | null) => number | undefined;
}

export function supervisorHarness(options: HarnessOptions = {}) {
  const clock = new SimulatedClock();
  const world: World = { ...defaultWorld(), ...options.world };
  const calls: string[] = [];
  let pid = 1000;
  const pendingFacts: Array<{ input: CheckInput; resolve: (f: StartFacts) => void; reject: (e: Error) => void }> = [];
  let holdFacts = false;
  /** The unload commands the worker children received: `<kind> <generation>`. */
  const commands: string[] = [];
  const auto = options.autoWorkers ?? true;
  const machine = supervisorMachine.provide({
    actors: {
      listener: listenerMachine.provide({
        actors: {
          openListener: fromPromise(async () => {}),
          discardWaiting: fromPromise<void>(async () => {}),
          closeListener: fromPromise<void>(async () => {}),
          forceClose: fromPromise<void>(async () => {}),
          unloadWorkers: fromPromise<void>(async () => {}),
        },
      }),
      gatherStartFacts: fromPromise<StartFacts, CheckInput>(({ input }) => {
        calls.push(`check ${input.job.id}`);
        if (world.failNext) {
          const message = world.failNext;
          world.failNext = null;
          return Promise.reject(new Error(message));
        }
        if (holdFacts) return new Promise((resolve, reject) => pendingFacts.push({ input, resolve, reject }));
        return Promise.resolve(factsFrom(world, input));
      }),
      watchGpus: fromCallback<SupervisorEvent>(() => {
        calls.push('watch start');
        return () => calls.push('watch stop');
      }),
      // Simulated worker children: each starts its process on the supervisor's start order (it
      // reports it started and loaded), and carries out its unload command at once and reports it
      // (a stuck one reports its process lost instead).
      ...Object.fromEntries(
        WORKER_KINDS.map((kind) => [
          WORKER_IDS[kind],
          options.workers?.[kind] ??
            fromCallback<{ type: 'worker.start'; start: WorkerStart } | { type: 'worker.unload'; generation: number; reason: string }>(({ receive, sendBack }) => {
              receive((command) => {
                if (command.type === 'worker.start') {
                  const { generation } = command.start;
                  if (!auto) return;
                  sendBack({ type: 'worker.started', kind, generation, pid: ++pid });
                  const loadMs = options.loadMs?.(kind, command.start.profileId);
                  sendBack({ type: 'worker.loaded', kind, generation, ...(loadMs === undefined ? {} : { loadMs }) });
                  return;
                }
                commands.push(`${kind} ${command.generation}`);
                if (!auto) return;
                const stuck = options.stuck?.includes(kind);
                const worker = actor.getSnapshot().context.workers[kind];
                sendBack(stuck ? { type: 'worker.lost', kind, generation: command.generation, pid: worker.pid } : { type: 'worker.unloaded', kind, generation: command.generation });
              });
            }),
        ]),
      ),
    },
  });
  const actor = createActor(machine, {
    clock,
    ...(options.inspect ? { inspect: options.inspect } : {}),
    input: {
      listener: { address: { host: '127.0.0.1', port: 8120 }, portRange: { first: 1024, last: 65535 }, rememberedRunning: false, drainLimitMs: 1000 },
      queue: options.maxWaiting === undefined ? {} : { maxWaiting: options.maxWaiting },
      ...(options.scheduling ? { scheduling: options.scheduling } : {}),
    },
  });
  const emitted: SupervisorEmitted[] = [];
  /** When each job was granted, for the time it held its reservation (the adapter measures it so). */
  const grantedAt = new Map<string, number>();
  actor.on('*', (event) => {
    emitted.push(event);
    if (event.type === 'gpu.granted' && !event.step) grantedAt.set(event.jobId, clock.now());
  });
  actor.start();
  let n = 0;

  const h = {
    actor,
    clock,
    world,
    calls,
    emitted,
    commands,
    /** Lets promise actors (the start check) settle. */
    async settle(rounds = 4) {
      for (let i = 0; i < rounds; i++) await new Promise((resolve) => setImmediate(resolve));
    },
    holdChecks(on = true) {
      holdFacts = on;
    },
    pendingChecks: pendingFacts,
    async releaseChecks() {
      for (const p of pendingFacts.splice(0)) p.resolve(factsFrom(world, p.input));
      await h.settle();
    },
    spec(over: Partial<JobSpec> = {}): JobSpec {
      return { id: `j${++n}`, kind: 'chat', source: 'api', profileId: 'a', revision: 1, slots: 1, device: 'cpu', whenBusy: 'wait', profile: null, at: clock.now(), ...over };
    },
    /** Submits a job and lets its check run; returns its id. */
    async submit(over: Partial<JobSpec> = {}): Promise<string> {
      const job = h.spec(over);
      actor.send({ type: 'gpu.reserve', job });
      await h.settle();
      return job.id;
    },
    async send(event: SupervisorEvent) {
      actor.send(event);
      await h.settle();
    },
    /** The adapter's release: it says how long the job held its reservation, on the simulated clock. */
    releaseEvent(jobId: string): SupervisorEvent {
      const at = grantedAt.get(jobId);
      return at === undefined ? { type: 'gpu.release', jobId } : { type: 'gpu.release', jobId, heldMs: clock.now() - at };
    },
    async release(jobId: string) {
      await h.send(h.releaseEvent(jobId));
    },
    /** Every event emitted for one job, in order. */
    outcome(jobId: string) {
      return emitted.filter((e) => 'jobId' in e && e.jobId === jobId).map((e) => (e.type === 'gpu.denied' ? `denied ${e.code}` : e.type === 'gpu.revoked' ? `revoked ${e.code}` : e.type === 'gpu.granted' ? `granted${e.step ? ' image step' : ''}${e.start ? ' +start' : ''}` : e.type));
    },
    granted(jobId: string) {
      return emitted.some((e) => e.type === 'gpu.granted' && e.jobId === jobId);
    },
    grant(jobId: string) {
      return emitted.find((e): e is Extract<SupervisorEmitted, { type: 'gpu.granted' }> => e.type === 'gpu.granted' && e.jobId === jobId);
    },
    denial(jobId: string) {
      return emitted.find((e): e is Extract<SupervisorEmitted, { type: 'gpu.denied' }> => e.type === 'gpu.denied' && e.jobId === jobId);
    },
    unloads(kind?: WorkerKind) {
      return emitted.filter((e): e is Extract<SupervisorEmitted, { type: 'worker.unload' }> => e.type === 'worker.unload' && (!kind || e.kind === kind));
    },
    context: () => actor.getSnapshot().context,
    worker: (kind: WorkerKind) => actor.getSnapshot().context.workers[kind],
    /** The generation of the current start of a worker kind, for reports a test sends by hand. */
    gen: (kind: WorkerKind) => actor.getSnapshot().context.workers[kind].generation,
    waiting: () => waitingOrder(actor.getSnapshot().context.jobs),
    queueJobs: () => (actor.system.get('queue')?.getSnapshot() as { context: { jobs: Array<{ id: string }> } }).context.jobs.map((j) => j.id),
  };
  return h;
}

export type SupervisorHarness = ReturnType<typeof supervisorHarness>;
