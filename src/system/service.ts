// Wires the machines to the adapters: opens the state directory, creates the root actor (the
// listener machine for now; the supervisor of the scheduler issue takes that place) with the real
// actors and the inspector switch, writes the remembered state whenever the machine changes it,
// and serves the admin listener.
import { readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { createActor, fromPromise, waitFor, type Actor } from 'xstate';
import { TAGS } from '../../machines/ids.js';
import { listenerMachine, type ListenerAddress } from '../../machines/listener/index.js';
import type { App } from '../app.js';
import { buildAdminApp, buildInferenceApp } from '../app.js';
import type { Config } from '../config.js';
import { probeGpus, type Gpu, type GpuInventory } from '../adapters/gpus.js';
import type { RuntimeLookup } from '../adapters/runtimes.js';
import { EndpointStore } from '../store/endpoint.js';
import { ensurePrivateDir } from '../store/files.js';
import { ProfileStore } from '../store/profiles.js';
import { SecretStore } from '../store/secrets.js';
import { Catalog } from './catalog.js';
import { Counters } from './counters.js';
import { createInspection, type Inspection } from './inspect.js';
import type { Logger } from './log.js';
import { SessionStore } from './sessions.js';
import { WorkerHooks } from './workers.js';

export type ListenerActor = Actor<typeof listenerMachine>;

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
  listener: ListenerActor;
  inspection: Inspection;
  /** The admin listener's app (tests drive it with `inject`). */
  adminApp(): App | undefined;
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
  /** Set while secrets.json on disk is damaged and the last good secrets stay in force. */
  secrets_problem: string | null;
  counters: ReturnType<Counters['snapshot']>;
  workers: ReturnType<WorkerHooks['statuses']>;
  queue: { waiting: unknown[]; running: unknown[] };
  profiles: Awaited<ReturnType<Catalog['views']>>;
  gpus: Gpu[];
  gpu_probe: { source: GpuStatus['source']; problem: string | null };
  memory: Record<string, unknown>;
}

/** The inventory as the status shows it: a simulated inventory that cannot be read is `failed`. */
type GpuStatus = Omit<GpuInventory, 'source'> & { source: GpuInventory['source'] | 'failed' };

/** The address a listening app is bound to (the real port when it was asked for port 0). */
function boundAddress(app: App | undefined): { host: string; port: number } | undefined {
  const address = app?.server.address();
  return address && typeof address === 'object' ? { host: address.address, port: address.port } : undefined;
}

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
  /** Tests pass 0 to let the system choose the admin port. */
  adminPort?: number;
}

export interface Started {
  service: Service;
  /** The API token generated at this first start (shown once), if any. */
  generatedToken?: string;
}

export async function startService(config: Config, options: StartOptions): Promise<Started> {
  const { log } = options;
  await ensurePrivateDir(config.stateDir);
  await ensurePrivateDir(path.join(config.stateDir, 'jobs'));
  await ensurePrivateDir(path.join(config.stateDir, 'runtime'));
  await clearLeftoverJobs(path.join(config.stateDir, 'jobs'), log);

  const endpoint = await EndpointStore.open(config.stateDir);
  const opened = await SecretStore.open(config.stateDir, { password: config.firstPassword, token: config.firstToken, generateToken: true });
  const secrets = opened.store;
  const profiles = await ProfileStore.open(config.stateDir, endpoint);
  const lookup: RuntimeLookup = { env: config.env, cacheDir: config.cacheDir };
  const catalog = new Catalog(profiles, lookup);
  const workers = new WorkerHooks();
  const counters = new Counters();
  const sessions = new SessionStore();
  const inspection = await createInspection(config.inspect, { log, port: config.inspectPort, production: config.production });

  let inference: App | undefined;
  let inferenceClosing: Promise<void> | undefined;

  // The real actors behind the listener machine's placeholders.
  const machine = listenerMachine.provide({
    actors: {
      openListener: fromPromise<void, ListenerAddress>(async ({ input }) => {
        const app = await buildInferenceApp(service);
        try {
          await app.listen({ host: input.host, port: input.port });
        } catch (error) {
          await app.close();
          throw error;
        }
        inference = app;
        inferenceClosing = undefined;
        log.info({ host: input.host, port: inferenceAddress()?.port }, 'inference listener started');
      }),
      discardWaiting: fromPromise(() => workers.discardWaiting()),
      closeListener: fromPromise(async () => {
        inferenceClosing ??= inference?.close();
        await inferenceClosing;
      }),
      forceClose: fromPromise(async () => {
        log.warn('answers still running after the drain limit: closing their connections');
        inference?.server.closeAllConnections();
        await inferenceClosing;
      }),
      unloadWorkers: fromPromise(async () => {
        await workers.unloadAll();
        inference = undefined;
        log.info('inference listener stopped; workers unloaded');
      }),
    },
  });

  const record = endpoint.record;
  const listener = createActor(machine, {
    systemId: 'listener',
    input: {
      address: { host: record.host, port: record.port },
      portRange: config.apiPorts,
      rememberedRunning: record.running,
      drainLimitMs: config.drainLimitMs,
    },
    inspect: inspection.inspect,
  });

  // Machines decide what is remembered; this adapter writes it.
  let remembered = listener.getSnapshot().context.remembered;
  listener.subscribe({
    next: (snapshot) => {
      const next = snapshot.context.remembered;
      if (next === remembered) return;
      remembered = next;
      endpoint.update({ running: next.running, host: next.host, port: next.port }).catch((error: unknown) => {
        log.error({ err: error, file: endpoint.file }, 'cannot write the endpoint record');
      });
    },
    error: (error) => log.error({ err: error }, 'listener actor failed'),
  });

  const inferenceAddress = () => boundAddress(inference);

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
    listener,
    inspection,
    adminApp: () => admin,
    accepting: () => listener.getSnapshot().hasTag(TAGS.accepting),
    adminAddress: () => boundAddress(admin),
    inferenceAddress,
    state: () => statusWord(listener),
    async status() {
      const { context } = listener.getSnapshot();
      const ownPids = new Set(workers.statuses().flatMap((w) => (w.pid === null ? [] : [w.pid])));
      const inventory: GpuStatus = await probeGpus(config.env, ownPids).catch((error: unknown) => ({
        source: 'failed' as const,
        gpus: [],
        problem: (error as Error).message,
      }));
      return {
        status: statusWord(listener),
        host: context.address.host,
        port: inferenceAddress()?.port ?? context.address.port,
        remembered_running: context.remembered.running,
        error: context.error,
        secrets_problem: secrets.problem ?? null,
        counters: counters.snapshot(),
        workers: workers.statuses(),
        queue: { waiting: [], running: [] },
        profiles: await catalog.views(),
        gpus: inventory.gpus,
        gpu_probe: { source: inventory.source, problem: inventory.problem ?? null },
        memory: {},
      };
    },
    async shutdown() {
      listener.send({ type: 'service.shutdown' });
      await waitFor(listener, (s) => s.status === 'done', { timeout: config.drainLimitMs + 30_000 }).catch((error: unknown) => {
        log.error({ err: error }, 'the listener did not stop in time');
      });
      listener.stop();
      await endpoint.flushed();
      await admin.close();
      await inspection.close();
    },
  };

  const admin = await buildAdminApp(service);
  await admin.listen({ host: config.uiHost, port: options.adminPort ?? config.uiPort });
  log.info({ host: config.uiHost, port: service.adminAddress()?.port }, 'admin listener started');
  listener.start();
  if (record.running) {
    await waitFor(listener, (s) => !s.matches('starting') && !s.matches('restoring'), { timeout: 30_000 });
  }
  return opened.generatedToken === undefined ? { service } : { service, generatedToken: opened.generatedToken };
}
