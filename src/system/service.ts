// Wires the machines to the adapters: opens the state directory, creates the root actor (the
// supervisor, with the listener and the queue as its children) with the real actors and the
// inspector switch, writes the remembered state whenever the listener machine changes it, carries
// the supervisor's worker commands to the worker adapters, tells it about profile changes, and
// serves the admin listener.
import { readdir, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { createActor, fromPromise, waitFor, type Actor } from 'xstate';
import { SYSTEM_IDS, TAGS } from '../../machines/ids.js';
import { MIB } from '../../machines/supervisor/index.js';
import { listenerMachine, type ListenerAddress } from '../../machines/listener/index.js';
import { supervisorMachine, type JobRecord, type SupervisorEmitted, type SupervisorEvent, type WorkerKind } from '../../machines/supervisor/index.js';
import type { Config } from '../config.js';
import { probeGpus, type Gpu, type GpuInventory } from '../adapters/gpus.js';
import { ramBudget, readRamFacts } from '../adapters/memory.js';
import type { RuntimeLookup } from '../adapters/runtimes.js';
import { EndpointStore } from '../store/endpoint.js';
import { ensurePrivateDir } from '../store/files.js';
import { ProfileStore } from '../store/profiles.js';
import { SecretStore } from '../store/secrets.js';
import { ask } from './ask.js';
import { Catalog } from './catalog.js';
import { Counters } from './counters.js';
import { diagnostics, type MemoryStatus, type QueueStatus } from './diagnostics.js';
import { createInspection, type Inspection } from './inspect.js';
import type { Logger } from './log.js';
import { Scheduler, type SupervisorActor } from './scheduler.js';
import { SessionStore } from './sessions.js';
import { supervisorAdapters } from './startFacts.js';
import { WorkerHooks } from './workers.js';
import { BuildWatcher } from './builds.js';
import { ChatWorker } from '../workers/chat.js';
import { sweepLeftovers } from '../workers/llamaServer.js';
import { sweepWorkerProcesses } from '../workers/leftovers.js';
import { SttWorker } from '../workers/stt.js';
import { TtsWorker } from '../workers/tts.js';
import { ImageWorker } from '../workers/image.js';
import { ImageTests } from '../workers/imageTests.js';
import { ChatTests } from '../workers/chatTests.js';
import { AudioPolicies } from './audioPolicy.js';
import { AudioPolicyStore } from '../store/audioPolicy.js';
import { CHAT_LIMITS, type ChatLimits } from '../workers/chatRequest.js';

export type ListenerActor = Actor<typeof listenerMachine>;

/** How often a stopping listener ends the connections that have fallen idle. */
const IDLE_SWEEP_MS = 200;

/**
 * What the service needs of an HTTP listener. The entry (src/compose.ts) builds the two listeners
 * and hands their builders in, so this layer knows no HTTP framework.
 */
export interface HttpListener {
  listen(options: { host: string; port: number }): Promise<unknown>;
  close(): Promise<void>;
  readonly server: { address(): AddressInfo | string | null; closeAllConnections(): void; closeIdleConnections(): void };
}

export interface ListenerBuilders {
  inference(service: Service): Promise<HttpListener>;
  admin(service: Service): Promise<HttpListener>;
}


export interface Service {
  config: Config;
  log: Logger;
  secrets: SecretStore;
  endpoint: EndpointStore;
  profiles: ProfileStore;
  catalog: Catalog;
  sessions: SessionStore;
  counters: Counters;
  workers: WorkerHooks;
  /** The root actor: reservations, the queue, the workers' load state. */
  supervisor: SupervisorActor;
  scheduler: Scheduler;
  /** The chat worker (spec 3.2): its machine, the llama-server process, the connections of a loaded start. */
  chat: ChatWorker;
  /** The STT worker (spec 3.5): one engine process on the CPU, one recording at a time. */
  stt: SttWorker;
  /** The TTS worker (spec 3.4): espeak-ng on the CPU, ready for further requests once loaded. */
  tts: TtsWorker;
  /** The image worker (spec 3.3): one sd-cli process per image, on every GPU. */
  image: ImageWorker;
  /** The operator's image test (spec 3.3, 4.7): one job, in RAM only. */
  readonly imageTests: ImageTests;
  /** The audio memory policy per speech worker kind (spec 3.6). */
  audio: AudioPolicies;
  /** The chat worker's HTTP limits (spec 8). */
  chatLimits: ChatLimits;
  /** The operator's chat test (spec 2.5, 4.7): one job, in RAM only. */
  readonly chatTests: ChatTests;
  /** Which build each worker runs; a new one on disk unloads it when idle (spec 3.5, 9). */
  builds: BuildWatcher;
  /** The supervisor's child that owns the inference listener (spec 3.1). */
  readonly listener: ListenerActor;
  inspection: Inspection;
  /** Whether the inference listener takes new requests (the listener machine's `accepting` tag). */
  accepting(): boolean;
  /** The address the admin listener is bound to, once it listens. */
  adminAddress(): { host: string; port: number } | undefined;
  /** The inference listener's bound port (differs from the configured one only for port 0 in tests). */
  inferenceAddress(): { host: string; port: number } | undefined;
  /** running, stopping or stopped, from the listener machine. */
  state(): EndpointStatus['status'];
  status(): Promise<EndpointStatus>;
  /** SIGTERM path: stop accepting, let running answers finish (bounded), unload workers, close. */
  shutdown(): Promise<void>;
}

export interface EndpointStatus {
  status: 'running' | 'stopping' | 'stopped';
  host: string;
  port: number;
  remembered_running: boolean;
  error: { code: string; message: string } | null;
  /**
   * While the endpoint stops: since when, and what it waits for before the workers are unloaded
   * (requests on the inference listener whose answer is not over, and jobs that hold a
   * reservation, admin tests included). Null otherwise.
   */
  stop: { since: string; open_requests: number; running_jobs: number } | null;
  /** Set while secrets.json on disk is damaged and the last good secrets stay in force. */
  secrets_problem: string | null;
  counters: ReturnType<Counters['snapshot']>;
  workers: ReturnType<WorkerHooks['statuses']>;
  queue: QueueStatus;
  profiles: Awaited<ReturnType<Catalog['views']>>;
  gpus: Gpu[];
  gpu_probe: { source: GpuStatus['source']; problem: string | null };
  memory: MemoryStatus;
}

/** The inventory as the status shows it: a simulated inventory that cannot be read is `failed`. */
type GpuStatus = Omit<GpuInventory, 'source'> & { source: GpuInventory['source'] | 'failed' };

/** The address a listening app is bound to (the real port when it was asked for port 0). */
function boundAddress(app: HttpListener | undefined): { host: string; port: number } | undefined {
  const address = app?.server.address();
  return address && typeof address === 'object' ? { host: address.address, port: address.port } : undefined;
}

/** Jobs that hold a reservation for a request or a test (a warm preload is no answer to wait for). */
const runningJobs = (jobs: Record<string, JobRecord>) => Object.values(jobs).filter((j) => j.phase === 'running' && j.spec.source !== 'preload').length;

function statusWord(listener: ListenerActor): EndpointStatus['status'] {
  const snapshot = listener.getSnapshot();
  if (snapshot.matches('running')) return 'running';
  if (snapshot.matches('stopping') || snapshot.matches('off')) return 'stopping';
  return 'stopped';
}

/** Job folders hold prompts and uploads only while their job runs; a crash may have left some. */
async function clearLeftoverJobs(jobsDir: string, log: Logger): Promise<void> {
  const left = await readdir(jobsDir);
  await Promise.all(left.map((name) => rm(path.join(jobsDir, name), { recursive: true, force: true })));
  if (left.length > 0) log.warn({ count: left.length }, 'removed job folders left over from an earlier run');
}

export interface StartOptions {
  log: Logger;
  /** The builders of the admin and the inference listener (src/compose.ts gives the Fastify apps). */
  listeners: ListenerBuilders;
  /** Tests pass 0 to let the system choose the admin port. */
  adminPort?: number;
  /** Tests shorten the chat worker limits (spec 8: 120 s idle, 600 s SSE, 16 MiB buffered). */
  chatLimits?: ChatLimits;
  /** Tests shorten the wait before a failed warm preload is tried again (spec 3.6: "retried later"). */
  audioRetryMs?: number;
  /** Tests shorten how long one image may take (default 60 min) and the grace before SIGKILL. */
  imageLimits?: { loadTimeLimitMs?: number; terminationGraceMs?: number };
}

export interface Started {
  service: Service;
  /** The API token generated at this first start (shown once), if any. */
  generatedToken?: string;
}

export async function openService(config: Config, options: StartOptions): Promise<Started> {
  const { log } = options;
  await ensurePrivateDir(config.stateDir);
  await ensurePrivateDir(path.join(config.stateDir, 'jobs'));
  await ensurePrivateDir(path.join(config.stateDir, 'runtime'));
  await clearLeftoverJobs(path.join(config.stateDir, 'jobs'), log);
  await sweepLeftovers(path.join(config.stateDir, 'runtime'), log);
  await sweepWorkerProcesses(path.join(config.stateDir, 'runtime'), log);

  const endpoint = await EndpointStore.open(config.stateDir);
  const opened = await SecretStore.open(config.stateDir, { password: config.firstPassword, token: config.firstToken, generateToken: true });
  const secrets = opened.store;
  const profiles = await ProfileStore.open(config.stateDir, endpoint);
  const audioPolicy = await AudioPolicyStore.open(config.stateDir);
  const lookup: RuntimeLookup = { env: config.env, cacheDir: config.cacheDir };
  // The profile view notes a missing fit tool only where GPUs are present (real or simulated).
  const catalog = new Catalog(profiles, lookup, () => probeGpus(config.env, new Set()).then((inventory) => inventory.gpus.length > 0, () => false));
  const workers = new WorkerHooks();
  const counters = new Counters();
  const sessions = new SessionStore();
  const inspection = await createInspection(config.inspect, { log, port: config.inspectPort, production: config.production });

  let inference: HttpListener | undefined;
  let inferenceClosing: Promise<void> | undefined;

  // The real actors behind the listener machine's placeholders.
  const listenerLogic = listenerMachine.provide({
    actors: {
      openListener: fromPromise<void, ListenerAddress>(async ({ input }) => {
        const app = await options.listeners.inference(service);
        try {
          await app.listen({ host: input.host, port: input.port });
        } catch (error) {
          await app.close();
          throw error;
        }
        inference = app;
        inferenceClosing = undefined;
        supervisor.send({ type: 'endpoint.opened' });
        log.info({ host: input.host, port: inferenceAddress()?.port }, 'inference listener started');
      }),
      discardWaiting: fromPromise(async () => {
        await askSupervisor({ type: 'endpoint.discard' }, 15_000);
      }),
      closeListener: fromPromise(async () => {
        const app = inference;
        inferenceClosing ??= app?.close();
        // A keep-alive connection that falls idle once its answer is over would hold the close
        // open until the client hangs up: each is ended as soon as it is idle.
        const idle = setInterval(() => app?.server.closeIdleConnections(), IDLE_SWEEP_MS);
        try {
          await inferenceClosing;
        } finally {
          clearInterval(idle);
        }
        // The admin chat and image tests run on the same workers: they finish too before the unload.
        await waitFor(supervisor, (s) => runningJobs(s.context.jobs) === 0);
      }),
      forceClose: fromPromise(async () => {
        log.warn('answers still running after the drain limit: closing their connections');
        inference?.server.closeAllConnections();
        await inferenceClosing;
      }),
      unloadWorkers: fromPromise(async () => {
        await askSupervisor({ type: 'workers.unloadAll' }, config.drainLimitMs + 60_000);
        inference = undefined;
        log.info('inference listener stopped; workers unloaded');
      }),
    },
  });

  const ownPids = () => new Set(Object.values(supervisor.getSnapshot().context.workers).flatMap((w) => (w.pid === null ? [] : [w.pid])));
  const record = endpoint.record;
  const supervisor: SupervisorActor = createActor(
    supervisorMachine.provide({ actors: { listener: listenerLogic, ...supervisorAdapters({ config, lookup, ownPids }) } }),
    {
      systemId: SYSTEM_IDS.supervisor,
      input: {
        listener: {
          address: { host: record.host, port: record.port },
          portRange: config.apiPorts,
          rememberedRunning: record.running,
          drainLimitMs: config.drainLimitMs,
        },
      },
      inspect: inspection.inspect,
    },
  );
  const scheduler = new Scheduler(supervisor);
  const builds = new BuildWatcher({ supervisor, lookup, log, pollMs: config.buildPollMs });
  const tts = new TtsWorker({ runtimeDir: path.join(config.stateDir, 'runtime'), supervisor, workers, log, lookup, env: config.env, ...(inspection.inspect ? { inspect: inspection.inspect } : {}) });
  const image = new ImageWorker({
    runtimeDir: path.join(config.stateDir, 'runtime'),
    supervisor,
    workers,
    log,
    lookup,
    env: config.env,
    ...options.imageLimits,
    ...(inspection.inspect ? { inspect: inspection.inspect } : {}),
  });
  const stt = new SttWorker({ runtimeDir: path.join(config.stateDir, 'runtime'), supervisor, workers, log, lookup, env: config.env, ...(inspection.inspect ? { inspect: inspection.inspect } : {}) });
  const chat = new ChatWorker({
    supervisor,
    workers,
    log,
    lookup,
    runtimeDir: path.join(config.stateDir, 'runtime'),
    env: config.env,
    ...(inspection.inspect ? { inspect: inspection.inspect } : {}),
  });

  const audio = new AudioPolicies({
    store: audioPolicy,
    supervisor,
    scheduler,
    profiles,
    lookup,
    workers: { tts, stt },
    // The listener child is gone once the service has ended.
    accepting: () => (listenerRef() as ListenerActor | undefined)?.getSnapshot().hasTag(TAGS.accepting) ?? false,
    watchListener: (onChange) => listenerRef().subscribe({ next: onChange }),
    log,
    ...(options.audioRetryMs === undefined ? {} : { retryMs: options.audioRetryMs }),
    ...(inspection.inspect ? { inspect: inspection.inspect } : {}),
  });

  async function askSupervisor(event: { type: 'endpoint.discard' } | { type: 'workers.unloadAll' }, timeoutMs: number): Promise<void> {
    const replied = await ask<typeof supervisorMachine, Extract<SupervisorEmitted, { type: 'supervisor.reply' }>>(supervisor, 'supervisor.reply', event, { timeoutMs });
    if (!replied) throw new Error(`the supervisor did not answer ${event.type} within ${timeoutMs} ms`);
  }

  // The supervisor decides which worker goes; the worker adapters carry it out and report back.
  const since = new Map<WorkerKind, string>();
  supervisor.on('worker.unload', (event) => {
    log.info({ worker: event.kind, reason: event.reason }, 'unloading worker');
    workers
      .unload(event.kind, { generation: event.generation, reason: event.reason })
      .catch((error: unknown) => log.error({ err: error, worker: event.kind }, 'worker did not unload cleanly'))
      .finally(() => {
        since.delete(event.kind);
        supervisor.send({ type: 'worker.unloaded', kind: event.kind, generation: event.generation });
      });
  });
  supervisor.on('gpu.granted', (event) => {
    if (event.start) since.set(event.worker, new Date().toISOString());
  });
  supervisor.on('gpu.denied', (event) => log.info({ job: event.jobId, code: event.code }, 'reservation denied'));
  supervisor.on('gpu.revoked', (event) => log.warn({ job: event.jobId, code: event.code, reason: event.message }, 'reservation revoked'));

  // Waiting requests of a changed, deleted or unpublished profile are rejected (spec 3.7).
  const tellProfile = (id: string, revision: number | null) => {
    const event: SupervisorEvent = { type: 'profile.changed', profileId: id, revision, published: profiles.isPublished(id) };
    supervisor.send(event);
  };
  profiles.on('profile.changed', ({ id, revision }) => tellProfile(id, revision));
  profiles.on('publication.changed', ({ removed }) => {
    for (const id of removed) tellProfile(id, profiles.get(id)?.revision ?? null);
  });

  // Machines decide what is remembered; this adapter writes it.
  /** The supervisor's listener child (it exists once the supervisor has started). */
  const listenerRef = () => supervisor.system.get(SYSTEM_IDS.listener) as ListenerActor;
  let stopSince: string | null = null;
  const watchRemembered = () => {
    const listener = listenerRef();
    let remembered = listener.getSnapshot().context.remembered;
    listener.subscribe({
      next: (snapshot) => {
        const stopping = snapshot.matches('stopping');
        if (stopping && stopSince === null) stopSince = new Date().toISOString();
        else if (!stopping) stopSince = null;
        const next = snapshot.context.remembered;
        if (next === remembered) return;
        remembered = next;
        endpoint.update({ running: next.running, host: next.host, port: next.port }).catch((error: unknown) => {
          log.error({ err: error, file: endpoint.file }, 'cannot write the endpoint record');
        });
      },
      error: (error) => log.error({ err: error }, 'listener actor failed'),
    });
  };
  supervisor.subscribe({ error: (error) => log.error({ err: error }, 'supervisor actor failed') });

  const inferenceAddress = () => boundAddress(inference);
  let chatTests: ChatTests | undefined;
  let imageTests: ImageTests | undefined;
  let shuttingDown: Promise<void> | undefined;

  const service: Service = {
    config,
    log,
    secrets,
    endpoint,
    profiles,
    catalog,
    sessions,
    counters,
    workers,
    supervisor,
    scheduler,
    builds,
    chat,
    stt,
    tts,
    image,
    get imageTests() {
      imageTests ??= new ImageTests(service);
      return imageTests;
    },
    audio,
    chatLimits: options.chatLimits ?? CHAT_LIMITS,
    get chatTests() {
      chatTests ??= new ChatTests(service, service.chatLimits);
      return chatTests;
    },
    get listener() {
      return listenerRef();
    },
    inspection,
    accepting: () => listenerRef().getSnapshot().hasTag(TAGS.accepting),
    adminAddress: () => boundAddress(admin),
    inferenceAddress,
    state: () => statusWord(listenerRef()),
    async status() {
      const listener = listenerRef();
      const { context } = listener.getSnapshot();
      const ownPidSet = ownPids();
      const [inventory, ram] = await Promise.all([
        probeGpus(config.env, ownPidSet).catch((error: unknown): GpuStatus => ({ source: 'failed', gpus: [], problem: (error as Error).message })),
        readRamFacts(),
      ]);
      const supervised = supervisor.getSnapshot().context;
      const budget = ramBudget(ram, config.ramReserveMiB * MIB);
      const report = diagnostics(supervised, {
        now: Date.now(),
        times: (id) => scheduler.times(id),
        since: (kind) => since.get(kind) ?? null,
        progress: (generation) => image.progress(generation),
        build: (kind, generation) => builds.status(kind, generation),
      });
      return {
        status: statusWord(listener),
        host: context.address.host,
        port: inferenceAddress()?.port ?? context.address.port,
        remembered_running: context.remembered.running,
        error: context.error,
        stop: stopSince === null ? null : { since: stopSince, open_requests: counters.open, running_jobs: runningJobs(supervised.jobs) },
        secrets_problem: secrets.problem ?? null,
        counters: counters.snapshot(),
        workers: [...report.workers, ...workers.statuses().filter((w) => !report.workers.some((r) => r.kind === w.kind))],
        queue: report.queue,
        profiles: await catalog.views(),
        gpus: inventory.gpus,
        gpu_probe: { source: inventory.source, problem: inventory.problem ?? null },
        memory: {
          ram: {
            source: ram.source,
            host_total_mib: Math.floor(ram.hostTotalBytes / MIB),
            host_available_mib: Math.floor(ram.hostAvailableBytes / MIB),
            cgroup_limit_mib: ram.cgroup?.limitBytes == null ? null : Math.floor(ram.cgroup.limitBytes / MIB),
            cgroup_usage_mib: ram.cgroup ? Math.floor(ram.cgroup.usageBytes / MIB) : null,
            cgroup_inactive_file_mib: ram.cgroup ? Math.floor(ram.cgroup.inactiveFileBytes / MIB) : null,
            oom_kills: ram.cgroup?.oomKills ?? null,
            available_mib: Math.floor(ram.availableBytes / MIB),
            reserve_mib: config.ramReserveMiB,
            budget_mib: Math.floor(budget.budgetBytes / MIB),
            limited_by: budget.limitedBy,
            problem: ram.problem ?? null,
          },
          gpu_reserve_mib: inventory.gpus.map((g) => ({ uuid: g.uuid, reserve_mib: config.gpuReserveMiB.byGpu[g.uuid] ?? config.gpuReserveMiB.default })),
          note: 'Memory forecasts are predictions from the model metadata and the profiles, not proof of error-free operation.',
        },
      };
    },
    /** Safe to call more than once: later calls wait for the first. */
    shutdown() {
      shuttingDown ??= (async () => {
        chatTests?.cancel();
        imageTests?.cancel();
        listenerRef().send({ type: 'service.shutdown' });
        await waitFor(supervisor, (s) => s.status === 'done', { timeout: config.drainLimitMs + 90_000 }).catch((error: unknown) => {
          log.error({ err: error }, 'the listener did not stop in time');
        });
        audio.stop();
        builds.stop();
        supervisor.stop();
        chat.stop();
        stt.stop();
        tts.stop();
        image.stop();
        await endpoint.flushed();
        await admin.close();
        await inspection.close();
      })();
      return shuttingDown;
    },
  };

  const admin = await options.listeners.admin(service);
  await admin.listen({ host: config.uiHost, port: options.adminPort ?? config.uiPort });
  log.info({ host: config.uiHost, port: service.adminAddress()?.port }, 'admin listener started');
  supervisor.start();
  builds.start();
  watchRemembered();
  audio.start();
  if (record.running) {
    await waitFor(listenerRef(), (s) => !s.matches('starting') && !s.matches('restoring'), { timeout: 30_000 });
  }
  return opened.generatedToken === undefined ? { service } : { service, generatedToken: opened.generatedToken };
}
