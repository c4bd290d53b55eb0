// The supervisor's pure steps, row by row, called directly as the plan() rows call plan(): each
// row gives a context and an event and checks the next context and the effects, in their order.
// Every row runs on a deeply frozen context, so a step that changed what it was given would throw;
// rows check that the records a step does not change keep their identity. The last test checks
// that the rows cover every effect kind each step file produces (so none passes for want of rows).
import t from 'tap';
import type { Test } from 'tap';
import { emptyWorker, DEFAULT_SCHEDULING, WORKER_KINDS, type Effect, type JobRecord, type JobSpec, type StepResult, type SupervisorContext, type WorkerKind, type WorkerRecord } from '../../machines/supervisor/index.js';
import { enhancerDone } from '../../machines/supervisor/enhancer.js';
import { inventory } from '../../machines/supervisor/gpuWatch.js';
import { checkFailed, checkInput, schedule, verdict } from '../../machines/supervisor/grants.js';
import { audioMode, buildChanged, profileChanged } from '../../machines/supervisor/profiles.js';
import { fromQueue, grantAtOnce, release, reserve, switchBoundReached } from '../../machines/supervisor/reservations.js';
import { closeDown, discard, unloadAll, unloadRequest } from '../../machines/supervisor/stop.js';
import { replyUnloadWaiters, restartStalled, workerReport } from '../../machines/supervisor/workerReports.js';
import { defaultWorld, factsFrom, GIB, gpu, type World } from '../helpers/supervisor.js';
import { cpuPlan } from '../helpers/workerStart.js';

type StepFile = 'reservations' | 'grants' | 'workerReports' | 'gpuWatch' | 'profiles' | 'enhancer' | 'stop';

/** The effect kinds each step file produces. */
const PRODUCES: Record<StepFile, Array<Effect['type']>> = {
  reservations: ['deny', 'toQueue', 'grant', 'timer', 'queued', 'cancelTimer', 'abandonCheck', 'unload'],
  grants: ['toQueue', 'grant', 'start', 'deny', 'unload', 'revoke', 'cancelTimer'],
  workerReports: ['revoke', 'unload', 'reply'],
  gpuWatch: ['revoke', 'unload'],
  profiles: ['toQueue'],
  enhancer: ['unload', 'grant', 'start', 'revoke'],
  stop: ['toQueue', 'reply', 'revoke', 'unload', 'deny'],
};

interface Row {
  file: StepFile;
  row: string;
  /** The context the step is given (frozen before the step runs). */
  given: () => SupervisorContext;
  step: (context: SupervisorContext) => StepResult;
  /** The effects in their order; a function of the next context where they name what the step computed (a start plan). */
  effects?: Effect[] | ((next: SupervisorContext) => Effect[]);
  /** Instead: the effects as patterns, one for one (a message that quotes a forecast). */
  like?: object[];
  check?: (t: Test, next: SupervisorContext, given: SupervisorContext) => void;
}

const PROFILE = { name: 'chat-a', params: { model: '/models/a.gguf', context: 4096, slots: 2 } };

function spec(over: Partial<JobSpec> = {}): JobSpec {
  return { id: 'j1', kind: 'chat', source: 'api', profileId: 'a', revision: 1, slots: 2, device: 'cpu', whenBusy: 'wait', profile: PROFILE, at: 0, ...over };
}

const waiting = (s: JobSpec, ticket: number, over: Partial<JobRecord> = {}): JobRecord => ({ spec: s, phase: 'waiting', worker: null, gpus: [], ticket, ...over });
const running = (s: JobSpec, over: Partial<JobRecord> = {}): JobRecord => ({ spec: s, phase: 'running', worker: s.kind, gpus: [], ...over });

function worker(kind: WorkerKind, over: Partial<WorkerRecord> = {}): WorkerRecord {
  return { ...emptyWorker(kind), state: 'loaded', generation: 1, profileId: 'a', revision: 1, slots: 2, pid: 100, plan: cpuPlan(), ...over };
}

function context(over: Partial<SupervisorContext> = {}, workers: Partial<Record<WorkerKind, WorkerRecord>> = {}): SupervisorContext {
  const all = Object.fromEntries(WORKER_KINDS.map((k) => [k, workers[k] ?? emptyWorker(k)])) as Record<WorkerKind, WorkerRecord>;
  return {
    jobs: {},
    workers: all,
    workerLimits: {},
    checking: null,
    starts: 1,
    revisions: {},
    gpus: [],
    audio: { tts: 'auto', stt: 'auto' },
    accepting: true,
    unloadWaiters: [],
    listenerInput: { address: { host: '127.0.0.1', port: 8120 }, portRange: { first: 1024, last: 65535 }, rememberedRunning: false, drainLimitMs: 1000 },
    scheduling: DEFAULT_SCHEDULING,
    chatLoads: {},
    chatAnswers: {},
    limits: { maxWaiting: 16, maxWaitMs: 600_000, retryAfterSeconds: 10 },
    ...over,
  };
}

/** The facts the fact gatherer would bring for the job under check, in `world`. */
function facts(given: SupervisorContext, world: Partial<World> = {}) {
  return factsFrom({ ...defaultWorld(), ...world }, checkInput(given)!);
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) deepFreeze(inner);
  }
  return value;
}

const rows: Row[] = [
  // reservations.ts
  {
    file: 'reservations',
    row: 'gpu.reserve | the endpoint is stopping | refused with endpoint_stopped; nothing is kept',
    given: () => context({ accepting: false }),
    step: (c) => reserve(c, { type: 'gpu.reserve', job: spec() }),
    effects: [{ type: 'deny', jobId: 'j1', code: 'endpoint_stopped', message: 'The endpoint is stopping or stopped: waiting requests are discarded and no new ones are accepted.' }],
    check: (t, next, given) => t.equal(next, given, 'the context is the one it was given'),
  },
  {
    file: 'reservations',
    row: 'gpu.reserve | accepted | submitted and sent to the queue',
    given: () => context(),
    step: (c) => reserve(c, { type: 'gpu.reserve', job: spec() }),
    effects: [{ type: 'toQueue', event: { type: 'job.enqueue', job: { id: 'j1', kind: 'chat', source: 'api', profileId: 'a', revision: 1, at: 0 } } }],
    check: (t, next, given) => {
      t.match(next.jobs.j1, { phase: 'submitted', worker: null });
      t.equal(next.workers, given.workers, 'the workers keep their identity');
    },
  },
  {
    file: 'reservations',
    row: 'gpu.reserve | nobody waits, the loaded worker has a slot free | granted at once on its generation and GPUs',
    given: () => context({}, { chat: worker('chat', { generation: 3, plan: cpuPlan({ gpus: ['GPU-a'] }) }) }),
    step: (c) => grantAtOnce(c, { type: 'gpu.reserve', job: spec() }),
    effects: [{ type: 'grant', jobId: 'j1', worker: 'chat', generation: 3, start: null, gpus: ['GPU-a'] }],
    check: (t, next, given) => {
      t.match(next.jobs.j1, { phase: 'running', worker: 'chat', gpus: ['GPU-a'] });
      t.equal(next.workers, given.workers);
    },
  },
  {
    file: 'reservations',
    row: 'job.queued | a chat under the swap-aware order | waiting with its ticket and its overtaking bound; its bound timer set; its route told its place',
    given: () => context({ jobs: { j1: { spec: spec(), phase: 'submitted', worker: null, gpus: [] } } }),
    step: (c) => fromQueue(c, { type: 'job.queued', jobId: 'j1', position: 2, ticket: 7 }),
    effects: [
      { type: 'timer', id: 'switch-bound-j1', delay: 30_000, event: { type: 'switch.bound', jobId: 'j1' } },
      { type: 'queued', jobId: 'j1', position: 2 },
    ],
    check: (t, next) => t.match(next.jobs.j1, { phase: 'waiting', ticket: 7, switchBound: { ms: 30_000, reached: false } }),
  },
  {
    file: 'reservations',
    row: 'job.rejected | a waiting switch with a bound, the queue is full | its timer cancelled, refused with queue_full and a Retry-After hint',
    given: () => context({ jobs: { j1: waiting(spec(), 1, { switchBound: { ms: 30_000, reached: false } }) } }),
    step: (c) => fromQueue(c, { type: 'job.rejected', jobId: 'j1', code: 'queue_full', retryAfterSeconds: 10 }),
    effects: [
      { type: 'cancelTimer', id: 'switch-bound-j1' },
      { type: 'deny', jobId: 'j1', code: 'queue_full', message: 'The queue is full: 16 requests are waiting. Retry later.', retryAfterSeconds: 10 },
    ],
    check: (t, next) => t.same(next.jobs, {}),
  },
  {
    file: 'reservations',
    row: 'job.removed | the job under its memory check left | its bound timer cancelled, the check abandoned',
    given: () => context({ checking: 'j1', jobs: { j1: waiting(spec(), 1, { phase: 'checking', switchBound: { ms: 30_000, reached: false } }) } }),
    step: (c) => fromQueue(c, { type: 'job.removed', jobId: 'j1' }),
    effects: [{ type: 'cancelTimer', id: 'switch-bound-j1' }, { type: 'abandonCheck' }],
    check: (t, next) => t.same([next.jobs, next.checking], [{}, null]),
  },
  {
    file: 'reservations',
    row: 'job.cancel | a waiting job | it leaves the queue at once, its bound timer cancelled',
    given: () => context({ jobs: { j1: waiting(spec(), 1, { switchBound: { ms: 30_000, reached: false } }) } }),
    step: (c) => release(c, { type: 'job.cancel', jobId: 'j1' }),
    effects: [
      { type: 'toQueue', event: { type: 'job.cancel', jobId: 'j1' } },
      { type: 'cancelTimer', id: 'switch-bound-j1' },
    ],
  },
  {
    file: 'reservations',
    row: '3.2 loading | cancel in the chat test | own start | unloaded: the start is aborted',
    given: () => context({ jobs: { j1: running(spec({ source: 'test' })) } }, { chat: worker('chat', { state: 'loading', pid: null }) }),
    step: (c) => release(c, { type: 'job.cancel', jobId: 'j1' }),
    effects: [{ type: 'unload', kind: 'chat', generation: 1, code: 'operator', reason: 'the chat test was cancelled during its own worker start: the start is aborted' }],
    check: (t, next) => t.equal(next.workers.chat.state, 'unloading'),
  },
  {
    file: 'reservations',
    row: 'gpu.release | a chat answer ends | its time counts for the overtaking rule; the other job and the workers keep their identity',
    given: () => context({ jobs: { j1: running(spec()), j2: running(spec({ id: 'j2' })) } }, { chat: worker('chat') }),
    step: (c) => release(c, { type: 'gpu.release', jobId: 'j1', heldMs: 1200 }),
    effects: [],
    check: (t, next, given) => {
      t.same(Object.keys(next.jobs), ['j2']);
      t.equal(next.jobs.j2, given.jobs.j2, 'the job that runs on keeps its record');
      t.equal(next.workers, given.workers, 'the workers keep theirs');
      t.same(next.chatAnswers, { a: { revision: 1, ms: [1200] } });
    },
  },
  {
    file: 'reservations',
    row: 'switch.bound | a waiting switch reached its bound | nothing overtakes it any more',
    given: () => context({ jobs: { j1: waiting(spec(), 1, { switchBound: { ms: 30_000, reached: false } }) } }),
    step: (c) => switchBoundReached(c, { type: 'switch.bound', jobId: 'j1' }),
    effects: [],
    check: (t, next) => t.same(next.jobs.j1?.switchBound, { ms: 30_000, reached: true }),
  },
  // grants.ts
  {
    file: 'grants',
    row: 'plan: a waiting job, its worker loaded with a slot free | dispatched from the queue and granted',
    given: () => context({ jobs: { j1: waiting(spec(), 1) } }, { chat: worker('chat') }),
    step: (c) => schedule(c),
    effects: [
      { type: 'toQueue', event: { type: 'job.dispatch', jobId: 'j1' } },
      { type: 'grant', jobId: 'j1', worker: 'chat', generation: 1, start: null, gpus: [] },
    ],
  },
  {
    file: 'grants',
    row: 'plan: a waiting job needs its worker started | put under its memory check',
    given: () => context({ jobs: { j1: waiting(spec(), 1) } }),
    step: (c) => schedule(c),
    effects: [],
    check: (t, next) => t.same([next.checking, next.jobs.j1?.phase], ['j1', 'checking']),
  },
  {
    file: 'grants',
    row: 'plan: a switch to another profile, the idle worker holds only a warm preload | the preload gives way, the worker is unloaded first',
    given: () => context({ jobs: { p: running(spec({ id: 'p', source: 'preload' })), j1: waiting(spec({ profileId: 'b' }), 1) } }, { chat: worker('chat') }),
    step: (c) => schedule(c),
    effects: [
      { type: 'revoke', jobId: 'p', code: 'resources_busy', message: 'the preload gave way: switch to profile b (revision 1)' },
      { type: 'unload', kind: 'chat', generation: 1, code: 'profile_switch', reason: 'switch to profile b (revision 1)' },
    ],
    check: (t, next) => t.same([Object.keys(next.jobs), next.workers.chat.state], [['j1'], 'unloading']),
  },
  {
    file: 'grants',
    row: '3.3 the GUI image test while a chat answers | refused with image_busy, it leaves the queue',
    given: () => context({ jobs: { c: running(spec({ id: 'c' })), j1: waiting(spec({ kind: 'image', profileId: 'img', source: 'test', whenBusy: 'refuse' }), 1) } }, { chat: worker('chat') }),
    step: (c) => schedule(c),
    effects: [
      { type: 'toQueue', event: { type: 'job.cancel', jobId: 'j1' } },
      { type: 'deny', jobId: 'j1', code: 'image_busy', message: 'the image reservation is busy: a running job holds it' },
    ],
  },
  {
    file: 'grants',
    row: '3.2 resources free and the memory check passes | granted with the start plan; the worker start goes to the worker with the grant',
    given: () => context({ checking: 'j1', jobs: { j1: waiting(spec(), 1, { phase: 'checking', switchBound: { ms: 30_000, reached: false } }) } }),
    step: (c) => verdict(c, facts(c)),
    effects: (next) => [
      { type: 'cancelTimer', id: 'switch-bound-j1' },
      { type: 'toQueue', event: { type: 'job.dispatch', jobId: 'j1' } },
      { type: 'grant', jobId: 'j1', worker: 'chat', generation: 2, start: next.workers.chat.plan, gpus: [] },
      { type: 'start', kind: 'chat', start: { generation: 2, profileId: 'a', revision: 1, profile: PROFILE, plan: next.workers.chat.plan!, gpus: [], enhancer: null } },
    ],
    check: (t, next) => {
      t.match(next.workers.chat.plan, { gpus: [], gpuLayers: null, fit: /CPU only/ });
      t.match(next.workers.chat, { state: 'loading', generation: 2, profileId: 'a', pid: null });
      t.same([next.starts, next.checking, next.jobs.j1?.phase], [2, null, 'running']);
    },
  },
  {
    file: 'grants',
    row: '3.2 first request | the memory check fails | refused with insufficient_memory, it leaves the queue; no worker starts',
    given: () => context({ checking: 'j1', jobs: { j1: waiting(spec(), 1, { phase: 'checking' }) } }),
    step: (c) => verdict(c, facts(c, { ramMiB: 64 })),
    like: [
      { type: 'toQueue', event: { type: 'job.cancel', jobId: 'j1' } },
      { type: 'deny', jobId: 'j1', code: 'insufficient_memory', message: /forecast/ },
    ],
    check: (t, next) => t.same([next.jobs, next.workers.chat.state], [{}, 'unloaded']),
  },
  {
    file: 'grants',
    row: '8 the facts cannot be gathered | refused with start_check_failed, naming why',
    given: () => context({ checking: 'j1', jobs: { j1: waiting(spec(), 1, { phase: 'checking' }) } }),
    step: (c) => checkFailed(c, new Error('not a GGUF file')),
    effects: [
      { type: 'toQueue', event: { type: 'job.cancel', jobId: 'j1' } },
      { type: 'deny', jobId: 'j1', code: 'start_check_failed', message: 'the memory check before the worker start failed: not a GGUF file' },
    ],
    check: (t, next) => t.equal(next.checking, null),
  },
  // workerReports.ts
  {
    file: 'workerReports',
    row: '3.2 a worker that dies | its record is cleared with the diagnosis; its running jobs fail with worker_failed',
    given: () => context({ jobs: { j1: running(spec()), s: running(spec({ id: 's', kind: 'stt', profileId: 's' })) } }, { chat: worker('chat'), stt: worker('stt', { profileId: 's' }) }),
    step: (c) => workerReport(c, { type: 'worker.exited', kind: 'chat', generation: 1, cause: 'unclear', message: 'exit code 134' }),
    effects: [{ type: 'revoke', jobId: 'j1', code: 'worker_failed', message: 'exit code 134' }],
    check: (t, next, given) => {
      t.match(next.workers.chat, { state: 'unloaded', last: 'unclear: exit code 134' });
      t.equal(next.workers.stt, given.workers.stt, 'the other workers keep their records');
      t.equal(next.jobs.s, given.jobs.s);
    },
  },
  {
    file: 'workerReports',
    row: 'worker.loaded | a chat start with its measured load | loaded, its load time kept for the swap bound',
    given: () => context({}, { chat: worker('chat', { state: 'loading' }) }),
    step: (c) => workerReport(c, { type: 'worker.loaded', kind: 'chat', generation: 1, loadMs: 4200 }),
    effects: [],
    check: (t, next) => t.same([next.workers.chat.state, next.chatLoads], ['loaded', { a: { revision: 1, ms: 4200 } }]),
  },
  {
    file: 'workerReports',
    row: 'a report about an earlier start | changes nothing',
    given: () => context({}, { chat: worker('chat', { generation: 2 }) }),
    step: (c) => workerReport(c, { type: 'worker.exited', kind: 'chat', generation: 1, cause: 'unclear', message: 'late' }),
    effects: [],
    check: (t, next, given) => t.equal(next, given),
  },
  {
    file: 'workerReports',
    row: 'worker.stalled while others wait | every job on the worker fails with the message; the worker is restarted',
    given: () => context({ jobs: { j1: running(spec()), j2: waiting(spec({ id: 'j2' }), 1) } }, { chat: worker('chat') }),
    step: (c) => restartStalled(c, { type: 'worker.stalled', kind: 'chat', generation: 1, jobId: 'j1', message: 'held' }),
    effects: [
      { type: 'revoke', jobId: 'j1', code: 'worker_failed', message: 'held' },
      { type: 'unload', kind: 'chat', generation: 1, code: 'stalled', reason: 'an answer held the chat worker (no token, no answer to a status probe) while others waited: it was restarted' },
    ],
  },
  {
    file: 'workerReports',
    row: '3.1 the unload reply waits until every worker is gone | then each waiting stop is answered and new jobs are accepted',
    given: () => context({ accepting: false, unloadWaiters: ['u1', 'u2'] }, { chat: worker('chat', { state: 'lost' }) }),
    step: (c) => replyUnloadWaiters(c),
    effects: [
      { type: 'reply', requestId: 'u1', outcome: { ok: true } },
      { type: 'reply', requestId: 'u2', outcome: { ok: true } },
    ],
    check: (t, next) => t.same([next.unloadWaiters, next.accepting], [[], true]),
  },
  // gpuWatch.ts
  {
    file: 'gpuWatch',
    row: '3.2 loaded | additional foreign GPU process during operation | its chats revoked, only the own chat worker unloaded',
    given: () => context({ jobs: { j1: running(spec()) } }, { chat: worker('chat', { plan: cpuPlan({ gpus: ['GPU-a'] }) }), tts: worker('tts', { pid: 200, profileId: 't' }) }),
    step: (c) => inventory(c, { type: 'gpu.inventory', gpus: [gpu('GPU-a', 24 * GIB, 12 * GIB, [{ pid: 100, usedMiB: 8 * GIB }, { pid: 200, usedMiB: GIB }, { pid: 4242, usedMiB: 2 * GIB }])] }),
    effects: [
      { type: 'revoke', jobId: 'j1', code: 'resources_busy', message: 'a foreign process (pid 4242) appeared on GPU GPU-a: only our own chat worker is ended' },
      { type: 'unload', kind: 'chat', generation: 1, code: 'foreign_process', reason: 'a foreign process (pid 4242) appeared on GPU GPU-a: only our own chat worker is ended' },
    ],
    check: (t, next, given) => t.equal(next.workers.tts, given.workers.tts, 'the TTS worker (pid 200, ours) stays'),
  },
  {
    file: 'gpuWatch',
    row: 'a lost worker gone from its GPUs | its memory is free: its record is cleared',
    given: () => context({}, { chat: worker('chat', { state: 'lost', pid: 77, plan: cpuPlan({ gpus: ['GPU-a'] }) }) }),
    step: (c) => inventory(c, { type: 'gpu.inventory', gpus: [gpu('GPU-a')] }),
    effects: [],
    check: (t, next) => t.match(next.workers.chat, { state: 'unloaded', last: /pid 77.*free/ }),
  },
  // profiles.ts
  {
    file: 'profiles',
    row: '3.7 a profile gets a new revision | the queue rejects its waiting jobs; its loaded worker turns stale; the revision is kept',
    given: () => context({}, { chat: worker('chat'), stt: worker('stt', { profileId: 's' }) }),
    step: (c) => profileChanged(c, { type: 'profile.changed', profileId: 'a', revision: 2, published: true }),
    effects: [{ type: 'toQueue', event: { type: 'profile.changed', profileId: 'a', revision: 2, published: true } }],
    check: (t, next, given) => {
      t.same([next.workers.chat.stale, next.revisions], [{ code: 'profile_changed', reason: 'its profile has a new revision (2)' }, { a: 2 }]);
      t.equal(next.workers.stt, given.workers.stt);
    },
  },
  {
    file: 'profiles',
    row: '9 a new build of a loaded worker\'s program | it turns stale; 3.6 the audio policy of a kind changes',
    given: () => context({}, { stt: worker('stt', { profileId: 's' }) }),
    step: (c) => audioMode(buildChanged(c, { type: 'worker.buildChanged', kind: 'stt', generation: 1, reason: 'a new build' }).context, { type: 'audio.mode', kind: 'stt', mode: 'per_request' }),
    effects: [],
    check: (t, next) => t.same([next.workers.stt.stale, next.audio], [{ code: 'new_build', reason: 'a new build' }, { tts: 'auto', stt: 'per_request' }]),
  },
  // enhancer.ts
  {
    file: 'enhancer',
    row: '4.7 image | enhancer answered | the job holds every GPU | enhancer unloaded, the image step granted and the image worker started with it',
    given: () => {
      const s = spec({ kind: 'image', profileId: 'img', profile: { params: { model: '/models/flux.gguf' } } });
      return context({ jobs: { j1: running(s, { gpus: ['GPU-a', 'GPU-b'], steps: { enhancer: 1, image: { generation: 2, plan: cpuPlan({ gpus: ['GPU-a'] }) } } }) } }, { enhancer: worker('enhancer', { profileId: 'img' }) });
    },
    step: (c) => enhancerDone(c, { type: 'enhancer.done', jobId: 'j1' }),
    effects: [
      { type: 'unload', kind: 'enhancer', generation: 1, code: 'enhancer_done', reason: 'the enhancer answered: it ends before the image worker starts' },
      { type: 'grant', jobId: 'j1', worker: 'image', generation: 2, start: cpuPlan({ gpus: ['GPU-a'] }), gpus: ['GPU-a', 'GPU-b'], step: 'image' },
      {
        type: 'start',
        kind: 'image',
        start: { generation: 2, profileId: 'img', revision: 1, profile: { params: { model: '/models/flux.gguf' } }, plan: cpuPlan({ gpus: ['GPU-a'] }), gpus: ['GPU-a', 'GPU-b'], enhancer: null },
      },
    ],
    check: (t, next) => t.same([next.workers.image.state, next.jobs.j1?.steps], ['loading', { enhancer: 1, image: null }]),
  },
  {
    file: 'enhancer',
    row: 'CONTRACT 8 the image step after an enhancer on the CPU | every GPU free, its memory check passes | the image step granted on every GPU, the image worker started with it',
    given: () => context({ checking: 'j1', starts: 1, jobs: { j1: running(spec({ kind: 'image', profileId: 'img' }), { worker: 'image', steps: { enhancer: 1, image: 'due' } }) } }),
    step: (c) => verdict(c, facts(c, { gpus: [gpu('GPU-a'), gpu('GPU-b')] })),
    effects: (next) => [
      { type: 'grant', jobId: 'j1', worker: 'image', generation: 2, start: next.workers.image.plan, gpus: ['GPU-a', 'GPU-b'], step: 'image' },
      { type: 'start', kind: 'image', start: { generation: 2, profileId: 'img', revision: 1, profile: PROFILE, plan: next.workers.image.plan!, gpus: ['GPU-a', 'GPU-b'], enhancer: null } },
    ],
    check: (t, next) => t.match([next.workers.image.state, next.jobs.j1], ['loading', { gpus: ['GPU-a', 'GPU-b'], steps: { enhancer: 1, image: null } }]),
  },
  {
    file: 'enhancer',
    row: 'CONTRACT 8 the image step\'s memory check refuses | the job\'s reservation is taken back with insufficient_memory',
    given: () => context({ checking: 'j1', jobs: { j1: running(spec({ kind: 'image', profileId: 'img' }), { worker: 'image', steps: { enhancer: 1, image: 'due' } }) } }),
    step: (c) => verdict(c, facts(c, { gpus: [gpu('GPU-a'), gpu('GPU-b')], imageMiB: 200 * GIB })),
    like: [{ type: 'revoke', jobId: 'j1', code: 'insufficient_memory', message: /forecast/ }],
    check: (t, next) => t.same([next.jobs, next.workers.image.state], [{}, 'unloaded']),
  },
  // stop.ts
  {
    file: 'stop',
    row: '3.1 endpoint stop, step 1 | waiting requests are discarded, no new ones accepted; the route is answered',
    given: () => context(),
    step: (c) => discard(c, { type: 'endpoint.discard', requestId: 'd' }),
    effects: [
      { type: 'toQueue', event: { type: 'queue.discardAll' } },
      { type: 'reply', requestId: 'd', outcome: { ok: true } },
    ],
    check: (t, next) => t.equal(next.accepting, false),
  },
  {
    file: 'stop',
    row: '3.1 endpoint stop, last step | running jobs end with endpoint_stopped, every worker is unloaded; the route waits for them',
    given: () => context({ jobs: { j1: running(spec()) } }, { chat: worker('chat'), stt: worker('stt', { profileId: 's' }) }),
    step: (c) => unloadAll(c, { type: 'workers.unloadAll', requestId: 'u' }),
    effects: [
      { type: 'revoke', jobId: 'j1', code: 'endpoint_stopped', message: 'The endpoint is stopping or stopped: waiting requests are discarded and no new ones are accepted.' },
      { type: 'unload', kind: 'chat', generation: 1, code: 'endpoint_stop', reason: 'endpoint stop' },
      { type: 'unload', kind: 'stt', generation: 1, code: 'endpoint_stop', reason: 'endpoint stop' },
    ],
    check: (t, next) => t.same([next.unloadWaiters, next.accepting], [['u'], false]),
  },
  {
    file: 'stop',
    row: 'the service ends | what waits is refused, what runs is revoked, every worker is unloaded',
    given: () => context({ checking: 'w', jobs: { j1: running(spec()), w: waiting(spec({ id: 'w', profileId: 'b' }), 1, { phase: 'checking' }) } }, { chat: worker('chat') }),
    step: (c) => closeDown(c),
    effects: [
      { type: 'deny', jobId: 'w', code: 'endpoint_stopped', message: 'The endpoint is stopping or stopped: waiting requests are discarded and no new ones are accepted.' },
      { type: 'revoke', jobId: 'j1', code: 'endpoint_stopped', message: 'The endpoint is stopping or stopped: waiting requests are discarded and no new ones are accepted.' },
      { type: 'unload', kind: 'chat', generation: 1, code: 'shutdown', reason: 'the service is ending' },
    ],
    check: (t, next) => t.same([next.jobs, next.checking, next.accepting], [{}, null, false]),
  },
  {
    file: 'stop',
    row: '3.2 loaded | explicit unload in the chat test | with active requests the unload is rejected',
    given: () => context({ jobs: { j1: running(spec()) } }, { chat: worker('chat') }),
    step: (c) => unloadRequest(c, { type: 'worker.unloadRequest', kind: 'chat', requestId: 'r' }),
    effects: [{ type: 'reply', requestId: 'r', outcome: { ok: false, code: 'active_requests', message: 'the chat worker has 1 active request(s): the unload is rejected' } }],
    check: (t, next, given) => t.equal(next, given),
  },
  {
    file: 'stop',
    row: '3.2 loaded | explicit unload | no active requests | unloaded: a preload on it gives way',
    given: () => context({ jobs: { p: running(spec({ id: 'p', kind: 'tts', profileId: 't', source: 'preload' })) } }, { tts: worker('tts', { profileId: 't', state: 'loading' }) }),
    step: (c) => unloadRequest(c, { type: 'worker.unloadRequest', kind: 'tts', requestId: 'r' }),
    effects: [
      { type: 'revoke', jobId: 'p', code: 'resources_busy', message: 'the preload gave way: explicit unload' },
      { type: 'unload', kind: 'tts', generation: 1, code: 'operator', reason: 'explicit unload by the operator (the chat test or the console)' },
      { type: 'reply', requestId: 'r', outcome: { ok: true } },
    ],
  },
];

/** The effect kinds seen per step file (rows whose check asserts them count too). */
const seen = new Map<StepFile, Set<Effect['type']>>();

for (const row of rows) {
  t.test(`${row.file}: ${row.row}`, async (t) => {
    const given = deepFreeze(row.given());
    const { context: next, effects } = row.step(given);
    if (row.like) {
      t.match(effects, row.like, 'the effects, in their order');
      t.equal(effects.length, row.like.length, 'and no more');
    } else t.same(effects, typeof row.effects === 'function' ? row.effects(next) : (row.effects ?? []), 'the effects, in their order');
    t.ok(Object.isFrozen(given.jobs) && Object.isFrozen(given.workers), 'the step ran on a frozen context');
    row.check?.(t, next, given);
    const kinds = seen.get(row.file) ?? new Set();
    for (const effect of effects) kinds.add(effect.type);
    seen.set(row.file, kinds);
  });
}

t.test('the rows cover every effect kind of every step file', async (t) => {
  for (const [file, kinds] of Object.entries(PRODUCES) as Array<[StepFile, Array<Effect['type']>]>) {
    t.same([...(seen.get(file) ?? [])].sort(), [...kinds].sort(), `${file}.ts: ${kinds.join(', ')}`);
  }
});
