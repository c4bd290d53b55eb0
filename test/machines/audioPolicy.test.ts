// Spec 3.6, the audio memory policy machine, row by row on a running actor with a simulated clock
// and a preload the test settles by hand. What the supervisor does with the mode (keep or unload
// after a job, the preload's turn and memory check) is checked in test/machines/supervisor.test.ts.
import t, { type Test } from 'tap';
import { createActor, fromPromise, SimulatedClock } from 'xstate';
import { AUDIO_POLICY_LIMITS, audioPolicyMachine, type AudioPolicyEmitted, type AudioPolicyInput, type AudioWorkerView, type PreloadInput } from '../../machines/audioPolicy/index.js';

interface Pending {
  input: PreloadInput;
  signal: AbortSignal;
  resolve: () => void;
  reject: (error: Error & { code?: string }) => void;
}

function harness(input: Partial<AudioPolicyInput> = {}) {
  const clock = new SimulatedClock();
  const preloads: Pending[] = [];
  const logic = audioPolicyMachine.provide({
    actors: {
      preload: fromPromise<void, PreloadInput>(({ input, signal }) => new Promise<void>((resolve, reject) => preloads.push({ input, signal, resolve, reject }))),
    },
  });
  const actor = createActor(logic, { clock, input: { kind: 'tts', mode: 'auto', profileId: null, ...input } });
  const emitted: AudioPolicyEmitted[] = [];
  actor.on('*', (event) => emitted.push(event));
  actor.start();
  const settle = async () => {
    for (let i = 0; i < 4; i++) await new Promise((resolve) => setImmediate(resolve));
  };
  const h = {
    actor,
    clock,
    preloads,
    emitted,
    settle,
    state: () => JSON.stringify(actor.getSnapshot().value),
    context: () => actor.getSnapshot().context,
    worker(view: Partial<AudioWorkerView>) {
      actor.send({ type: 'worker.changed', worker: { state: 'loaded', profileId: 'voice', stale: false, ...view } });
    },
    endpoint(running: boolean) {
      actor.send({ type: 'endpoint.changed', running });
    },
    /** The latest preload succeeds: the worker is loaded with the selection. */
    async loaded(profileId = 'voice') {
      h.worker({ state: 'loaded', profileId });
      preloads.at(-1)!.resolve();
      await settle();
    },
    async fail(code: string, message = `${code} happened`) {
      preloads.at(-1)!.reject(Object.assign(new Error(message), { code }));
      await settle();
    },
  };
  return h;
}

const warm = (over: Partial<AudioPolicyInput> = {}) => harness({ mode: 'warm', profileId: 'voice', endpointRunning: true, ...over });

interface Row {
  row: string;
  run: (t: Test) => Promise<void>;
}

const rows: Row[] = [
  {
    row: 'auto (default) | load at the first job and keep loaded: the supervisor hears auto; nothing is preloaded',
    async run(t) {
      const h = harness({ endpointRunning: true });
      t.equal(h.state(), '"auto"');
      t.same(h.emitted, [{ type: 'policy.mode', kind: 'tts', mode: 'auto' }]);
      h.worker({ state: 'unloaded', profileId: null });
      h.endpoint(true);
      await h.settle();
      t.same(h.preloads, [], 'auto loads only at the first job');
    },
  },
  {
    row: 'per_request | unload after each request: the supervisor hears per_request; nothing is preloaded',
    async run(t) {
      const h = harness({ kind: 'stt', mode: 'per_request', endpointRunning: true });
      t.equal(h.state(), '"perRequest"');
      t.same(h.emitted, [{ type: 'policy.mode', kind: 'stt', mode: 'per_request' }]);
      t.same(h.preloads, []);
    },
  },
  {
    row: 'warm | the endpoint runs | preload the selected executable profile',
    async run(t) {
      const h = warm();
      t.same(h.emitted, [{ type: 'policy.mode', kind: 'tts', mode: 'warm' }]);
      t.equal(h.state(), '{"warm":"preloading"}');
      t.same(h.preloads.map((p) => p.input), [{ kind: 'tts', profileId: 'voice' }]);
      await h.loaded();
      t.equal(h.state(), '{"warm":"held"}');
      t.equal(h.context().error, null);
    },
  },
  {
    row: 'warm | STT loads on the CPU: the preload names the STT kind (its job reserves no GPU)',
    async run(t) {
      const h = warm({ kind: 'stt', profileId: 'ears' });
      t.same(h.preloads.map((p) => p.input), [{ kind: 'stt', profileId: 'ears' }]);
    },
  },
  {
    row: 'warm | the endpoint is stopped | nothing is preloaded until it runs ("while the endpoint runs")',
    async run(t) {
      const h = warm({ endpointRunning: false });
      t.equal(h.state(), '{"warm":"dormant"}');
      t.same(h.preloads, []);
      h.endpoint(true);
      t.equal(h.state(), '{"warm":"preloading"}');
      t.equal(h.preloads.length, 1);
    },
  },
  {
    row: 'warm | held | displaced (an image job, a chat start that needs the memory, a crash) | reload it',
    async run(t) {
      const h = warm();
      await h.loaded();
      h.worker({ state: 'unloading' });
      t.equal(h.state(), '{"warm":"preloading"}');
      t.equal(h.preloads.length, 2, 'a second preload: it waits its turn in the queue');
      await h.loaded();
      t.equal(h.state(), '{"warm":"held"}');
    },
  },
  {
    row: 'warm | held | a new revision of the selected profile (the worker is stale) | reload it',
    async run(t) {
      const h = warm();
      await h.loaded();
      h.worker({ stale: true });
      t.equal(h.state(), '{"warm":"preloading"}');
    },
  },
  {
    row: 'warm | held | a request loaded another profile (auto use of the same worker) | reload the selection',
    async run(t) {
      const h = warm();
      await h.loaded();
      h.worker({ profileId: 'other' });
      t.equal(h.state(), '{"warm":"preloading"}');
    },
  },
  {
    row: 'warm | held | endpoint stop (it unloads the worker) | no reload while stopped; reload after the next start',
    async run(t) {
      const h = warm();
      await h.loaded();
      h.endpoint(false);
      h.worker({ state: 'unloading' });
      h.worker({ state: 'unloaded', profileId: null });
      t.equal(h.state(), '{"warm":"dormant"}');
      t.equal(h.preloads.length, 1);
      h.endpoint(true);
      t.equal(h.state(), '{"warm":"preloading"}');
      t.equal(h.preloads.length, 2);
    },
  },
  {
    row: 'warm | runtime missing | the selection stays saved, the error appears in errors, the preload is retried later',
    async run(t) {
      const h = warm();
      await h.fail('runtime_missing', 'runtime missing: espeak-ng');
      t.equal(h.state(), '{"warm":"failed"}');
      t.match(h.context(), { mode: 'warm', profileId: 'voice', error: { code: 'runtime_missing', message: 'runtime missing: espeak-ng', attempts: 1 } });
      h.clock.increment(AUDIO_POLICY_LIMITS.retryMs - 1);
      t.equal(h.preloads.length, 1, 'not before the retry time');
      h.clock.increment(1);
      t.equal(h.state(), '{"warm":"preloading"}');
      t.equal(h.preloads.length, 2, 'retried later');
      await h.fail('runtime_missing', 'runtime missing: espeak-ng');
      t.equal(h.context().error?.attempts, 2, 'failures in a row are counted');
      h.clock.increment(AUDIO_POLICY_LIMITS.retryMs);
      await h.loaded();
      t.equal(h.context().error, null, 'a successful preload clears the error');
      t.equal(h.state(), '{"warm":"held"}');
    },
  },
  {
    row: 'warm | resources insufficient (the memory check refused the start) | error in errors, retried later; nothing else is touched',
    async run(t) {
      const h = warm();
      await h.fail('insufficient_memory', 'the TTS worker needs 7168 MiB on GPU-a; 2048 MiB are free');
      t.match(h.context().error, { code: 'insufficient_memory' });
      t.same(h.emitted, [{ type: 'policy.mode', kind: 'tts', mode: 'warm' }], 'the policy asks for nothing else: it never unloads or ends anything');
    },
  },
  {
    row: 'warm | failed | the selected profile is saved again | retried at once',
    async run(t) {
      const h = warm();
      await h.fail('not_executable');
      h.actor.send({ type: 'profile.changed', profileId: 'another' });
      t.equal(h.state(), '{"warm":"failed"}', 'another profile changes nothing');
      h.actor.send({ type: 'profile.changed', profileId: 'voice' });
      t.equal(h.state(), '{"warm":"preloading"}');
    },
  },
  {
    row: 'warm | failed | a request loaded the selection meanwhile | held, the error is gone',
    async run(t) {
      const h = warm();
      await h.fail('queue_full');
      h.worker({ state: 'loading' });
      t.equal(h.state(), '{"warm":"held"}');
      t.equal(h.context().error, null);
    },
  },
  {
    row: 'warm | the selection is already loaded when warm is chosen | held without a preload',
    async run(t) {
      const h = harness({ endpointRunning: true });
      h.worker({ state: 'loaded', profileId: 'voice' });
      h.actor.send({ type: 'policy.set', mode: 'warm', profileId: 'voice' });
      t.equal(h.state(), '{"warm":"held"}');
      t.same(h.preloads, []);
    },
  },
  {
    row: 'warm | the endpoint stopped or the profile changed while the preload waited | no error; decided again',
    async run(t) {
      const h = warm();
      h.endpoint(false);
      t.equal(h.state(), '{"warm":"dormant"}');
      t.ok(h.preloads[0]!.signal.aborted, 'the waiting preload leaves the queue');
      h.endpoint(true);
      await h.fail('profile_changed');
      t.equal(h.context().error, null);
      t.equal(h.state(), '{"warm":"preloading"}', 'the new revision is preloaded');
      t.equal(h.preloads.length, 3);
    },
  },
  {
    row: 'policy.set | warm → auto while a preload waits | the preload is abandoned and the supervisor hears auto',
    async run(t) {
      const h = warm();
      h.actor.send({ type: 'policy.set', mode: 'auto', profileId: null });
      t.equal(h.state(), '"auto"');
      t.ok(h.preloads[0]!.signal.aborted);
      t.same(h.emitted.at(-1), { type: 'policy.mode', kind: 'tts', mode: 'auto' });
    },
  },
  {
    row: 'policy.set | a new choice clears the old error',
    async run(t) {
      const h = warm();
      await h.fail('runtime_missing');
      h.actor.send({ type: 'policy.set', mode: 'per_request', profileId: 'voice' });
      t.equal(h.context().error, null);
      t.equal(h.state(), '"perRequest"');
    },
  },
];

t.test('spec 3.6 audio memory policy, row by row', async (t) => {
  for (const row of rows) await t.test(row.row, row.run);
});

t.test('every state of the machine is reached by the rows above', async (t) => {
  const seen = new Set<string>();
  const h = warm({ endpointRunning: false });
  const note = () => seen.add(h.state());
  h.actor.subscribe(note);
  note();
  h.endpoint(true);
  await h.fail('runtime_missing');
  h.clock.increment(AUDIO_POLICY_LIMITS.retryMs);
  await h.loaded();
  h.actor.send({ type: 'policy.set', mode: 'per_request', profileId: null });
  h.actor.send({ type: 'policy.set', mode: 'auto', profileId: null });
  t.same([...seen].sort(), ['"auto"', '"perRequest"', '{"warm":"dormant"}', '{"warm":"failed"}', '{"warm":"held"}', '{"warm":"preloading"}']);
});
