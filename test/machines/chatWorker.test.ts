// Spec 3.2, the chat worker machine (the life of one llama-server process), row by row on a
// running actor with a simulated clock and a simulated server process: the supervisor decides,
// this machine starts, loads, unloads (SIGTERM, then SIGKILL after the grace) and reports. The
// delays (load time limit, termination grace) are driven by the clock, never waited for. Also the
// llama-server command line (args.ts) and, with xstate/graph, that every state is reachable.
import t from 'tap';
import type { Test } from 'tap';
import { createActor, fromCallback, SimulatedClock } from 'xstate';
import { getShortestPaths, getStateNodes } from 'xstate/graph';
import {
  CHAT_WORKER_LIMITS,
  chatWorkerMachine,
  SERVER_DEFAULTS,
  serverArgs,
  type ChatLaunch,
  type ChatWorkerEmitted,
  type ChatWorkerEvent,
  type ChatWorkerInput,
  type EngineCommand,
  type EngineInput,
} from '../../machines/chatWorker/index.js';
import type { ExitReport } from '../../machines/worker.types.js';
import { KILL_LIMIT_MS } from '../../machines/worker/lifecycle.js';
import { chatStart } from '../helpers/workerStart.js';

// ---------------------------------------------------------------------------------------------
// Harness

function launch(over: Partial<ChatLaunch> = {}): ChatLaunch {
  return {
    generation: 1,
    profileId: 'a',
    revision: 1,
    name: 'chat-a',
    model: '/models/a.gguf',
    context: 8192,
    slots: 2,
    gpuLayers: null,
    tensorSplit: null,
    overrides: [],
    gpus: [],
    ...over,
  };
}

/** One simulated llama-server process: what it was started with and the commands it got. */
interface FakeProcess {
  launch: ChatLaunch;
  commands: EngineCommand['type'][];
  /** The invoke ended: the real actor's cleanup would kill what is left and remove the key file. */
  cleanedUp: boolean;
  sendBack: (event: ChatWorkerEvent) => void;
}

const exitReport = (over: Partial<ExitReport> = {}): ExitReport => ({ exitCode: null, signal: 'SIGTERM', cause: 'stopped', message: 'stopped by the service', ...over });

function harness(input: ChatWorkerInput = {}) {
  const clock = new SimulatedClock();
  const processes: FakeProcess[] = [];
  const machine = chatWorkerMachine.provide({
    actors: {
      engine: fromCallback<EngineCommand, EngineInput, ChatWorkerEvent>(({ input, receive, sendBack }) => {
        const fake: FakeProcess = { launch: input.launch, commands: [], cleanedUp: false, sendBack };
        processes.push(fake);
        receive((command) => void fake.commands.push(command.type));
        return () => {
          fake.cleanedUp = true;
        };
      }),
    },
  });
  const actor = createActor(machine, { clock, input });
  const emitted: ChatWorkerEmitted[] = [];
  actor.on('*', (event) => void emitted.push(event));
  actor.start();
  const snapshot = () => actor.getSnapshot();
  /** The state as a dotted path: unloaded, running.loading, running.loaded, running.unloading. */
  const state = () => {
    const value = snapshot().value;
    return typeof value === 'string' ? value : Object.entries(value).map(([parent, child]) => `${parent}.${String(child)}`)[0];
  };
  /** The current (latest) process. */
  const proc = () => {
    const last = processes.at(-1);
    if (!last) throw new Error('no server process was started');
    return last;
  };
  const start = (l: ChatLaunch = launch()) => actor.send({ type: 'worker.start', start: chatStart(l) });
  const spawned = (pid = 4100, port = 39001) => proc().sendBack({ type: 'engine.spawned', pid, port });
  const ready = () => proc().sendBack({ type: 'engine.ready' });
  const exited = (report: ExitReport = exitReport()) => proc().sendBack({ type: 'engine.exited', report });
  /** Start, spawn and answer /health: running.loaded. */
  const load = (l: ChatLaunch = launch(), pid = 4100) => {
    start(l);
    spawned(pid);
    ready();
  };
  const unload = (generation: number, reason: string) => actor.send({ type: 'worker.unload', generation, reason });
  const exits = () => emitted.filter((e) => e.type === 'worker.exited');
  return { actor, clock, processes, emitted, snapshot, state, proc, start, spawned, ready, exited, load, unload, exits };
}

type Harness = ReturnType<typeof harness>;

// ---------------------------------------------------------------------------------------------
// Spec 3.2, row by row

interface Row {
  /** The spec row, as written. */
  row: string;
  /** Where the row starts. */
  from: 'unloaded' | 'loading' | 'loaded';
  /** The supervisor's unload reason for rows it decides with an unload; null when nothing is sent. */
  unload: string | null;
  /** Machine input (a row may pass its own grace). */
  input?: ChatWorkerInput;
  /** Starts that follow the unload (the switch): each must reach loaded with its launch. */
  then?: Partial<ChatLaunch>[];
  /** Extra checks while the process is being ended (after SIGTERM, before it is gone). */
  whileUnloading?: (t: Test, h: Harness) => void;
  /** Extra checks of the row, at its end. */
  check?: (t: Test, h: Harness) => void;
}

const rows: Row[] = [
  {
    row: 'unloaded | first request for a published chat profile, or chat test start | resources free, memory check passes | loaded | worker started with stored parameters',
    from: 'unloaded',
    unload: null,
    check(t, h) {
      t.equal(h.state(), 'unloaded', 'nothing runs before the start');
      t.equal(h.processes.length, 0, 'no process before the start');
      t.ok(h.snapshot().can({ type: 'worker.start', start: chatStart(launch()) }), 'unloaded takes a start');
      t.notOk(h.snapshot().can({ type: 'engine.ready' }), 'nothing to become ready');
      const stored = launch({ context: 16384, slots: 4, gpuLayers: 20, tensorSplit: [3, 1], overrides: ['blk\\.1\\.=CPU'], gpus: ['GPU-a', 'GPU-b'] });
      h.start(stored);
      t.equal(h.state(), 'running.loading');
      t.same(h.proc().launch, stored, 'the process gets the stored parameters and the fit as they are');
      t.same(h.snapshot().context.launch, stored);
      t.notOk(h.snapshot().can({ type: 'worker.start', start: chatStart(launch({ generation: 2 })) }), 'a second start is not taken while one runs');
      h.spawned(4242, 39123);
      t.same(h.emitted, [{ type: 'worker.started', kind: 'chat', generation: 1, pid: 4242 }], 'its pid is reported as ours');
      t.match(h.snapshot().context, { pid: 4242, port: 39123 });
      t.ok(h.snapshot().can({ type: 'engine.ready' }));
      h.ready();
      t.equal(h.state(), 'running.loaded');
      t.same(h.emitted.at(-1), { type: 'worker.loaded', kind: 'chat', generation: 1 });
      t.same(h.proc().commands, [], 'a start sends no signal');
      t.notOk(h.snapshot().can({ type: 'engine.ready' }), 'loaded takes no second ready');
    },
  },
  {
    row: 'loaded | request for a different profile, or a new revision of the profile | | unloaded, then loaded with the new profile | the own worker is unloaded first',
    from: 'loaded',
    unload: 'switch to profile b',
    then: [
      { generation: 2, profileId: 'b', name: 'chat-b', model: '/models/b.gguf', slots: 1 },
      { generation: 3, profileId: 'b', revision: 2, name: 'chat-b', model: '/models/b2.gguf', context: 4096 },
    ],
  },
  {
    row: 'loaded | image job, exclusive video mode or incompatible GPU profile change | | unloaded |',
    from: 'loaded',
    unload: 'an image job needs the GPUs',
    input: { terminationGraceMs: 2_500 },
  },
  {
    row: 'loaded | additional foreign GPU process during operation | | unloaded | only the service\'s own worker is ended',
    from: 'loaded',
    unload: 'a foreign GPU process (pid 4242) appeared: only our own chat worker is ended',
    check(t, h) {
      t.equal(h.processes.length, 1, 'the one process the machine started is the only one it signals');
    },
  },
  {
    row: 'loaded | explicit unload in the chat test | no active requests | unloaded | with active requests the unload is rejected',
    from: 'loaded',
    unload: 'unloaded in the chat test',
    input: { terminationGraceMs: 30_000 },
  },
  {
    row: 'loading | cancel in the chat test | own start | unloaded | the start is aborted',
    from: 'loading',
    unload: 'the chat test was cancelled: the start is aborted',
    whileUnloading(t, h) {
      h.ready();
      t.equal(h.state(), 'running.unloading', 'a late /health 200 does not bring an aborted start back');
      t.notOk(h.emitted.some((e) => e.type === 'worker.loaded'), 'an aborted start never reports loaded');
    },
  },
  {
    row: 'loaded | answer finished (chat test) | | loaded | the process stays loaded',
    from: 'loaded',
    unload: null,
    check(t, h) {
      const before = h.emitted.length;
      // Nothing is sent for a finished answer; time passes well beyond every limit.
      h.clock.increment(CHAT_WORKER_LIMITS.loadTimeLimitMs + CHAT_WORKER_LIMITS.terminationGraceMs + 1);
      t.equal(h.state(), 'running.loaded', 'the process stays loaded');
      t.same(h.proc().commands, [], 'it got no stop and no kill');
      t.notOk(h.proc().cleanedUp, 'the process is not ended');
      t.equal(h.emitted.length, before, 'nothing is reported');
    },
  },
];

async function runRow(t: Test, row: Row) {
  const h = harness(row.input);
  const grace = row.input?.terminationGraceMs ?? CHAT_WORKER_LIMITS.terminationGraceMs;
  if (row.from === 'loading') {
    h.start();
    h.spawned();
    t.equal(h.state(), 'running.loading');
  } else if (row.from === 'loaded') {
    h.load();
    t.equal(h.state(), 'running.loaded');
  }
  if (row.unload !== null) {
    const own = h.proc();
    const eventsBefore = h.emitted.length;
    t.ok(h.snapshot().can({ type: 'worker.unload', generation: 1, reason: row.unload }), 'the own generation can be unloaded');
    t.notOk(h.snapshot().can({ type: 'worker.unload', generation: 0, reason: row.unload }), 'an earlier generation cannot');
    h.unload(1, row.unload);
    t.equal(h.state(), 'running.unloading');
    t.same(own.commands, ['engine.stop'], 'SIGTERM first');
    t.notOk(h.snapshot().can({ type: 'worker.unload', generation: 1, reason: row.unload }), 'a second unload changes nothing');
    row.whileUnloading?.(t, h);
    h.clock.increment(grace - 1);
    t.same(own.commands, ['engine.stop'], 'no SIGKILL before the grace has passed');
    h.clock.increment(1);
    t.same(own.commands, ['engine.stop', 'engine.kill'], `SIGKILL exactly after the ${grace} ms grace`);
    h.clock.increment(KILL_LIMIT_MS - 1);
    t.same(own.commands, ['engine.stop', 'engine.kill'], 'one SIGKILL only');
    t.equal(h.state(), 'running.unloading', 'unloading lasts until the process is gone (within the kill limit)');
    t.equal(h.emitted.length, eventsBefore, 'nothing is reported while the process is still there');
    h.exited(exitReport({ signal: 'SIGKILL', message: 'killed after the grace period' }));
    t.equal(h.state(), 'unloaded');
    t.ok(own.cleanedUp, 'the process actor was stopped (its cleanup ran)');
    t.same(h.exits(), [], 'an expected unload is not reported as worker.exited');
    t.same(h.emitted.slice(eventsBefore), [{ type: 'worker.unloaded', kind: 'chat', generation: 1 }], 'the machine reports its own unload, once the process is gone');
    t.match(h.snapshot().context, { pid: null, port: null, stopping: null, last: row.unload });
    t.ok(h.snapshot().can({ type: 'worker.start', start: chatStart(launch({ generation: 2 })) }), 'a new start can follow');
  }
  let generation = 1;
  for (const over of row.then ?? []) {
    const next = launch(over);
    const startsBefore = h.processes.length;
    h.start(next);
    t.equal(h.processes.length, startsBefore + 1, `a new process for generation ${next.generation}`);
    t.same(h.proc().launch, next, 'the new process gets the new launch');
    const pid = 5000 + next.generation;
    h.spawned(pid);
    h.ready();
    t.equal(h.state(), 'running.loaded', `loaded with ${next.profileId} revision ${next.revision}`);
    t.same(h.snapshot().context.launch, next);
    t.same(h.emitted.slice(-2), [
      { type: 'worker.started', kind: 'chat', generation: next.generation, pid },
      { type: 'worker.loaded', kind: 'chat', generation: next.generation },
    ]);
    // A stale command about the previous start changes nothing.
    h.unload(generation, 'stale');
    t.equal(h.state(), 'running.loaded', `an unload naming generation ${generation} does not touch generation ${next.generation}`);
    t.same(h.proc().commands, []);
    generation = next.generation;
    if (over !== row.then?.at(-1)) {
      const current = h.proc();
      h.unload(generation, `switch again`);
      t.same(current.commands, ['engine.stop']);
      h.exited();
      t.equal(h.state(), 'unloaded');
    }
  }
  row.check?.(t, h);
}

t.test('spec 3.2 chat worker, row by row', async (t) => {
  t.equal(rows.length, 7, 'one entry per spec row');
  for (const row of rows) await t.test(row.row, (t) => runRow(t, row));
});

// ---------------------------------------------------------------------------------------------
// Generations, crashes, the load timeout, the grace

t.test('an unload naming another generation changes nothing, while loading or loaded', async (t) => {
  const h = harness();
  h.start(launch({ generation: 5 }));
  h.unload(4, 'an earlier start');
  t.equal(h.state(), 'running.loading');
  h.spawned();
  h.ready();
  h.unload(0, 'nothing');
  t.equal(h.state(), 'running.loaded');
  t.same(h.proc().commands, [], 'no signal');
  t.same(
    h.emitted.map((e) => e.type),
    ['worker.started', 'worker.loaded'],
  );
  // The supervisor sends every start before any unload of it: an unload naming a later start is about no process here.
  t.notOk(h.snapshot().can({ type: 'worker.unload', generation: 6, reason: 'a later start' }));
  h.unload(6, 'a later start');
  t.equal(h.state(), 'running.loaded', 'this start goes on');
  t.same(h.proc().commands, [], 'no signal to this process');
  t.equal(h.emitted.length, 2, 'nothing is reported');
  h.unload(5, 'the right one');
  t.equal(h.state(), 'running.unloading', 'the own generation does unload');
});

t.test('a process that outlives SIGKILL by the kill limit is lost: reported with its pid, unloaded only when it ends', async (t) => {
  const h = harness();
  h.load();
  const own = h.proc();
  h.unload(1, 'switch to profile b');
  h.clock.increment(CHAT_WORKER_LIMITS.terminationGraceMs);
  t.same(own.commands, ['engine.stop', 'engine.kill']);
  h.clock.increment(KILL_LIMIT_MS - 1);
  t.equal(h.state(), 'running.unloading');
  h.clock.increment(1);
  t.equal(h.state(), 'running.lost', 'still there the kill limit after SIGKILL');
  t.same(h.emitted.at(-1), { type: 'worker.lost', kind: 'chat', generation: 1, pid: h.snapshot().context.pid }, 'reported lost, with its pid');
  t.ok((h.snapshot().context.pid ?? 0) > 0, 'the pid is known');
  t.notOk(h.emitted.some((e) => e.type === 'worker.unloaded'), 'not reported unloaded: its memory is not free');
  h.clock.increment(KILL_LIMIT_MS * 10);
  t.equal(h.state(), 'running.lost', 'it stays lost');
  h.exited(exitReport({ signal: 'SIGKILL', message: 'ended at last' }));
  t.equal(h.state(), 'unloaded');
  t.same(h.emitted.at(-1), { type: 'worker.unloaded', kind: 'chat', generation: 1 }, 'unloaded once it ends at last');
  t.same(h.exits(), [], 'an unload is never an exit');
});

t.test('a lost process the supervisor gave up on: a new start begins a new process, and the old one is let go', async (t) => {
  const h = harness();
  h.load();
  const old = h.proc();
  h.unload(1, 'endpoint stop');
  h.clock.increment(CHAT_WORKER_LIMITS.terminationGraceMs + KILL_LIMIT_MS);
  t.equal(h.state(), 'running.lost');
  h.start(launch({ generation: 3 }));
  t.equal(h.state(), 'running.loading', 'the new start loads');
  t.ok(old.cleanedUp, "the lost process's actor was stopped (its cleanup kills what is left)");
  t.equal(h.processes.length, 2, 'a new process');
  t.same(h.proc().launch, launch({ generation: 3 }));
});

t.test('an unload in the unloaded state changes nothing', async (t) => {
  const h = harness();
  t.notOk(h.snapshot().can({ type: 'worker.unload', generation: 0, reason: 'x' }));
  h.unload(0, 'x');
  t.equal(h.state(), 'unloaded');
  t.equal(h.processes.length, 0);
});

const crashes: Array<{ name: string; from: 'loading' | 'loaded'; report: ExitReport }> = [
  {
    name: 'a crash while loaded is reported at once with the diagnosis',
    from: 'loaded',
    report: { exitCode: null, signal: 'SIGKILL', cause: 'ram_oom', message: 'the kernel ended the chat worker: out of memory (confirmed by the OOM killer log)' },
  },
  {
    name: 'a crash while loading fails the start with the diagnosis',
    from: 'loading',
    report: { exitCode: 1, signal: null, cause: 'model_error', message: 'llama-server could not load /models/a.gguf: unknown model architecture' },
  },
  {
    name: 'a GPU out-of-memory while loading names it',
    from: 'loading',
    report: { exitCode: 1, signal: null, cause: 'gpu_oom', message: 'CUDA out of memory on GPU-a' },
  },
];

for (const crash of crashes) {
  t.test(crash.name, async (t) => {
    const h = harness();
    h.start(launch({ generation: 3 }));
    h.spawned(777);
    if (crash.from === 'loaded') h.ready();
    t.equal(h.state(), `running.${crash.from}`);
    t.ok(h.snapshot().can({ type: 'engine.exited', report: crash.report }));
    h.exited(crash.report);
    t.equal(h.state(), 'unloaded');
    t.same(h.exits(), [{ type: 'worker.exited', kind: 'chat', generation: 3, cause: crash.report.cause, message: crash.report.message }]);
    t.match(h.snapshot().context, { pid: null, port: null, stopping: null, last: crash.report.message });
    t.same(h.proc().commands, [], 'a process that died is not signalled');
    t.ok(h.proc().cleanedUp);
    h.clock.increment(CHAT_WORKER_LIMITS.loadTimeLimitMs * 2);
    t.equal(h.exits().length, 1, 'reported once; no load timer outlives the start');
    h.start(launch({ generation: 4 }));
    t.equal(h.state(), 'running.loading', 'the next request starts it again');
  });
}

t.test('load timeout: the process is stopped at the limit and then reported as worker.exited (timeout)', async (t) => {
  for (const input of [{}, { loadTimeLimitMs: 5_000, terminationGraceMs: 1_000 }] as ChatWorkerInput[]) {
    await t.test(`limit ${input.loadTimeLimitMs ?? 'default'}`, async (t) => {
      const h = harness(input);
      const limit = input.loadTimeLimitMs ?? CHAT_WORKER_LIMITS.loadTimeLimitMs;
      const grace = input.terminationGraceMs ?? CHAT_WORKER_LIMITS.terminationGraceMs;
      h.start(launch({ generation: 9 }));
      h.spawned();
      h.clock.increment(limit - 1);
      t.equal(h.state(), 'running.loading', 'one millisecond before the limit it still loads');
      t.same(h.proc().commands, []);
      h.clock.increment(1);
      t.equal(h.state(), 'running.unloading', 'at the limit it is stopped');
      t.same(h.proc().commands, ['engine.stop']);
      t.same(h.exits(), [], 'reported only once the process is gone');
      h.ready();
      t.equal(h.state(), 'running.unloading', 'a late ready does not revive a timed-out start');
      h.clock.increment(grace);
      t.same(h.proc().commands, ['engine.stop', 'engine.kill']);
      h.exited(exitReport({ signal: 'SIGKILL' }));
      t.equal(h.state(), 'unloaded');
      const seconds = Math.round(limit / 1000);
      t.same(h.exits(), [
        {
          type: 'worker.exited',
          kind: 'chat',
          generation: 9,
          cause: 'timeout',
          message: `The chat worker did not become ready within ${seconds} s (timeout); it was stopped.`,
        },
      ]);
      t.match(h.snapshot().context.last, /did not become ready/);
    });
  }
});

t.test('a load that finishes before the limit stops the load timer', async (t) => {
  const h = harness({ loadTimeLimitMs: 1_000 });
  h.start();
  h.spawned();
  h.clock.increment(999);
  h.ready();
  h.clock.increment(10_000);
  t.equal(h.state(), 'running.loaded');
  t.same(h.proc().commands, []);
  t.same(h.exits(), []);
});

t.test('a process that exits within the grace gets no SIGKILL, and no timer reaches the next start', async (t) => {
  const h = harness();
  h.load();
  const first = h.proc();
  h.unload(1, 'switch');
  h.clock.increment(CHAT_WORKER_LIMITS.terminationGraceMs / 2);
  h.exited();
  t.equal(h.state(), 'unloaded');
  h.load(launch({ generation: 2, profileId: 'b' }));
  h.clock.increment(CHAT_WORKER_LIMITS.terminationGraceMs * 2);
  t.same(first.commands, ['engine.stop'], 'the ended process got SIGTERM only');
  t.same(h.proc().commands, [], 'the new process got nothing');
  t.equal(h.state(), 'running.loaded');
});

t.test('the spawned report is taken while unloading: the pid is ours even for an aborted start', async (t) => {
  const h = harness();
  h.start();
  h.unload(1, 'cancel');
  t.equal(h.state(), 'running.unloading');
  h.spawned(999, 39999);
  t.same(h.emitted, [{ type: 'worker.started', kind: 'chat', generation: 1, pid: 999 }]);
  t.equal(h.snapshot().context.pid, 999);
});

// ---------------------------------------------------------------------------------------------
// Reachability (xstate/graph)

t.test('every state is reachable (xstate/graph shortest paths)', async (t) => {
  const names = getStateNodes(chatWorkerMachine.root)
    .map((node) => node.path.join('.'))
    .sort();
  t.same(names, ['running', 'running.loaded', 'running.loading', 'running.lost', 'running.unloading', 'unloaded'], 'the machine has exactly these states');
  // running.lost is reached by a delay (the kill limit): the test of a process that outlives SIGKILL reaches it.
  const logic = chatWorkerMachine.provide({ actors: { engine: fromCallback<EngineCommand, EngineInput, ChatWorkerEvent>(() => undefined) } });
  const events: ChatWorkerEvent[] = [
    { type: 'worker.start', start: chatStart(launch()) },
    { type: 'engine.spawned', pid: 1, port: 2 },
    { type: 'engine.ready' },
    { type: 'worker.unload', generation: 1, reason: 'unload' },
    { type: 'engine.exited', report: exitReport() },
  ];
  const paths = getShortestPaths(logic, { events, input: {} });
  const reached = new Map<string, string[]>();
  for (const path of paths) {
    const value = path.state.value;
    const name = typeof value === 'string' ? value : Object.entries(value).map(([p, c]) => `${p}.${String(c)}`)[0]!;
    const steps = path.steps.map((s) => s.event.type).filter((type) => !type.startsWith('xstate.'));
    const known = reached.get(name);
    if (!known || steps.length < known.length) reached.set(name, steps);
  }
  t.same([...reached.keys()].sort(), ['running.loaded', 'running.loading', 'running.unloading', 'unloaded'], 'every leaf state is reached');
  t.same(reached.get('running.loading'), ['worker.start']);
  t.same(reached.get('running.loaded'), ['worker.start', 'engine.ready']);
  t.same(reached.get('running.unloading'), ['worker.start', 'worker.unload']);
  t.same(reached.get('unloaded'), []);
});

// ---------------------------------------------------------------------------------------------
// The llama-server command line (spec 5 rule 3, spec 8)

const place = { port: 39001, keyFile: '/run/service-deck/chat-1.key' };

/** The value after `flag`, or undefined. */
function valueOf(args: string[], flag: string): string | undefined {
  const i = args.indexOf(flag);
  return i < 0 ? undefined : args[i + 1];
}

/** Whether `sequence` appears in `args` as consecutive items. */
function contains(args: string[], sequence: readonly string[]): boolean {
  return args.some((_, i) => sequence.every((item, j) => args[i + j] === item));
}

t.test('serverArgs: the stored parameters, the fixed defaults and the fit', async (t) => {
  t.same(SERVER_DEFAULTS, ['--kv-unified', '-ctk', 'q4_0', '-ctv', 'q4_0', '-fa', 'on', '-lm', 'none'], 'spec 8 fixed backend defaults');
  const cases: Array<{ name: string; launch: ChatLaunch; ngl: string; ts: string | undefined; ot: string[] }> = [
    { name: 'CPU: no GPU layers, no split', launch: launch({ context: 4096, slots: 3 }), ngl: '0', ts: undefined, ot: [] },
    {
      name: 'CPU even if the stored launch names layers and a split',
      launch: launch({ gpuLayers: 12, tensorSplit: [1, 1] }),
      ngl: '0',
      ts: undefined,
      ot: [],
    },
    {
      name: 'two GPUs with a split',
      launch: launch({ gpus: ['GPU-a', 'GPU-b'], gpuLayers: 33, tensorSplit: [3, 1], context: 32768, slots: 4 }),
      ngl: '33',
      ts: '3,1',
      ot: [],
    },
    {
      name: 'one GPU: layers, no split, overrides from the fit',
      launch: launch({ gpus: ['GPU-a'], gpuLayers: 20, overrides: ['blk\\.(2[0-9])\\.ffn_.*=CPU', 'blk\\.3[0-9]\\.=CPU'] }),
      ngl: '20',
      ts: undefined,
      ot: ['blk\\.(2[0-9])\\.ffn_.*=CPU', 'blk\\.3[0-9]\\.=CPU'],
    },
  ];
  for (const c of cases) {
    const args = serverArgs(c.launch, place);
    t.ok(contains(args, SERVER_DEFAULTS), `${c.name}: the fixed defaults, in order`);
    t.equal(valueOf(args, '-m'), c.launch.model, `${c.name}: the model`);
    t.equal(valueOf(args, '-c'), String(c.launch.context), `${c.name}: -c is the stored total context`);
    t.equal(valueOf(args, '-np'), String(c.launch.slots), `${c.name}: -np is the stored slot count`);
    t.equal(valueOf(args, '-ngl'), c.ngl, `${c.name}: -ngl`);
    t.equal(args.filter((a) => a === '-ngl').length, 1, `${c.name}: one -ngl`);
    t.equal(valueOf(args, '-ts'), c.ts, `${c.name}: -ts`);
    t.same(
      args.flatMap((a, i) => (a === '-ot' ? [args[i + 1]] : [])),
      c.ot,
      `${c.name}: -ot overrides`,
    );
    t.equal(valueOf(args, '--alias'), c.launch.name, `${c.name}: answers under the profile name`);
    t.equal(valueOf(args, '--host'), '127.0.0.1', `${c.name}: loopback only`);
    t.equal(valueOf(args, '--port'), String(place.port), `${c.name}: the picked port`);
    t.ok(args.includes('--no-webui'), `${c.name}: no web UI`);
    t.equal(valueOf(args, '--api-key-file'), place.keyFile, `${c.name}: the internal key file`);
    t.notOk(args.includes('--api-key'), `${c.name}: the key itself is never on the command line`);
  }
});

t.test('serverArgs: a launch with tensorSplit gives -ts a,b exactly once', async (t) => {
  const args = serverArgs(launch({ gpus: ['GPU-a', 'GPU-b', 'GPU-c'], gpuLayers: 40, tensorSplit: [0.5, 0.25, 0.25] }), place);
  t.equal(args.filter((a) => a === '-ts').length, 1);
  t.equal(valueOf(args, '-ts'), '0.5,0.25,0.25');
  const cpu = serverArgs(launch(), place);
  t.notOk(cpu.includes('-ts'), 'no -ts on the CPU');
  t.equal(valueOf(cpu, '-ngl'), '0');
});
