// The composition root: the service made of small named steps. The state directory is prepared
// and its stores opened; the inference listener's adapter and the supervisor (the root actor, with
// the listener and the queue as its children) are made; the worker adapters and the operator's
// tests are built on them; the audio policy and the build watch are attached; the actors start;
// and only then the admin listener listens, so that its first request finds the system up. It is
// the only module that knows every layer: the Fastify apps (src/app.ts), the worker adapters
// (src/workers/) and the system (src/system/).
import { readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { waitFor } from 'xstate';
import { TAGS } from '../machines/ids.js';
import { audioPolicyMachine } from '../machines/audioPolicy/index.js';
import { chatWorkerMachine } from '../machines/chatWorker/index.js';
import { enhancerWorkerMachine } from '../machines/enhancerWorker/index.js';
import { imageWorkerMachine } from '../machines/imageWorker/index.js';
import { listenerMachine } from '../machines/listener/index.js';
import { expiryTimer, queueMachine } from '../machines/queue/index.js';
import { sttWorkerMachine } from '../machines/sttWorker/index.js';
import { supervisorMachine } from '../machines/supervisor/index.js';
import { ttsWorkerMachine } from '../machines/ttsWorker/index.js';
import { bindingOff, parentDeathLauncher, SETPRIV_VARIABLE } from './adapters/parentDeath.js';
import { localCommandLinesHidden } from './adapters/procVisibility.js';
import { buildAdminApp, buildInferenceApp, type App } from './app.js';
import { withSavedPortRange, type Config } from './config.js';
import { AudioPolicyStore } from './store/audioPolicy.js';
import { removeAdminRecord, writeAdminRecord } from './store/adminRecord.js';
import { EndpointStore, type EndpointRecord } from './store/endpoint.js';
import { ensurePrivateDir } from './store/files.js';
import { ProfileStore } from './store/profiles.js';
import { loadRecipes } from './store/enhancers.js';
import { EnhancerInstalls } from './system/enhancers/enhancerInstalls.js';
import { ModelFiles } from './system/models/modelFiles.js';
import { ModelHub } from './system/models/modelHub.js';
import { ModelPulls } from './system/models/modelPulls.js';
import { gatherRoom } from './system/startFacts.js';
import { SecretStore } from './store/secrets.js';
import { AudioPolicies } from './system/audioPolicy.js';
import { BuildWatcher } from './system/catalog/builds.js';
import { catalogOf } from './system/catalog/catalog.js';
import { Counters } from './system/observe/counters.js';
import { RecentRequests } from './system/observe/recentRequests.js';
import { ChartFeed } from './system/observe/charts.js';
import { HostFacts } from './system/host.js';
import { UploadRoom } from './workers/uploadRoom.js';
import { createInspection, inspectBoth } from './system/observe/inspect.js';
import { boundAddress, InferenceListener, listenerOf, watchListener, type ListenerActor } from './system/listener.js';
import { isListenError, listenProblem, StartFailure } from './system/listenProblem.js';
import type { Logger } from './system/observe/log.js';
import { LogTail } from './system/observe/logTail.js';
import { Metrics } from './system/observe/metrics.js';
import { Scheduler } from './system/scheduler.js';
import { SessionStore } from './system/sessions.js';
import { endpointStatus, statusWord } from './system/observe/status.js';
import { Extensions } from './system/extensions.js';
import { createSupervisor, type SupervisorDeps } from './system/supervisor.js';
import { restartOnNewRevision } from './system/reload.js';
import { WorkerHooks } from './system/workers.js';
import { ChatWorker } from './workers/chat/chat.js';
import { CHAT_LIMITS, type ChatLimits } from './workers/chat/chatRequest.js';
import { ChatTests } from './workers/chat/chatTests.js';
import { ResponseMemory } from './workers/chat/responseMemory.js';
import { CONSOLE_FEED_TIMING, ConsoleFeed, type ConsoleFeedTiming } from './workers/consoleFeed.js';
import { EnhancerWorker } from './workers/enhancer/enhancer.js';
import { EnhancerPreviews } from './workers/enhancer/enhancerPreviews.js';
import { ImageWorker } from './workers/image/image.js';
import { ImageTests } from './workers/image/imageTests.js';
import { sweepWorkerProcesses } from './workers/leftovers.js';
import type { WorkerDeps } from './workers/lifecycle.js';
import type { Service } from './service.js';
import { SttWorker } from './workers/speech/stt.js';
import { TtsWorker } from './workers/speech/tts.js';

export type { Service } from './service.js';

export interface StartOptions {
  log: Logger;
  /** The log tail the logger writes to beside stdout (the console reads it); an empty one when absent. */
  tail?: LogTail;
  /** Tests pass 0 to let the system choose the admin port. */
  adminPort?: number;
  /** Tests shorten the chat worker limits (spec 8: 120 s idle, 600 s SSE, 16 MiB buffered). */
  chatLimits?: ChatLimits;
  /** Tests shorten the wait before a failed warm preload is tried again (spec 3.6: "retried later"). */
  audioRetryMs?: number;
  /** Tests shorten the console feed's coalescing and keep-alive (default 500 ms, 5 s, 50 ms, 15 s). */
  consoleTiming?: Partial<ConsoleFeedTiming>;
  /** Tests shorten how long one image may take (default 60 min) and the grace before SIGKILL. */
  imageLimits?: { loadTimeLimitMs?: number; terminationGraceMs?: number };
  /** Tests shorten the prompt enhancer's grace before SIGKILL (default 10 s) and how long its process may outlive SIGKILL before it is lost (10 s). */
  enhancerLimits?: { terminationGraceMs?: number; killLimitMs?: number };
}

export interface Started {
  service: Service;
}

/** Job folders hold prompts and uploads only while their job runs; a crash may have left some. */
async function clearLeftoverJobs(jobsDir: string, log: Logger): Promise<void> {
  const left = await readdir(jobsDir);
  await Promise.all(left.map((name) => rm(path.join(jobsDir, name), { recursive: true, force: true })));
  if (left.length > 0) log.warn({ count: left.length }, 'removed job folders left over from an earlier run');
}

/** The state directory with its private folders, cleared of what a killed run left behind. */
async function prepareStateDir(config: Config, log: Logger): Promise<void> {
  await ensurePrivateDir(config.stateDir);
  await ensurePrivateDir(path.join(config.stateDir, 'jobs'));
  await ensurePrivateDir(path.join(config.stateDir, 'runtime'));
  // Where pulled models go (CONTRACT section 10), and the model folder when none is configured.
  await ensurePrivateDir(path.join(config.stateDir, 'models'));
  await clearLeftoverJobs(path.join(config.stateDir, 'jobs'), log);
  await sweepWorkerProcesses(path.join(config.stateDir, 'runtime'), log);
}

/**
 * What the machine leaves open to its local users, said once at the start: workers bound less to
 * the service's life without setpriv, or not at all when the setting is off
 * (src/adapters/parentDeath.ts), and image prompts on sd-cli's command line while /proc shows every
 * user's (src/adapters/procVisibility.ts).
 */
async function reportLocalExposure(env: NodeJS.ProcessEnv, log: Logger): Promise<void> {
  if (bindingOff(env)) {
    log.warn('SERVICE_DECK_SETPRIV=off: workers are started without setpriv --pdeathsig and without the process-group watchdog: a worker may outlive a killed service until its next start ends it');
  } else if (!(await parentDeathLauncher(env))) {
    log.warn(
      { setting: env[SETPRIV_VARIABLE] ?? null },
      'workers are started without setpriv --pdeathsig (util-linux 2.33 or newer; SERVICE_DECK_SETPRIV): only the watchdog of their process groups ends them when the service is killed',
    );
  }
  if (!(await localCommandLinesHidden())) {
    log.info('/proc is mounted without hidepid: while an image is made, local users can read its prompt on the sd-cli command line (mount -o remount,hidepid=invisible /proc hides it)');
  }
}

/**
 * The hub token for the prompt enhancer downloads: SERVICE_DECK_HUB_TOKEN is the model hub's, so
 * it goes to the enhancer hub only when that is the model hub (the same origin), never to a mirror
 * it was not made for.
 */
function enhancerToken(config: Config): string | undefined {
  const origin = (url: string) => URL.parse(url)?.origin ?? null;
  return origin(config.enhancerHub) !== null && origin(config.enhancerHub) === origin(config.modelHub) ? config.hubToken : undefined;
}

async function openStores(config: Config) {
  const endpoint = await EndpointStore.open(config.stateDir, config.firstApiPort);
  // The first start remembers its inference port (`--api-port`) at once: later starts keep it.
  if (!endpoint.existed) await endpoint.update({});
  // The token of a first start without SERVICE_DECK_API_TOKEN is made later, once the listeners
  // are bound and it can be shown (src/firstSecrets.ts).
  const opened = await SecretStore.open(config.stateDir, { password: config.firstPassword, token: config.firstToken });
  const profiles = await ProfileStore.open(config.stateDir, endpoint);
  const audioPolicy = await AudioPolicyStore.open(config.stateDir);
  return { endpoint, secrets: opened.store, profiles, audioPolicy };
}

/** The worker adapters (chat, STT, TTS, image and the prompt enhancer), each with its worker machine for the supervisor to run. */
function createWorkers(deps: WorkerDeps & { runtimeDir: string }, limits: Pick<StartOptions, 'imageLimits' | 'enhancerLimits'>) {
  const tts = new TtsWorker(deps);
  const image = new ImageWorker({ ...deps, ...limits.imageLimits });
  const stt = new SttWorker(deps);
  const chat = new ChatWorker(deps);
  const enhancer = new EnhancerWorker({ ...deps, ...limits.enhancerLimits });
  return { chat, stt, tts, image, enhancer };
}

/**
 * Closes the admin listener: open event streams end (its preClose hook), idle connections close,
 * and a second later whatever is still open is ended too (a connection that never sent a request,
 * as browsers and fetch open ahead, is not idle to Node and would hold the close for a minute).
 */
async function closeAdmin(admin: App, graceMs = 1_000): Promise<void> {
  const force = setTimeout(() => admin.server.closeAllConnections(), graceMs);
  try {
    await admin.close();
  } finally {
    clearTimeout(force);
  }
}

/**
 * Opens the admin listener on a service that already runs. When its port cannot be bound the
 * service that was started is ended again (its actors, workers and an inference listener it may
 * have begun to restore), and the caller gets a StartFailure that names the cause and the fix.
 */
async function listenAdmin(admin: App, address: { host: string; port: number }, shutdown: () => Promise<void>): Promise<void> {
  try {
    await admin.listen(address);
  } catch (error) {
    await shutdown().catch(() => undefined);
    if (!isListenError(error)) throw error;
    const problem = listenProblem(error, {
      port: address.port,
      portFix: 'start with --ui-port <port> (or SERVICE_DECK_UI_PORT=<port>)',
      hostFix: 'start with --ui-host 127.0.0.1 (or SERVICE_DECK_UI_HOST), or an address of this machine',
    });
    throw new StartFailure(`the operator console cannot listen on ${address.host}:${address.port}: ${problem}`, { cause: error });
  }
}

/**
 * The configuration with the inference port range in force (src/config.ts, withSavedPortRange),
 * said once in the log; an environment range that the installer's saved range outweighs is a warning.
 */
function portRangeInForce(loaded: Config, record: EndpointRecord, log: Logger): Config {
  const config = withSavedPortRange(loaded, record.api_ports);
  const { first, last } = config.apiPorts;
  log.info({ first, last, from: config.apiPortsFrom }, 'inference ports');
  const env = loaded.env.SERVICE_DECK_API_PORTS;
  if (config.apiPortsFrom === 'saved' && loaded.apiPortsFrom === 'env' && (loaded.apiPorts.first !== first || loaded.apiPorts.last !== last)) {
    log.warn(
      `SERVICE_DECK_API_PORTS=${env ?? ''} is not used: endpoint.json keeps the range ${first}-${last} that \`service-deck update --api-ports\` saved (run it again to change the range)`,
    );
  }
  return config;
}

export async function startService(loaded: Config, options: StartOptions): Promise<Started> {
  const { log } = options;
  await prepareStateDir(loaded, log);
  await reportLocalExposure(loaded.env, log);
  const stores = await openStores(loaded);
  const { endpoint, secrets, profiles } = stores;
  /** What `endpoint.json` remembered from before this start. */
  const record = endpoint.record;
  const config = portRangeInForce(loaded, record, log);

  const extensions = new Extensions(endpoint, log);
  const { memoryMiB, ttlSeconds } = config.responses;
  const responseMemory = new ResponseMemory({ maxBytes: memoryMiB * 1024 * 1024, ttlMs: ttlSeconds * 1000, log });
  responseMemory.forgetWhenOff(extensions);
  const host = new HostFacts(config.stateDir);
  // The model folders and the hub (CONTRACT section 10): forecasts on the room probed at the time.
  const room = () => gatherRoom({ config, ownPids: () => new Set<number>() });
  const models = new ModelFiles({ dirs: config.modelDirs, room });
  const modelHub = new ModelHub({ hub: config.modelHub, token: config.hubToken, room });
  const enhancers = await EnhancerInstalls.open({
    dir: path.join(config.stateDir, 'enhancers'),
    recipes: await loadRecipes(config.enhancerRecipes),
    hub: config.enhancerHub,
    // Through the service, so that a test can put another host reader in.
    room: (dir) => service.host.freeBytes(dir),
    log,
    token: enhancerToken(config),
    // A file a model pull holds, verified, is linked into the store instead of downloaded again.
    shared: (file) => pulls.verifiedCopy(file),
  });
  // Pulled models land in <state>/models, whatever folder SERVICE_DECK_MODEL_DIRS lists first; they resume once the listeners are up.
  const pulls = await ModelPulls.open({
    dir: path.join(config.stateDir, 'models'),
    hub: config.modelHub,
    token: config.hubToken,
    room: (dir) => service.host.freeBytes(dir),
    log,
    shared: (file) => enhancers.verifiedCopy(file),
  });
  const catalog = catalogOf(config, profiles);
  const { lookup } = catalog;
  const hooks = new WorkerHooks();
  const counters = new Counters();
  const sessions = new SessionStore();
  const inspection = await createInspection(config.inspect, { log, port: config.inspectPort, production: config.production });
  // The console's chart feed sees every actor, whatever the inspector mode; it knows every machine
  // definition before an actor of it runs.
  const charts = new ChartFeed([
    supervisorMachine,
    listenerMachine,
    queueMachine,
    expiryTimer,
    chatWorkerMachine,
    imageWorkerMachine,
    enhancerWorkerMachine,
    sttWorkerMachine,
    ttsWorkerMachine,
    audioPolicyMachine,
  ]);
  const metrics = new Metrics({ config, profiles });
  const inspect = inspectBoth((event) => {
    charts.observe(event);
    metrics.observe(event);
  }, inspection);

  const inference = new InferenceListener({
    build: () => buildInferenceApp(service),
    supervisor: () => supervisor,
    log,
    unloadTimeoutMs: config.drainLimitMs + 60_000,
  });
  // The worker adapters make their machines with the real engines; the supervisor runs them as its children.
  const { chat, stt, tts, image, enhancer } = createWorkers({ workers: hooks, log, lookup, env: config.env, runtimeDir: path.join(config.stateDir, 'runtime') }, options);
  const adapters = [chat, stt, tts, image, enhancer] as const;
  const workerMachines = Object.fromEntries(adapters.map((worker) => [worker.kind, { logic: worker.logic, limits: worker.limits }])) as SupervisorDeps['workerMachines'];
  const supervisor = createSupervisor({ config, lookup, log, inspect, listener: inference, record, workerMachines, profiles });
  metrics.attach(supervisor);
  const listenerRef = () => listenerOf(supervisor) as ListenerActor;
  const scheduler = new Scheduler(supervisor);
  const builds = new BuildWatcher({ supervisor, lookup, log, pollMs: config.buildPollMs });
  const audio = new AudioPolicies({
    store: stores.audioPolicy,
    supervisor,
    scheduler,
    profiles,
    lookup,
    workers: { tts, stt },
    // The listener child is gone once the service has ended.
    accepting: () => listenerOf(supervisor)?.getSnapshot().hasTag(TAGS.accepting) ?? false,
    watchListener: (onChange) => listenerRef().subscribe({ next: onChange }),
    log,
    ...(options.audioRetryMs === undefined ? {} : { retryMs: options.audioRetryMs }),
    inspect,
  });

  // A loaded worker whose profile gets a new revision is started anew at once (spec 3.2), after the supervisor heard of the save.
  restartOnNewRevision({
    supervisor,
    scheduler,
    profiles,
    workers: { chat, tts, stt },
    accepting: () => listenerOf(supervisor)?.getSnapshot().hasTag(TAGS.accepting) ?? false,
    log,
  });

  /** Since when a stop is in progress (the listener's watch tells, once the supervisor has started). */
  let stopSince = (): string | null => null;
  let shuttingDown: Promise<void> | undefined;

  // The operator's tests, the enhancer preview and the console feed, each on the parts it uses.
  const chatLimits = options.chatLimits ?? CHAT_LIMITS;
  const logs = options.tail ?? new LogTail();
  const recent = new RecentRequests();
  const imageJobParts = { config, scheduler, supervisor, image, enhancer, enhancers };
  const imageTests = new ImageTests(imageJobParts);
  const enhancerPreviews = new EnhancerPreviews(imageJobParts);
  const chatTests = new ChatTests({ scheduler, chat, log }, chatLimits);
  const status = () =>
    endpointStatus({
      config,
      listener: listenerRef(),
      supervisor,
      scheduler,
      secrets,
      counters,
      workers: hooks,
      catalog,
      builds,
      extensions,
      boundPort: () => inference.address()?.port,
      stopSince: () => stopSince(),
      since: (kind) => hooks.since(kind),
      progress: (generation) => image.progress(generation),
    });
  const consoleFeed = new ConsoleFeed(
    { status, audio, charts, logs, log, counters, profiles, extensions, recent, chatTests, imageTests, enhancerPreviews, enhancers, pulls },
    { ...CONSOLE_FEED_TIMING, ...options.consoleTiming },
  );

  const service: Service = {
    config,
    log,
    logs,
    secrets,
    endpoint,
    extensions,
    responseMemory,
    profiles,
    catalog,
    sessions,
    counters,
    recent,
    metrics,
    workers: hooks,
    supervisor,
    scheduler,
    builds,
    chat,
    stt,
    tts,
    image,
    enhancer,
    models,
    modelHub,
    pulls,
    imageTests,
    enhancerPreviews,
    audio,
    chatLimits,
    chatTests,
    consoleFeed,
    listener: listenerRef,
    inspection,
    charts,
    host,
    // Through the service's host facts, so that a test can put another statfs in.
    uploads: new UploadRoom(path.join(config.stateDir, 'jobs'), (dir) => service.host.freeBytes(dir)),
    enhancers,
    accepting: () => listenerRef().getSnapshot().hasTag(TAGS.accepting),
    adminAddress: () => boundAddress(admin),
    inferenceAddress: () => inference.address(),
    state: () => statusWord(listenerRef()),
    status,
    /** Safe to call more than once: later calls wait for the first. */
    shutdown() {
      shuttingDown ??= (async () => {
        chatTests.cancel();
        imageTests.cancel();
        listenerRef().send({ type: 'service.shutdown' });
        await waitFor(supervisor, (s) => s.status === 'done', { timeout: config.drainLimitMs + 90_000 }).catch((error: unknown) => {
          log.error({ err: error }, 'the listener did not stop in time');
        });
        audio.stop();
        await enhancers.stop();
        await pulls.stop();
        builds.stop();
        supervisor.stop();
        for (const worker of [chat, stt, tts, image, enhancer]) worker.stop();
        responseMemory.clear();
        await endpoint.flushed();
        await closeAdmin(admin);
        await removeAdminRecord(config.stateDir, process.pid);
        await inspection.close();
      })();
      return shuttingDown;
    },
  };

  const admin = await buildAdminApp(service);
  supervisor.start();
  // The adapters reach their machines, the supervisor's children, once it runs.
  for (const worker of adapters) worker.attach(supervisor.system.get(worker.systemId) as never);
  builds.start();
  stopSince = watchListener(listenerRef(), endpoint, log).stopSince;
  audio.start();
  // The admin listener opens last: its first request finds the system up, never half made.
  await listenAdmin(admin, { host: config.uiHost, port: options.adminPort ?? config.uiPort }, service.shutdown);
  const bound = service.adminAddress() ?? { host: config.uiHost, port: config.uiPort };
  log.info({ host: config.uiHost, port: bound.port }, 'admin listener started');
  await writeAdminRecord(config.stateDir, { ...bound, pid: process.pid, started_at: new Date().toISOString() });
  // Pulls a restart cut off resume now that the service is up.
  pulls.start();
  if (record.running) {
    await waitFor(listenerRef(), (s) => !s.matches('starting') && !s.matches('restoring'), { timeout: 30_000 });
  }
  return { service };
}
