// The supervisor, row by row: spec 3.2 (chat worker), 3.3 (image), 3.4 (TTS), 3.5 (STT), 3.7 (the
// queue under the supervisor) and 7 (errors), on a running supervisor with its real listener and
// queue children, simulated workers and a simulated clock. Each row names the spec row it checks.
import t from 'tap';
import type { Test } from 'tap';
import { fromCallback, type InspectionEvent } from 'xstate';
import { chatWorkerMachine, type ChatWorkerEvent, type EngineCommand, type EngineInput } from '../../machines/chatWorker/index.js';
import { runsAtOnce, SWITCH_MAX_WAIT_CAP_MS } from '../../machines/supervisor/index.js';
import { diagnostics } from '../../src/system/observe/diagnostics.js';
import { GIB, gpu, model, supervisorHarness, type SupervisorHarness } from '../helpers/supervisor.js';

interface Row {
  row: string;
  run: (t: Test) => Promise<void>;
}

/** A loaded chat worker for profile `a` revision 1 with `slots`, and one finished job on it. */
async function loadedChat(h: SupervisorHarness, over: { profileId?: string; slots?: number } = {}) {
  const first = await h.submit({ profileId: over.profileId ?? 'a', slots: over.slots ?? 1 });
  await h.release(first);
  return first;
}

const chatRows: Row[] = [
  {
    row: '3.2 unloaded | first request for a published chat profile | resources free, memory check passes | loaded: started with stored parameters',
    async run(t) {
      const h = supervisorHarness();
      const id = await h.submit({ profileId: 'a', slots: 2 });
      t.same(h.outcome(id), ['job.queued', 'granted +start']);
      const grant = h.grant(id)!;
      t.equal(grant.worker, 'chat');
      t.equal(grant.start?.gpuLayers, null, 'CPU only: no GPU layers');
      t.match(grant.start?.fit, /CPU only/);
      t.same(h.calls, ['check ' + id], 'one memory check before the start');
      t.match(h.worker('chat'), { state: 'loaded', profileId: 'a', revision: 1, slots: 2 });
    },
  },
  {
    row: '3.2 unloaded | chat test start | resources free | loaded (the test needs no publication: source test goes through the same scheduler)',
    async run(t) {
      const h = supervisorHarness();
      const id = await h.submit({ source: 'test' });
      t.same(h.outcome(id), ['job.queued', 'granted +start']);
    },
  },
  {
    row: '3.2 unloaded | first request | memory check fails | stays unloaded: 503 insufficient_memory, named as a forecast',
    async run(t) {
      const h = supervisorHarness({ world: { ramMiB: 2 * GIB } });
      h.world.chat.a = { model: model(32, 200), context: 8192, gpuSplit: null, gpuLayers: null };
      const id = await h.submit();
      t.same(h.outcome(id), ['job.queued', 'denied insufficient_memory']);
      t.match(h.denial(id)?.message, /forecast.*not a proof/);
      t.equal(h.worker('chat').state, 'unloaded');
      t.same(h.queueJobs(), [], 'the refused job left the queue');
    },
  },
  {
    row: '7 busy GPU at worker start | the start is rejected (503 resources_busy) and the foreign process is left alone',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a', 24 * GIB, 20 * GIB, [{ pid: 77, usedMiB: 4 * GIB }])] } });
      const id = await h.submit();
      t.same(h.outcome(id), ['job.queued', 'denied resources_busy']);
      t.match(h.denial(id)?.message, /pid 77.*left alone/);
      t.same(h.unloads(), [], 'nothing is unloaded or signalled');
    },
  },
  {
    row: '3.2 the same profile answers in parallel up to its slot count; the next waits',
    async run(t) {
      const h = supervisorHarness();
      const ids = [await h.submit({ slots: 2 }), await h.submit({ slots: 2 }), await h.submit({ slots: 2 })];
      t.ok(h.granted(ids[0]!) && h.granted(ids[1]!), 'two run together');
      t.notOk(h.granted(ids[2]!), 'the third waits');
      t.same(h.waiting(), [ids[2]]);
      await h.release(ids[0]!);
      t.same(h.outcome(ids[2]!), ['job.queued', 'granted'], 'a freed slot goes to the next, without a new start');
    },
  },
  {
    row: '3.2 streaming keeps the model reservation until the output ends',
    async run(t) {
      const h = supervisorHarness();
      const stream = await h.submit({ profileId: 'a' });
      const other = await h.submit({ profileId: 'b' });
      t.notOk(h.granted(other), 'the switch waits while the stream runs');
      t.same(h.unloads(), [], 'the streaming worker is not unloaded');
      await h.release(stream);
      t.same(h.outcome(other), ['job.queued', 'granted +start'], 'after the last byte the switch happens');
    },
  },
  {
    row: '3.2 loaded | request for a different profile | unloaded, then loaded with the new profile: the own worker is unloaded first',
    async run(t) {
      const h = supervisorHarness();
      await loadedChat(h, { profileId: 'a' });
      const id = await h.submit({ profileId: 'b' });
      const order = h.emitted.filter((e) => e.type === 'worker.unload' || (e.type === 'gpu.granted' && e.jobId === id)).map((e) => e.type);
      t.same(order, ['worker.unload', 'gpu.granted'], 'unload before the new start');
      t.match(h.unloads('chat')[0], { code: 'profile_switch', reason: /switch to profile b/ });
      t.same(h.commands, ['chat 1'], 'the command reached the chat worker machine, the supervisor\'s child, and it reported the unload itself');
      t.match(h.worker('chat'), { state: 'loaded', profileId: 'b' });
    },
  },
  {
    row: '3.2 strict order: a waiting switch is not overtaken at all: later same-profile chats queue behind it',
    async run(t) {
      const h = supervisorHarness({ scheduling: { order: 'strict' } });
      const running = await h.submit({ profileId: 'a', slots: 4 });
      const sw = await h.submit({ profileId: 'b' });
      const later = [await h.submit({ profileId: 'a', slots: 4 }), await h.submit({ profileId: 'a', slots: 4 })];
      t.notOk(h.granted(later[0]!) || h.granted(later[1]!), 'free slots of a are not given past the waiting switch');
      await h.release(running);
      t.same(h.outcome(sw), ['job.queued', 'granted +start'], 'the switch runs first');
      t.notOk(h.granted(later[0]!), 'a waits for b to finish');
      await h.release(sw);
      t.ok(h.granted(later[0]!) && h.granted(later[1]!), 'then a loads again for both');
    },
  },
  {
    row: '3.2 swap-aware | a request for a different profile waits | chats for the loaded profile take its free slots until the switch has waited its bound, then it goes first and nothing overtakes it',
    async run(t) {
      const h = supervisorHarness({ scheduling: { switchMaxWaitMs: 30_000 } });
      await loadedChat(h, { slots: 2 });
      const running = await h.submit({ profileId: 'a', slots: 2 });
      const sw = await h.submit({ profileId: 'b' });
      t.same(h.context().jobs[sw]?.switchBound, { ms: 30_000, reached: false }, 'the bound is given when it is queued');
      const a1 = await h.submit({ profileId: 'a', slots: 2 });
      t.same(h.outcome(a1), ['job.queued', 'granted'], 'a free slot of a is taken past the waiting switch (the measured answer of a ends long before the switch could expire)');
      const a2 = await h.submit({ profileId: 'a', slots: 2 });
      const a3 = await h.submit({ profileId: 'a', slots: 2 });
      t.same([h.outcome(a2), h.outcome(a3)], [['job.queued'], ['job.queued']], 'both slots busy: they wait, in their order');
      const reasons = () => diagnostics(h.context(), { now: h.clock.now(), times: () => undefined, since: () => null }).queue.waiting.map((j) => [j.job_id, j.reason]);
      t.same(reasons(), [[sw, "behind the loaded profile's requests, at most 30 s more"], [a2, null], [a3, null]], 'the queue view says why the switch waits');
      await h.release(running);
      t.same([h.outcome(a2), h.outcome(a3), h.outcome(sw)], [['job.queued', 'granted'], ['job.queued'], ['job.queued']], 'the freed slot goes to the first of a, not past it');
      h.clock.increment(29_999);
      await h.settle();
      t.same(reasons()[0], [sw, "behind the loaded profile's requests, at most 1 s more"]);
      await h.release(a1);
      t.same(h.outcome(a3), ['job.queued', 'granted'], 'still within the bound');
      const a4 = await h.submit({ profileId: 'a', slots: 2 });
      h.clock.increment(1);
      await h.settle();
      t.same(h.context().jobs[sw]?.switchBound, { ms: 30_000, reached: true });
      t.same(reasons()[0], [sw, null], 'past its bound it waits in plain FIFO order');
      await h.release(a2);
      t.same(h.outcome(a4), ['job.queued'], 'the bound has passed: the free slot is not taken past the switch');
      t.same(h.unloads('chat'), [], 'a3 still answers');
      await h.release(a3);
      t.same(h.unloads('chat').map((u) => u.code), ['profile_switch']);
      t.same(h.outcome(sw), ['job.queued', 'granted +start'], 'the switch goes first once the running answers ended');
      t.same(h.outcome(a4), ['job.queued'], 'a waits for b');
    },
  },
  {
    row: '3.2 swap-aware | the loaded profile has no request left in the queue | the switch goes at once (its running answers end first)',
    async run(t) {
      const h = supervisorHarness();
      const running = await h.submit({ profileId: 'a', slots: 2 });
      const sw = await h.submit({ profileId: 'b' });
      await h.release(running);
      t.same(h.outcome(sw), ['job.queued', 'granted +start'], 'nobody of a waits: no reason to hold the switch');
      t.same(h.unloads('chat').map((u) => u.code), ['profile_switch']);
    },
  },
  {
    row: '3.2 swap-aware | two switches wait | chats for the loaded profile overtake both within their bounds; the first switch goes first; images, TTS and chats of other profiles keep their order',
    async run(t) {
      const h = supervisorHarness();
      const running = await h.submit({ profileId: 'a', slots: 2 });
      const b = await h.submit({ profileId: 'b' });
      const c = await h.submit({ profileId: 'c' });
      const image = await h.submit({ kind: 'image', profileId: 'img' });
      const a1 = await h.submit({ profileId: 'a', slots: 2 });
      t.same(h.outcome(a1), ['job.queued'], 'an image waits before it: the chat keeps the FIFO order behind the image');
      await h.release(running);
      t.same(h.outcome(b), ['job.queued', 'granted +start'], 'with only the image ahead of a1, nothing of a is free to overtake: b goes');
      t.same([h.outcome(c), h.outcome(image), h.outcome(a1)], [['job.queued'], ['job.queued'], ['job.queued']]);
      await h.release(b);
      t.same(h.outcome(c), ['job.queued', 'granted +start'], 'then c, in its order');
    },
  },
  {
    row: "3.2 swap-aware | the bound is the longer of the setting and the switch target's own last measured load, of its revision; without one, the setting",
    async run(t) {
      const h = supervisorHarness({ scheduling: { switchMaxWaitMs: 1000 }, loadMs: (_kind, profileId) => (profileId === 'a' ? 45_000 : 5000) });
      const running = await h.submit({ profileId: 'a', slots: 2 });
      t.same(h.context().chatLoads, { a: { revision: 1, ms: 45_000 } }, "a's load is measured");
      const b = await h.submit({ profileId: 'b' });
      t.same(h.context().jobs[b]?.switchBound, { ms: 1000, reached: false }, 'b has no measured load: the setting, not the 45 s of a');
      await h.release(running);
      t.same(h.outcome(b), ['job.queued', 'granted +start']);
      const a = await h.submit({ profileId: 'a' });
      t.same(h.context().jobs[a]?.switchBound, { ms: 45_000, reached: false }, "a's own 45 s, not the 5 s of the last load (b's)");
      await h.send({ type: 'profile.changed', profileId: 'a', revision: 2, published: true });
      const a2 = await h.submit({ profileId: 'a', revision: 2 });
      t.same(h.context().jobs[a2]?.switchBound, { ms: 1000, reached: false }, 'a new revision may load another model: the setting until its own load is measured');
    },
  },
  {
    row: '3.2 swap-aware | a slow load or a large setting | the bound is at most 120 s: then nothing overtakes the switch, which waits only for the running answers',
    async run(t) {
      const h = supervisorHarness({ scheduling: { switchMaxWaitMs: 1000 }, loadMs: (_kind, profileId) => (profileId === 'b' ? 600_000 : 2000) });
      await h.release(await h.submit({ profileId: 'b' }));
      const chatA = () => h.submit({ profileId: 'a', slots: 2 });
      await h.release(await chatA());
      const running = [await chatA(), await chatA()];
      const sw = await h.submit({ profileId: 'b' });
      const queuedAt = h.clock.now();
      t.same(h.context().jobs[sw]?.switchBound, { ms: SWITCH_MAX_WAIT_CAP_MS, reached: false }, "b's own 600 s load is capped");
      // Steady traffic for a: a new chat every 10 s, one answer of a ending every 10 s, up to 1 ms before the cap.
      const steps = [...Array<number>(11).fill(10_000), 9999];
      let overtakes = 0;
      for (const ms of steps) {
        const next = await chatA();
        h.clock.increment(ms);
        await h.settle();
        await h.release(running.shift()!);
        if (h.granted(next)) overtakes += 1;
        running.push(next);
      }
      t.equal(overtakes, steps.length, 'every freed slot went to a while the switch waited less than 120 s');
      t.equal(h.clock.now() - queuedAt, SWITCH_MAX_WAIT_CAP_MS - 1);
      const late = await chatA();
      h.clock.increment(1);
      await h.settle();
      t.same(h.context().jobs[sw]?.switchBound, { ms: SWITCH_MAX_WAIT_CAP_MS, reached: true });
      await h.release(running.shift()!);
      t.same(h.outcome(late), ['job.queued'], 'at 120 s the freed slot is not taken past the switch');
      t.notOk(h.granted(sw), 'the last running answer of a goes on');
      await h.release(running.shift()!);
      t.same(h.outcome(sw), ['job.queued', 'granted +start'], 'the switch goes once the running answers ended, not after its 600 s load');
      t.equal(h.clock.now() - queuedAt, SWITCH_MAX_WAIT_CAP_MS);

      const large = supervisorHarness({ scheduling: { switchMaxWaitMs: 600_000 } });
      await large.submit({ profileId: 'a' });
      const other = await large.submit({ profileId: 'b' });
      t.same(large.context().jobs[other]?.switchBound, { ms: SWITCH_MAX_WAIT_CAP_MS, reached: false }, 'a setting above the cap (refused at start by the config) is capped by the machine as well');
    },
  },
  {
    row: "3.2 swap-aware | chats for the loaded profile that start inside a switch's bound stream for up to 600 s | with the profile's answers measured long, none overtakes: the switch is granted when the running answer ends, as under strict order; with answers measured short, overtakers that then run far past their p95 make it expire at 600 s, the limit (3.7) being absolute",
    async run(t) {
      /**
       * The scenario: a answered once in `measuredMs`; one answer of a runs, a switch to b is
       * queued, chats for a arrive 10 s and 20 s later, the running answer ends at 20 s, and the
       * chats for a that got a slot stream past 600 s. What the switch hears, and when.
       */
      const scenario = async (order: 'strict' | 'swap-aware', measuredMs: number) => {
        const h = supervisorHarness({ scheduling: { order, switchMaxWaitMs: 30_000 } });
        const measured = await h.submit({ profileId: 'a', slots: 2 });
        h.clock.increment(measuredMs);
        await h.release(measured);
        const running = await h.submit({ profileId: 'a', slots: 2 });
        const sw = await h.submit({ profileId: 'b' });
        const queuedAt = h.clock.now();
        h.clock.increment(10_000);
        const a1 = await h.submit({ profileId: 'a', slots: 2 });
        h.clock.increment(10_000);
        await h.release(running);
        const a2 = await h.submit({ profileId: 'a', slots: 2 });
        const at20s = { switch: h.outcome(sw), overtakers: [a1, a2].filter((id) => h.granted(id) && !h.granted(sw)).length };
        h.clock.increment(queuedAt + 600_000 - 1 - h.clock.now());
        await h.settle();
        const before600s = h.outcome(sw);
        h.clock.increment(1);
        await h.settle();
        const result = { at20s, before600s, at600s: h.outcome(sw), answers: h.context().chatAnswers.a?.ms };
        h.actor.stop();
        return result;
      };
      const servedAt20s = (measuredMs: number) => ({
        at20s: { switch: ['job.queued', 'granted +start'], overtakers: 0 },
        before600s: ['job.queued', 'granted +start'],
        at600s: ['job.queued', 'granted +start'],
        answers: [measuredMs, 20_000],
      });
      t.same(await scenario('strict', 600_000), servedAt20s(600_000), 'strict order: the switch is granted at 20 s, when the answer it found running ended');
      t.same(
        await scenario('swap-aware', 600_000),
        servedAt20s(600_000),
        "a's answers measured at 600 s (p95 600 s: begun within the 30 s bound they could end after the limit): a1 and a2 do not overtake, the switch is granted at 20 s as strict order grants it, not refused at 600 s",
      );
      t.same(
        await scenario('swap-aware', 1000),
        { at20s: { switch: ['job.queued'], overtakers: 2 }, before600s: ['job.queued'], at600s: ['job.queued', 'denied queue_timeout'], answers: [1000, 20_000] },
        "the residual case: a's answers measured at 1 s, a1 and a2 overtake; they then stream for almost 600 s, far past that p95, and the switch expires at 600 s: the limit is absolute, it is not held for them",
      );
    },
  },
  {
    row: "3.2 swap-aware | the loaded profile's answers take long | a chat overtakes a waiting switch only if its profile's answers (p95 of the last 20) end, begun at the end of the bound, 30 s before the switch's 600 s limit; unmeasured answers count as 600 s",
    async run(t) {
      /** a is loaded after answers that held their slot `answers` ms each; one of a runs, a switch to b waits: does a later chat for a overtake it? */
      const overtakes = async (answers: number[], switchMaxWaitMs = 30_000) => {
        const h = supervisorHarness({ scheduling: { switchMaxWaitMs } });
        for (const ms of answers) {
          const id = await h.submit({ profileId: 'a', slots: 2 });
          h.clock.increment(ms);
          await h.release(id);
        }
        await h.submit({ profileId: 'a', slots: 2 });
        const sw = await h.submit({ profileId: 'b' });
        const later = await h.submit({ profileId: 'a', slots: 2 });
        // One more for a waits (both slots busy): the queue view says whether the switch is overtaken.
        await h.submit({ profileId: 'a', slots: 2 });
        const verdict = h.granted(later) && !h.granted(sw);
        const reason = diagnostics(h.context(), { now: h.clock.now(), times: () => undefined, since: () => null }).queue.waiting[0]?.reason ?? null;
        h.actor.stop();
        return [verdict, reason];
      };
      t.same(await overtakes([]), [false, null], 'no answer of a measured: taken as a 600 s stream, it would end after the limit: the switch keeps its place');
      t.same(await overtakes([540_000]), [true, "behind the loaded profile's requests, at most 30 s more"], 'answers of 540 s: begun at 30 s they end at 570 s, 30 s before the limit');
      t.same(await overtakes([540_001]), [false, null], 'a millisecond longer: nothing overtakes the switch');
      t.same(await overtakes([450_000], 120_000), [true, "behind the loaded profile's requests, at most 120 s more"], 'a 120 s bound: answers of 450 s still end in time');
      t.same(await overtakes([450_001], 120_000), [false, null]);
      t.same(await overtakes([...Array<number>(19).fill(1000), 600_000]), [true, "behind the loaded profile's requests, at most 30 s more"], 'one answer in 20 ran to the stream limit: the p95 is the second longest, 1 s');
      t.same(await overtakes([...Array<number>(18).fill(1000), 600_000, 600_000]), [false, null], 'two in 20: the p95 is 600 s');
      t.same(await overtakes([600_000, ...Array<number>(20).fill(1000)]), [true, "behind the loaded profile's requests, at most 30 s more"], 'the window keeps the last 20: an older long answer no longer counts');
    },
  },
  {
    row: '3.2 loaded | a new revision of the profile | unloaded, then loaded with the new revision',
    async run(t) {
      const h = supervisorHarness();
      const running = await h.submit({ profileId: 'a', revision: 1 });
      await h.send({ type: 'profile.changed', profileId: 'a', revision: 2, published: true });
      t.same(h.worker('chat').stale, { code: 'profile_changed', reason: 'its profile has a new revision (2)' });
      t.same(h.unloads(), [], 'running answers keep their adopted profile');
      await h.release(running);
      t.same(h.unloads('chat').map((u) => u.code), ['profile_changed'], 'unloaded once idle');
      t.equal(h.worker('chat').state, 'unloaded');
      const next = await h.submit({ profileId: 'a', revision: 2 });
      t.same(h.outcome(next), ['job.queued', 'granted +start']);
      t.equal(h.worker('chat').revision, 2);
    },
  },
  {
    row: '3.2 loaded | image job | unloaded: the chat model and the speech model are unloaded before generation',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a'), gpu('GPU-b')], tts: { device: 'GPU-a', memoryMiB: 7 * GIB } } });
      await loadedChat(h);
      const speech = await h.submit({ kind: 'tts', profileId: 't', device: 'GPU-a' });
      await h.release(speech);
      t.equal(h.worker('tts').state, 'loaded');
      const image = await h.submit({ kind: 'image', profileId: 'img' });
      t.same(
        h.unloads().map((u) => [u.kind, u.code]),
        [
          ['chat', 'image_job'],
          ['tts', 'image_job'],
        ],
      );
      t.same(h.outcome(image), ['job.queued', 'granted +start']);
      t.same(h.grant(image)?.gpus, ['GPU-a', 'GPU-b'], 'the image job holds both GPUs');
      const chat = await h.submit();
      t.notOk(h.granted(chat), 'a text request waits for the image');
      await h.release(image);
      t.same(h.unloads('image').map((u) => u.code), ['image_done'], 'the image process is terminated after the image');
      t.same(h.outcome(chat), ['job.queued', 'granted +start'], 'the next text request reloads its profile');
    },
  },
  {
    row: '3.2 loaded | additional foreign GPU process during operation | unloaded: only the own worker is ended',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a'), gpu('GPU-b')] } });
      const id = await h.submit();
      t.equal(h.calls.includes('watch start'), true, 'the GPUs are watched while the chat worker holds one');
      const own = h.worker('chat').pid!;
      await h.send({ type: 'gpu.inventory', gpus: [gpu('GPU-a', 24 * GIB, 10 * GIB, [{ pid: own, usedMiB: 8 * GIB }]), gpu('GPU-b')] });
      t.equal(h.worker('chat').state, 'loaded', 'our own process is not foreign');
      await h.send({ type: 'gpu.inventory', gpus: [gpu('GPU-a', 24 * GIB, 6 * GIB, [{ pid: own, usedMiB: 8 * GIB }, { pid: 4242, usedMiB: 4 * GIB }]), gpu('GPU-b')] });
      t.same(h.outcome(id), ['job.queued', 'granted +start', 'revoked resources_busy'], 'its running request ends with a clear error');
      t.same(
        h.unloads().map((u) => u.kind),
        ['chat'],
        'only the own chat worker is unloaded; nothing else is signalled',
      );
      t.match(h.unloads('chat')[0], { code: 'foreign_process', reason: /pid 4242.*only our own chat worker/ });
      t.equal(h.calls.at(-1), 'watch stop');
    },
  },
  {
    row: '3.2 loaded | explicit unload in the chat test | no active requests | unloaded; with active requests the unload is rejected',
    async run(t) {
      const h = supervisorHarness();
      const active = await h.submit({ source: 'test' });
      await h.send({ type: 'worker.unloadRequest', kind: 'chat', requestId: 'r1' });
      const reply = (id: string) => h.emitted.find((e) => e.type === 'supervisor.reply' && e.requestId === id);
      t.match(reply('r1'), { outcome: { ok: false, code: 'active_requests' } });
      t.equal(h.worker('chat').state, 'loaded');
      await h.release(active);
      await h.send({ type: 'worker.unloadRequest', kind: 'chat', requestId: 'r2' });
      t.match(reply('r2'), { outcome: { ok: true } });
      t.equal(h.worker('chat').state, 'unloaded');
    },
  },
  {
    row: '3.2 loading | cancel in the chat test | own start | unloaded: the start is aborted',
    async run(t) {
      const h = supervisorHarness({ autoWorkers: false });
      const id = await h.submit({ source: 'test' });
      t.equal(h.worker('chat').state, 'loading');
      await h.send({ type: 'job.cancel', jobId: id });
      t.equal(h.unloads('chat').length, 1);
      t.match(h.unloads('chat')[0], { code: 'operator', reason: /start is aborted/ });
      await h.send({ type: 'worker.unloaded', kind: 'chat', generation: h.gen('chat') });
      t.equal(h.worker('chat').state, 'unloaded');
    },
  },
  {
    row: '3.2 a grant that starts the worker comes with its start: a job that ends between its grant and anything it does (its client left) leaves no worker loading without a process',
    async run(t) {
      // The real chat worker machine, with an engine that spawns and answers at once.
      const spawned: number[] = [];
      const engine = fromCallback<EngineCommand, EngineInput, ChatWorkerEvent>(({ input, sendBack }) => {
        spawned.push(input.launch.generation);
        sendBack({ type: 'engine.spawned', pid: 4100 + input.launch.generation, port: 39001 });
        sendBack({ type: 'engine.ready' });
      });
      const h = supervisorHarness({ workers: { chat: chatWorkerMachine.provide({ actors: { engine } }) } });
      const chatChild = () => h.actor.system.get('chatWorker')?.getSnapshot() as ReturnType<typeof chatWorkerMachine.transition>;
      // The first job's route hears its grant, and its client has gone: it cancels before it does anything with the grant.
      let left = false;
      h.actor.on('gpu.granted', (event) => {
        if (left) return;
        left = true;
        h.actor.send({ type: 'job.cancel', jobId: event.jobId });
      });
      const profile = { name: 'chat-a', params: { model: '/models/a.gguf', context: 4096, slots: 2 } };
      const id = await h.submit({ slots: 2, profile });
      t.same(h.outcome(id), ['job.queued', 'granted +start']);
      t.same(spawned, [1], 'the worker machine got the start with the grant: its process runs');
      t.match(chatChild().context.launch, { generation: 1, name: 'chat-a', model: '/models/a.gguf', slots: 2 }, "with the job's profile snapshot");
      t.same(h.context().jobs, {}, 'the job is gone');
      t.match(h.worker('chat'), { state: 'loaded', generation: 1, pid: 4101 }, 'the record is not left loading: the worker loaded');
      const next = await h.submit({ slots: 2, profile });
      t.same(h.outcome(next), ['granted'], 'the next job runs on it at once');
    },
  },
  {
    row: '3.2 loaded | answer finished (chat test) | loaded: the process stays loaded',
    async run(t) {
      const h = supervisorHarness();
      await loadedChat(h);
      t.equal(h.worker('chat').state, 'loaded');
      t.same(h.unloads(), []);
    },
  },
  {
    row: '3.2 a worker that dies: its running requests fail (worker_failed) and the next request reloads',
    async run(t) {
      const h = supervisorHarness();
      const id = await h.submit();
      await h.send({ type: 'worker.exited', kind: 'chat', generation: h.gen('chat'), cause: 'unclear', message: 'exit code 134: memory, model or build' });
      t.same(h.outcome(id), ['job.queued', 'granted +start', 'revoked worker_failed']);
      t.match(h.worker('chat'), { state: 'unloaded', last: /exit code 134/ });
      const next = await h.submit();
      t.same(h.outcome(next), ['job.queued', 'granted +start']);
    },
  },
];

const reportRows: Row[] = [
  {
    row: 'an unload that fails (the process outlives SIGKILL): the worker is lost and keeps its memory until the probe shows it gone',
    async run(t) {
      const h = supervisorHarness({ stuck: ['chat'], world: { gpus: [gpu('GPU-a', 24 * GIB)], tts: { device: 'GPU-a', memoryMiB: 7 * GIB } } });
      await h.release(await h.submit({ profileId: 'a' }));
      const pid = h.worker('chat').pid!;
      const held = h.worker('chat').plan?.forecast.gpuMiB['GPU-a'] ?? 0;
      t.ok(held > 0, `the chat worker holds ${Math.round(held)} MiB of GPU-a`);
      // Its process still holds that memory on the GPU, as nvidia-smi would show it.
      h.world.gpus = [gpu('GPU-a', 24 * GIB, 24 * GIB - Math.ceil(held), [{ pid, usedMiB: Math.ceil(held) }])];
      const next = await h.submit({ profileId: 'b' });
      t.same(h.unloads('chat').map((u) => u.code), ['profile_switch']);
      t.equal(h.worker('chat').state, 'lost', 'the unload failed: lost');
      t.match(h.worker('chat'), { pid, last: /did not end after SIGKILL/ }, 'it keeps its pid and says why');
      t.ok(h.worker('chat').plan, 'and its plan: its memory stays counted');
      t.same(h.outcome(next), ['job.queued'], 'a new chat start waits: its process may still hold the GPU');
      t.ok(h.calls.includes('watch start'), 'the GPU watcher runs to see it go');
      // A TTS start on the same GPU counts the lost worker's memory as taken.
      const speech = await h.submit({ kind: 'tts', profileId: 't', device: 'GPU-a' });
      t.same(h.outcome(speech), ['job.queued', 'granted +start']);
      t.ok((h.grant(speech)?.start?.gpuBudget[0]?.availableMiB ?? Infinity) <= 24 * GIB - held, 'the memory check did not count the lost memory as free');
      await h.release(speech);
      // The probe still shows it: nothing changes.
      await h.send({ type: 'gpu.inventory', gpus: [gpu('GPU-a', 24 * GIB, 10 * GIB, [{ pid, usedMiB: Math.ceil(held) }])] });
      t.equal(h.worker('chat').state, 'lost');
      // The probe no longer shows it: its memory is free, and the waiting start goes ahead.
      h.world.gpus = [gpu('GPU-a', 24 * GIB)];
      await h.send({ type: 'gpu.inventory', gpus: [gpu('GPU-a', 24 * GIB)] });
      t.equal(h.worker('chat').profileId, 'b', 'the waiting chat job started its worker once the lost one was gone');
      t.same(h.outcome(next), ['job.queued', 'granted +start']);
    },
  },
  {
    row: 'an endpoint stop with a worker that outlives SIGKILL still ends: the lost worker does not hold the stop forever',
    async run(t) {
      const h = supervisorHarness({ stuck: ['chat'] });
      await h.release(await h.submit({ profileId: 'a' }));
      await h.send({ type: 'workers.unloadAll', requestId: 'stop' });
      t.equal(h.worker('chat').state, 'lost');
      t.ok(h.emitted.some((e) => e.type === 'supervisor.reply' && e.requestId === 'stop'), 'the stop is answered');
      // The process ends at last: unloaded.
      await h.send({ type: 'worker.unloaded', kind: 'chat', generation: h.gen('chat') });
      t.equal(h.worker('chat').state, 'unloaded');
    },
  },
  {
    row: 'a worker whose program is gone when its start runs: its job ends with runtime_missing (503), not worker_failed',
    async run(t) {
      const h = supervisorHarness({ autoWorkers: false });
      const id = await h.submit({ kind: 'image', profileId: 'img' });
      t.same(h.outcome(id), ['job.queued', 'granted +start']);
      await h.send({ type: 'worker.exited', kind: 'image', generation: h.gen('image'), cause: 'runtime_missing', message: 'sd-cli is not installed' });
      t.same(h.outcome(id), ['job.queued', 'granted +start', 'revoked runtime_missing']);
      const other = await h.submit({ kind: 'stt', profileId: 's' });
      await h.send({ type: 'worker.exited', kind: 'stt', generation: h.gen('stt'), cause: 'unclear', message: 'exit code 1' });
      t.same(h.outcome(other).at(-1), 'revoked worker_failed', 'another cause stays worker_failed');
    },
  },
  {
    row: 'a late unload report does not wipe a worker started since: never two chat processes',
    async run(t) {
      const h = supervisorHarness({ autoWorkers: false });
      const a = await h.submit({ profileId: 'a' });
      const first = h.gen('chat');
      await h.send({ type: 'worker.started', kind: 'chat', generation: first, pid: 1 });
      await h.send({ type: 'worker.loaded', kind: 'chat', generation: first });
      await h.release(a);
      const b = await h.submit({ profileId: 'b' });
      t.equal(h.worker('chat').state, 'unloading');
      await h.send({ type: 'worker.exited', kind: 'chat', generation: first, cause: 'stopped', message: 'SIGTERM' });
      t.same(h.outcome(b), ['job.queued', 'granted +start'], 'the exit of the process we stopped completes the unload');
      const second = h.gen('chat');
      t.equal(second, first + 1, 'the new start has its own generation');
      await h.send({ type: 'worker.unloaded', kind: 'chat', generation: first });
      await h.send({ type: 'worker.exited', kind: 'chat', generation: first, cause: 'unclear', message: 'late' });
      await h.send({ type: 'worker.started', kind: 'chat', generation: first, pid: 1 });
      t.match(h.worker('chat'), { state: 'loading', profileId: 'b', pid: null }, 'late reports about the first start change nothing');
      await h.send({ type: 'worker.started', kind: 'chat', generation: second, pid: 2 });
      const c = await h.submit({ profileId: 'c' });
      t.same(h.outcome(c), ['job.queued'], 'c waits for b instead of starting a second process');
      t.same(h.outcome(b), ['job.queued', 'granted +start'], 'b was not revoked');
      t.equal(h.worker('chat').pid, 2);
    },
  },
  {
    row: 'a snapshot of an older revision than one already seen is refused: it may not reload the old revision',
    async run(t) {
      const h = supervisorHarness();
      await h.send({ type: 'profile.changed', profileId: 'a', revision: 2, published: true });
      const fresh = await h.submit({ profileId: 'a', revision: 2 });
      t.same(h.outcome(fresh), ['job.queued', 'granted +start']);
      const old = await h.submit({ profileId: 'a', revision: 1 });
      t.same(h.outcome(old), ['denied profile_changed']);
      t.same(h.unloads(), [], 'the newer worker stays');
      await h.send({ type: 'profile.changed', profileId: 'a', revision: null, published: false });
      t.same(h.outcome(await h.submit({ profileId: 'a', revision: 2 })), ['denied profile_changed'], 'a deleted profile takes no jobs');
    },
  },
  {
    row: '3.1 the service ends while the endpoint is stopped: workers an admin test loaded are unloaded too',
    async run(t) {
      const h = supervisorHarness();
      const test = await h.submit({ source: 'test' });
      const waiting = await h.submit({ source: 'test', profileId: 'b' });
      h.actor.system.get('listener')?.send({ type: 'service.shutdown' });
      await h.settle();
      t.same(h.outcome(waiting), ['job.queued', 'denied endpoint_stopped']);
      t.same(h.outcome(test), ['job.queued', 'granted +start', 'revoked endpoint_stopped']);
      t.same(h.unloads().map((u) => [u.kind, u.code, u.reason]), [['chat', 'shutdown', 'the service is ending']]);
      t.equal(h.actor.getSnapshot().status, 'done', 'the supervisor ends once every worker reported');
    },
  },
  {
    row: 'the service ends: a worker that never reports its unload holds the end for at most the closing limit',
    async run(t) {
      const h = supervisorHarness({ autoWorkers: false });
      await h.submit();
      h.actor.system.get('listener')?.send({ type: 'service.shutdown' });
      await h.settle();
      t.match(h.actor.getSnapshot().value, 'closing');
      h.clock.increment(60_000);
      t.equal(h.actor.getSnapshot().status, 'done');
    },
  },
  {
    row: 'a stop whose unload was never confirmed does not block the endpoint once it is started again',
    async run(t) {
      const h = supervisorHarness({ autoWorkers: false });
      const id = await h.submit();
      await h.release(id);
      await h.send({ type: 'endpoint.discard', requestId: 'd' });
      await h.send({ type: 'workers.unloadAll', requestId: 'u' });
      t.same(h.outcome(await h.submit({ profileId: 'x' })), ['denied endpoint_stopped']);
      await h.send({ type: 'endpoint.opened' });
      const next = await h.submit({ kind: 'stt', profileId: 's' });
      t.same(h.outcome(next), ['job.queued'], 'accepted again; its start waits while memory is in flux');
      await h.send({ type: 'worker.unloaded', kind: 'chat', generation: h.gen('chat') });
      t.same(h.outcome(next), ['job.queued', 'granted +start'], 'and runs once the old worker is gone');
    },
  },
];

const imageRows: Row[] = [
  {
    row: '3.3, 3.4 the GPU mode is a state: LLM mode until an image job holds every GPU, exclusive image until its image process is gone',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a'), gpu('GPU-b')] } });
      const mode = () => (h.actor.getSnapshot().matches({ active: { gpuMode: 'exclusiveImage' } }) ? 'exclusiveImage' : h.actor.getSnapshot().matches({ active: { gpuMode: 'llm' } }) ? 'llm' : '?');
      await loadedChat(h);
      t.equal(mode(), 'llm', 'a loaded chat profile: LLM GPU mode');
      const image = await h.submit({ kind: 'image', profileId: 'img' });
      t.ok(h.granted(image));
      t.equal(mode(), 'exclusiveImage', 'the image job holds every GPU');
      const chat = await h.submit();
      t.notOk(h.granted(chat), 'a text request waits out the exclusive image mode');
      await h.release(image);
      t.equal(h.worker('image').state, 'unloaded', 'the image process is gone');
      t.equal(mode(), 'llm', 'LLM GPU mode again');
      t.ok(h.granted(chat), 'and the waiting text request reloads its profile');
    },
  },
  {
    row: '3.3 API image requests wait for a busy reservation',
    async run(t) {
      const h = supervisorHarness();
      const chat = await h.submit();
      const image = await h.submit({ kind: 'image', profileId: 'img' });
      t.same(h.outcome(image), ['job.queued']);
      await h.release(chat);
      t.same(h.outcome(image), ['job.queued', 'granted +start']);
    },
  },
  {
    row: '3.3, 7 the GUI image test reports a conflict instead of waiting; tests and API share one reservation',
    async run(t) {
      const h = supervisorHarness();
      const api = await h.submit({ kind: 'image', profileId: 'img' });
      const test = await h.submit({ kind: 'image', profileId: 'img', source: 'test', whenBusy: 'refuse' });
      t.same(h.outcome(test), ['job.queued', 'denied image_busy']);
      await h.release(api);
      const chat = await h.submit();
      const second = await h.submit({ kind: 'image', profileId: 'img', source: 'test', whenBusy: 'refuse' });
      t.same(h.outcome(second), ['job.queued', 'denied image_busy'], 'a running chat holds the GPUs too');
      await h.release(chat);
      const third = await h.submit({ kind: 'image', profileId: 'img', source: 'test', whenBusy: 'refuse' });
      t.same(h.outcome(third), ['job.queued', 'granted +start'], 'an idle loaded chat worker is not busy: it is unloaded for the test');
    },
  },
  {
    row: '3.3 an image job needs both GPUs free: a foreign process on either rejects the start',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a'), gpu('GPU-b', 24 * GIB, 23 * GIB, [{ pid: 9, usedMiB: GIB }])] } });
      const image = await h.submit({ kind: 'image', profileId: 'img' });
      t.same(h.outcome(image), ['job.queued', 'denied resources_busy']);
    },
  },
  {
    row: '3.5 STT runs on the CPU beside an image job',
    async run(t) {
      const h = supervisorHarness();
      const image = await h.submit({ kind: 'image', profileId: 'img' });
      const stt = await h.submit({ kind: 'stt', profileId: 's' });
      t.ok(h.granted(image) && h.granted(stt));
    },
  },
];

/** An image job's enhancer step (4.7): the installed model, before the image (or alone: a preview). */
const step = (image = true, device = 'auto') => ({ task: 't2i' as const, model: '/state/enhancers/t2i/m.gguf', mmproj: null, context: 8192, image, device });
const gpuMode = (h: SupervisorHarness) => (['llm', 'exclusiveImage'] as const).find((mode) => h.actor.getSnapshot().matches({ active: { gpuMode: mode } }));

const enhancerRows: Row[] = [
  {
    row: '4.7 image | enhancer on | every GPU free: chat unloaded once, the enhancer loads first; its answer ends it, then the image worker starts; nothing slips in between',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a'), gpu('GPU-b')] } });
      const chat = await h.submit();
      await h.release(chat);
      t.equal(h.worker('chat').state, 'loaded');
      const image = await h.submit({ kind: 'image', profileId: 'img', enhancer: step() });
      const grant = h.grant(image)!;
      t.same(h.unloads('chat').length, 1, 'chat unloaded before the reservation');
      t.ok(grant.enhancer, 'the grant names the enhancer start');
      t.equal(grant.generation, grant.enhancer!.generation + 1, 'the image start follows it');
      t.same(grant.enhancer!.plan.gpus, ['GPU-a', 'GPU-b'], 'the enhancer may use every GPU');
      t.same(grant.gpus, ['GPU-a', 'GPU-b']);
      t.same([h.worker('enhancer').state, h.worker('image').state], ['loaded', 'unloaded']);
      const waiting = await h.submit({ profileId: 'a' });
      t.same(h.outcome(waiting), ['job.queued'], 'a chat request waits while the enhancer holds the GPUs');
      await h.send({ type: 'enhancer.done', jobId: image });
      t.same(h.unloads('enhancer').map((u) => [u.code, u.reason]), [['enhancer_done', 'the enhancer answered: it ends before the image worker starts']]);
      t.same(h.outcome(image), ['job.queued', 'granted +start', 'granted image step +start'], 'the image step is granted at once: the job holds the GPUs');
      const imageStep = h.emitted.filter((e) => e.type === 'gpu.granted' && e.jobId === image).at(-1);
      t.match(imageStep, { generation: grant.generation, start: grant.start, gpus: ['GPU-a', 'GPU-b'] }, 'on the image start planned with the grant');
      t.same([h.worker('enhancer').state, h.worker('image').state, h.worker('image').generation], ['unloaded', 'loaded', grant.generation]);
      t.same(h.outcome(waiting), ['job.queued'], 'still waiting: the image comes first');
      await h.release(image);
      t.same(h.outcome(waiting), ['job.queued', 'granted +start'], 'the chat reloads after the image');
      t.same(h.unloads('chat').length, 1, 'chat was unloaded once, not twice');
    },
  },
  {
    row: 'CONTRACT 8 image | enhancer on the CPU | a chat answers | the enhancer starts beside it (no GPU, nothing unloaded); chats for the loaded profile go on; once it answered, the image step waits for every GPU in the job\'s place, then chat is unloaded and the image starts',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a'), gpu('GPU-b')] } });
      const chat = await h.submit({ slots: 2 });
      const image = await h.submit({ kind: 'image', profileId: 'img', enhancer: step(true, 'cpu') });
      const grant = h.grant(image)!;
      t.same(h.unloads(), [], 'nothing of ours is unloaded for an enhancer on the CPU');
      t.match(grant, { start: null, gpus: [], enhancer: { plan: { gpus: [], gpuLayers: null, forecast: { gpuMiB: {} } } } }, 'the grant holds no GPU; the enhancer sees none');
      t.match(grant.enhancer!.plan.fit, /CPU only: the profile puts the prompt enhancer on the CPU/);
      t.same([h.worker('chat').state, h.worker('enhancer').state, gpuMode(h)], ['loaded', 'loaded', 'llm'], 'the GPUs stay in the LLM mode');
      const during = await h.submit({ slots: 2 });
      t.same(h.outcome(during), ['granted'], 'a chat for the loaded profile is answered while the enhancer runs');
      const tts = await h.submit({ kind: 'tts', profileId: 't' });
      t.same(h.outcome(tts), ['job.queued', 'granted +start'], 'a TTS start is not held off either');
      await h.release(tts);
      await h.send({ type: 'enhancer.done', jobId: image });
      t.same(h.unloads('enhancer').length, 1, 'the enhancer ends');
      t.same(h.outcome(image), ['job.queued', 'granted'], 'the image step waits for the running chats');
      const running = diagnostics(h.context(), { now: h.clock.now(), times: () => undefined, since: () => null }).queue.running.find((j) => j.job_id === image);
      t.equal(running?.reason, 'its prompt enhancer answered on the CPU: the image step waits for every GPU', 'the queue view says why');
      const after = await h.submit({ slots: 2 });
      t.same(h.outcome(after), ['job.queued'], 'a later chat waits behind the image step: it keeps its job\'s place');
      await h.release(chat);
      t.same(h.outcome(image), ['job.queued', 'granted'], 'one chat still answers');
      t.same(h.outcome(after), ['job.queued'], 'the freed slot is not given to the later chat: the image step is ahead of it');
      await h.release(during);
      t.same(h.unloads('chat').map((u) => u.code), ['image_job'], 'now chat is unloaded for the image');
      t.same(h.outcome(image), ['job.queued', 'granted', 'granted image step +start']);
      const imageStep = h.emitted.filter((e) => e.type === 'gpu.granted' && e.jobId === image).at(-1);
      t.match(imageStep, { worker: 'image', gpus: ['GPU-a', 'GPU-b'], step: 'image' }, 'the image step holds every GPU');
      t.same([h.worker('image').state, gpuMode(h)], ['loaded', 'exclusiveImage']);
      t.same(h.outcome(after), ['job.queued'], 'still behind the image');
      await h.release(image);
      t.same(h.outcome(after), ['job.queued', 'granted +start'], 'the chat reloads after the image');
    },
  },
  {
    row: 'CONTRACT 8 enhancer on the CPU | RAM too small for it | | refused with insufficient_memory; the loaded chat worker is not unloaded for it',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a'), gpu('GPU-b')], enhancer: { model: model(16, 1024), context: 8192 } } });
      const chat = await h.submit();
      await h.release(chat);
      h.world.ramMiB = 8 * GIB;
      const image = await h.submit({ kind: 'image', profileId: 'img', enhancer: step(true, 'cpu') });
      t.same(h.outcome(image), ['job.queued', 'denied insufficient_memory']);
      t.match(h.denial(image)?.message, /prompt enhancer cannot start: the worker is forecast to need \d+ MiB of RAM/);
      t.same([h.unloads(), h.worker('chat').state], [[], 'loaded']);
      h.world.ramMiB = 64 * GIB;
      const auto = await h.submit({ kind: 'image', profileId: 'img', enhancer: step(true, 'auto') });
      t.match(h.grant(auto)?.enhancer?.plan, { gpus: ['GPU-a', 'GPU-b'] }, 'on auto the same model goes to the GPUs');
      t.same(h.unloads('chat').map((u) => u.code), ['image_job'], 'and the job holds every GPU from its grant');
    },
  },
  {
    row: 'CONTRACT 8 enhancer on the CPU | the image step\'s memory check refuses | | the job\'s reservation is taken back with insufficient_memory; the next job runs',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a'), gpu('GPU-b')] } });
      const image = await h.submit({ kind: 'image', profileId: 'img', enhancer: step(true, 'cpu') });
      h.world.imageMiB = 200 * GIB;
      await h.send({ type: 'enhancer.done', jobId: image });
      t.same(h.outcome(image), ['job.queued', 'granted', 'revoked insufficient_memory']);
      t.equal(h.worker('image').state, 'unloaded');
      const next = await h.submit();
      t.same(h.outcome(next), ['job.queued', 'granted +start']);
    },
  },
  {
    row: 'CONTRACT 8 enhancer on the CPU | the client leaves while its image step waits | | the job ends; the chat worker it waited for stays loaded',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a'), gpu('GPU-b')] } });
      const chat = await h.submit();
      const image = await h.submit({ kind: 'image', profileId: 'img', enhancer: step(true, 'cpu') });
      await h.send({ type: 'enhancer.done', jobId: image });
      const after = await h.submit({ profileId: 'a' });
      t.same(h.outcome(after), ['job.queued']);
      await h.send({ type: 'job.cancel', jobId: image });
      t.same(h.outcome(after), ['job.queued'], 'still one slot, held by the first chat');
      await h.release(chat);
      t.same(h.outcome(after), ['job.queued', 'granted']);
      t.same(h.unloads('chat'), [], 'nobody unloaded the chat worker');
      t.equal(h.worker('image').state, 'unloaded');
    },
  },
  {
    row: 'CONTRACT 8 preview with the enhancer on the CPU: no GPU held, no image step, nothing unloaded; a second image test meanwhile is a conflict',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a'), gpu('GPU-b')] } });
      const chat = await h.submit();
      await h.release(chat);
      const preview = await h.submit({ kind: 'image', profileId: 'img', source: 'test', whenBusy: 'refuse', enhancer: step(false, 'cpu') });
      t.same(h.outcome(preview), ['job.queued', 'granted']);
      const test = await h.submit({ kind: 'image', profileId: 'img', source: 'test', whenBusy: 'refuse' });
      t.same(h.outcome(test), ['job.queued', 'denied image_busy']);
      await h.send({ type: 'enhancer.done', jobId: preview });
      await h.release(preview);
      t.same([h.unloads('chat'), h.worker('chat').state, h.worker('image').state], [[], 'loaded', 'unloaded']);
    },
  },
  {
    row: 'CONTRACT 8 enhancer on a GPU UUID: it sees that GPU alone (its layers fitted there, the rest in RAM); the job holds every GPU as on auto; a UUID not present refuses the job',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a'), gpu('GPU-b', 24 * GIB, 6 * GIB)], enhancer: { model: model(16, 1024), context: 8192 } } });
      const image = await h.submit({ kind: 'image', profileId: 'img', enhancer: step(true, 'GPU-b') });
      const plan = h.grant(image)!.enhancer!.plan;
      t.same([plan.gpus, plan.gpuBudget.map((b) => b.uuid), Object.keys(plan.forecast.gpuMiB)], [['GPU-b'], ['GPU-b'], ['GPU-b']]);
      t.ok(plan.gpuLayers! > 0 && plan.gpuLayers! < 17, `part of the model on GPU-b, the rest in RAM (-ngl ${plan.gpuLayers})`);
      t.same(h.grant(image)!.gpus, ['GPU-a', 'GPU-b']);
      await h.release(image);
      const missing = await h.submit({ kind: 'image', profileId: 'img', enhancer: step(true, 'GPU-z') });
      t.same(h.outcome(missing), ['job.queued', 'denied start_check_failed']);
      t.match(h.denial(missing)?.message, 'the prompt enhancer cannot start: its GPU GPU-z is not present');
    },
  },
  {
    row: '4.7 enhancer loading or loaded | its job ended (client left, enhancer failure) | | unloaded: no image start, the next job runs',
    async run(t) {
      const h = supervisorHarness();
      const image = await h.submit({ kind: 'image', profileId: 'img', enhancer: step() });
      t.equal(h.worker('enhancer').state, 'loaded');
      await h.send({ type: 'job.cancel', jobId: image });
      t.same(h.unloads('enhancer').map((u) => [u.code, u.reason]), [['enhancer_done', 'its image job ended: the enhancer is not kept loaded']]);
      t.equal(h.worker('image').state, 'unloaded', 'no image start');
      const next = await h.submit();
      t.same(h.outcome(next), ['job.queued', 'granted +start']);
    },
  },
  {
    row: '4.7 the enhancer process dies: reported, its record cleared; the supervisor revokes nothing (the job answers 502 enhancer_failed itself)',
    async run(t) {
      const h = supervisorHarness();
      const image = await h.submit({ kind: 'image', profileId: 'img', enhancer: step() });
      await h.send({ type: 'worker.exited', kind: 'enhancer', generation: h.gen('enhancer'), cause: 'model_error', message: 'could not load its model' });
      t.same([h.worker('enhancer').state, h.worker('enhancer').last], ['unloaded', 'model_error: could not load its model']);
      t.same(h.outcome(image), ['job.queued', 'granted +start'], 'no revocation: the job names the failure');
      await h.release(image);
      const again = await h.submit({ kind: 'image', profileId: 'img', enhancer: step() });
      t.ok(h.grant(again)?.enhancer, 'the next job gets a fresh enhancer start');
    },
  },
  {
    row: '4.7 preview: the enhancer alone under the image reservation; its answer ends it and no image start is due',
    async run(t) {
      const h = supervisorHarness();
      const preview = await h.submit({ kind: 'image', profileId: 'img', source: 'test', whenBusy: 'refuse', enhancer: step(false) });
      const api = await h.submit({ kind: 'image', profileId: 'img', source: 'test', whenBusy: 'refuse' });
      t.same(h.outcome(api), ['job.queued', 'denied image_busy'], 'an image test meanwhile is a conflict');
      await h.send({ type: 'enhancer.done', jobId: preview });
      t.same([h.worker('enhancer').state, h.worker('image').state], ['unloaded', 'unloaded']);
      await h.release(preview);
      t.same(h.unloads('image'), [], 'no image worker was ever started');
    },
  },
  {
    row: '4.7 memory check: an enhancer model that cannot be read refuses the job with enhancer_failed (502), never an image from the original prompt',
    async run(t) {
      const h = supervisorHarness({ world: { enhancer: { problem: 'its model /x.gguf cannot be read: not a GGUF file' } } });
      const image = await h.submit({ kind: 'image', profileId: 'img', enhancer: step() });
      t.same(h.outcome(image), ['job.queued', 'denied enhancer_failed']);
      t.match(h.denial(image)?.message, /prompt enhancer cannot start: its model \/x.gguf cannot be read/);
    },
  },
  {
    row: '4.7 endpoint stop while the enhancer runs: it is unloaded with the others and its job revoked',
    async run(t) {
      const h = supervisorHarness();
      const image = await h.submit({ kind: 'image', profileId: 'img', enhancer: step() });
      await h.send({ type: 'workers.unloadAll', requestId: 'r1' });
      t.same(h.outcome(image), ['job.queued', 'granted +start', 'revoked endpoint_stopped']);
      t.same(h.unloads('enhancer').length, 1);
      t.equal(h.worker('enhancer').state, 'unloaded');
    },
  },
];

const ttsRows: Row[] = [
  {
    row: '3.4 unloaded | first speech request | the designated GPU has at least 7 GiB free | loaded, and stays ready',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a', 24 * GIB, 8 * GIB)], tts: { device: 'GPU-a', memoryMiB: 7 * GIB } } });
      const first = await h.submit({ kind: 'tts', profileId: 't', device: 'GPU-a' });
      t.same(h.outcome(first), ['job.queued', 'granted +start']);
      t.same(h.grant(first)?.start?.gpus, ['GPU-a']);
      await h.release(first);
      const second = await h.submit({ kind: 'tts', profileId: 't', device: 'GPU-a' });
      t.same(h.outcome(second), ['granted'], 'no second start: the worker stayed ready (nobody waits: granted at once)');
    },
  },
  {
    row: '3.4 unloaded | first speech request | less than 7 GiB free on the designated GPU | stays unloaded: 503 insufficient_memory',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a', 24 * GIB, 7 * GIB - 1)], tts: { device: 'GPU-a', memoryMiB: 7 * GIB } } });
      const id = await h.submit({ kind: 'tts', profileId: 't', device: 'GPU-a' });
      t.same(h.outcome(id), ['job.queued', 'denied insufficient_memory'], 'one MiB short of 7 GiB');
      t.match(h.denial(id)?.message, /GPU-a has 7167 MiB free.*at least 7168 MiB/);
    },
  },
  {
    row: '3.4 a loaded chat profile coexists with a loaded TTS worker while the 7 GiB condition holds',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a', 24 * GIB)], tts: { device: 'GPU-a', memoryMiB: 7 * GIB } } });
      h.world.chat.a = { model: model(20, 400), context: 4096, gpuSplit: null, gpuLayers: null };
      await loadedChat(h);
      const forecast = h.worker('chat').plan!.forecast.gpuMiB['GPU-a']!;
      t.ok(forecast > 8 * GIB && forecast < 16 * GIB, `the chat worker takes ${Math.round(forecast)} MiB of GPU-a`);
      const speech = await h.submit({ kind: 'tts', profileId: 't', device: 'GPU-a' });
      t.same(h.outcome(speech), ['job.queued', 'granted +start'], 'TTS loads beside it');
      t.equal(h.worker('chat').state, 'loaded');
      h.world.chat.big = { model: model(40, 500), context: 4096, gpuSplit: [1], gpuLayers: null };
      const big = await h.submit({ profileId: 'big' });
      const plan = h.grant(big)?.start;
      t.ok(plan, 'a bigger chat profile starts while the speech job runs');
      t.ok((plan?.forecast.gpuMiB['GPU-a'] ?? Infinity) + 7 * GIB <= 24 * GIB - 512, `it leaves the TTS worker its 7 GiB (${Math.round(plan?.forecast.gpuMiB['GPU-a'] ?? 0)} MiB on GPU-a)`);
      t.ok((plan?.gpuLayers ?? 41) < 41, `so only ${plan?.gpuLayers} of 41 layers go to the GPU`);
      t.same(h.unloads('tts'), [], 'the busy TTS worker stays');
      await h.release(speech);
    },
  },
  {
    row: '3.4 loaded | incompatible GPU profile change | unloaded: a chat start that does not fit beside the idle TTS worker unloads it first',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a', 24 * GIB)], tts: { device: 'GPU-a', memoryMiB: 7 * GIB } } });
      const speech = await h.submit({ kind: 'tts', profileId: 't', device: 'GPU-a' });
      await h.release(speech);
      h.world.chat.big = { model: model(40, 500), context: 4096, gpuSplit: [1], gpuLayers: null };
      const chat = await h.submit({ profileId: 'big' });
      t.same(
        h.unloads().map((u) => [u.kind, u.code, /fits once the idle tts worker is unloaded/.test(u.reason)]),
        [['tts', 'make_room', true]],
      );
      t.same(h.outcome(chat), ['job.queued', 'granted +start']);
      t.equal(h.grant(chat)?.start?.gpuLayers, 41, 'all layers on the GPU once the TTS worker is gone');
    },
  },
  {
    row: '3.2 loaded | incompatible GPU profile change | unloaded: a TTS start that does not fit beside the idle chat worker unloads it first',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a', 24 * GIB)], tts: { device: 'GPU-a', memoryMiB: 7 * GIB } } });
      h.world.chat.big = { model: model(40, 500), context: 4096, gpuSplit: [1], gpuLayers: null };
      await h.release(await h.submit({ profileId: 'big' }));
      t.ok((h.worker('chat').plan?.forecast.gpuMiB['GPU-a'] ?? 0) > 17 * GIB, 'the idle chat worker leaves less than 7 GiB on GPU-a');
      const speech = await h.submit({ kind: 'tts', profileId: 't', device: 'GPU-a' });
      t.same(
        h.unloads().map((u) => [u.kind, u.code, /fits once the idle chat worker is unloaded/.test(u.reason)]),
        [['chat', 'make_room', true]],
        'the idle chat worker gives way, as an idle TTS worker does for a chat start',
      );
      t.same(h.outcome(speech), ['job.queued', 'granted +start'], 'then the TTS worker starts');
    },
  },
  {
    row: '3.2 a busy chat worker never gives way to a TTS start: the start is refused while it answers',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a', 24 * GIB)], tts: { device: 'GPU-a', memoryMiB: 7 * GIB } } });
      h.world.chat.big = { model: model(40, 500), context: 4096, gpuSplit: [1], gpuLayers: null };
      const answering = await h.submit({ profileId: 'big' });
      const speech = await h.submit({ kind: 'tts', profileId: 't', device: 'GPU-a' });
      t.same(h.unloads(), [], 'nothing of ours is unloaded under a running answer');
      t.same(h.outcome(speech), ['job.queued', 'denied insufficient_memory']);
      await h.release(answering);
    },
  },
  {
    row: '3.6 a TTS preload unloads nothing of ours: beside a large idle chat worker it is refused, the chat worker stays',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a', 24 * GIB)], tts: { device: 'GPU-a', memoryMiB: 7 * GIB } } });
      h.world.chat.big = { model: model(40, 500), context: 4096, gpuSplit: [1], gpuLayers: null };
      await h.release(await h.submit({ profileId: 'big' }));
      const preload = await h.submit({ kind: 'tts', profileId: 't', device: 'GPU-a', source: 'preload' });
      t.same(h.unloads(), []);
      t.same(h.outcome(preload), ['job.queued', 'denied insufficient_memory']);
      t.equal(h.worker('chat').state, 'loaded');
    },
  },
  {
    row: '3.4 a foreign GPU process on the TTS GPU is never ended, and the TTS worker stays',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a', 24 * GIB)], tts: { device: 'GPU-a', memoryMiB: 7 * GIB } } });
      await h.release(await h.submit({ kind: 'tts', profileId: 't', device: 'GPU-a' }));
      await h.send({ type: 'gpu.inventory', gpus: [gpu('GPU-a', 24 * GIB, 10 * GIB, [{ pid: 5, usedMiB: 7 * GIB }])] });
      t.same(h.unloads(), []);
      t.equal(h.worker('tts').state, 'loaded');
    },
  },
  {
    row: '3.4 one speech job at a time on the one TTS worker',
    async run(t) {
      const h = supervisorHarness();
      const a = await h.submit({ kind: 'tts', profileId: 't' });
      const b = await h.submit({ kind: 'tts', profileId: 't' });
      t.notOk(h.granted(b));
      await h.release(a);
      t.ok(h.granted(b));
    },
  },
];

const sttRows: Row[] = [
  {
    row: '3.5 unloaded | first transcription request | loaded (CPU); one STT job at a time; the worker stays loaded',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a')] } });
      const a = await h.submit({ kind: 'stt', profileId: 's' });
      const b = await h.submit({ kind: 'stt', profileId: 's' });
      t.same(h.outcome(a), ['job.queued', 'granted +start']);
      t.same(h.grant(a)?.start?.gpus, [], 'on the CPU');
      t.same(h.outcome(b), ['job.queued'], 'the second waits in the queue');
      await h.release(a);
      t.same(h.outcome(b), ['job.queued', 'granted'], 'the loaded worker takes the next recording');
      await h.release(b);
      t.equal(h.worker('stt').state, 'loaded');
    },
  },
  {
    row: '3.5 loaded | an error | unloaded',
    async run(t) {
      const h = supervisorHarness();
      await h.release(await h.submit({ kind: 'stt', profileId: 's' }));
      await h.send({ type: 'worker.exited', kind: 'stt', generation: h.gen('stt'), cause: 'unclear', message: 'signal SIGSEGV' });
      t.equal(h.worker('stt').state, 'unloaded');
    },
  },
  {
    row: '3.5 loaded | a new build | unloaded: an idle worker at once, and the next job starts the new build',
    async run(t) {
      const h = supervisorHarness();
      await h.release(await h.submit({ kind: 'stt', profileId: 's' }));
      const old = h.gen('stt');
      await h.send({ type: 'worker.buildChanged', kind: 'stt', generation: old, reason: 'a new build of pocketsphinx' });
      t.match(h.unloads('stt'), [{ generation: old, code: 'new_build', reason: 'a new build of pocketsphinx' }], 'unloaded at once, with the reason');
      await h.send({ type: 'worker.unloaded', kind: 'stt', generation: old });
      const next = await h.submit({ kind: 'stt', profileId: 's' });
      t.same(h.outcome(next), ['job.queued', 'granted +start'], 'the next job starts a new process');
      t.ok(h.gen('stt') > old);
    },
  },
  {
    row: '9 build changes apply after the next unload: a busy worker with a new build finishes its jobs; new jobs wait for the new build',
    async run(t) {
      const h = supervisorHarness();
      const running = await h.submit({ profileId: 'a', slots: 2 });
      const old = h.gen('chat');
      await h.send({ type: 'worker.buildChanged', kind: 'chat', generation: old, reason: 'a new build of llama-server' });
      t.same(h.worker('chat').stale, { code: 'new_build', reason: 'a new build of llama-server' });
      t.same(h.unloads(), [], 'the running answer keeps its worker');
      const later = await h.submit({ profileId: 'a', slots: 2 });
      t.notOk(h.granted(later), 'a free slot of the old build is not given out');
      await h.release(running);
      t.match(h.unloads('chat'), [{ generation: old, code: 'new_build', reason: 'a new build of llama-server' }], 'unloaded once idle');
      await h.send({ type: 'worker.unloaded', kind: 'chat', generation: old });
      t.same(h.outcome(later), ['job.queued', 'granted +start'], 'the waiting job starts the new build');
    },
  },
  {
    row: '9 a new build reported for an earlier start changes nothing',
    async run(t) {
      const h = supervisorHarness();
      await h.release(await h.submit({ kind: 'stt', profileId: 's' }));
      await h.send({ type: 'worker.buildChanged', kind: 'stt', generation: h.gen('stt') - 1, reason: 'late' });
      t.same(h.unloads(), []);
      t.equal(h.worker('stt').stale, null);
    },
  },
];

const stopRows: Row[] = [
  {
    row: '3.1, 3.4, 3.5, 7 endpoint stop: waiting requests are discarded; then every worker is unloaded (chat, TTS, STT)',
    async run(t) {
      const h = supervisorHarness();
      const chat = await h.submit();
      await h.release(chat);
      await h.release(await h.submit({ kind: 'tts', profileId: 't' }));
      const stt = await h.submit({ kind: 'stt', profileId: 's' });
      const waiting = await h.submit({ kind: 'stt', profileId: 's' });
      await h.send({ type: 'endpoint.discard', requestId: 'd' });
      t.same(h.outcome(waiting), ['job.queued', 'denied endpoint_stopped']);
      const refused = await h.submit();
      t.same(h.outcome(refused), ['denied endpoint_stopped'], 'no new requests accepted');
      await h.send({ type: 'workers.unloadAll', requestId: 'u' });
      t.same(h.outcome(stt), ['job.queued', 'granted +start', 'revoked endpoint_stopped'], 'a job still running at the unload ends');
      t.same(h.unloads().map((u) => `${u.kind} ${u.code}`).sort(), ['chat endpoint_stop', 'stt endpoint_stop', 'tts endpoint_stop']);
      t.ok(h.emitted.some((e) => e.type === 'supervisor.reply' && e.requestId === 'u'));
      t.equal(h.context().accepting, true, 'after the stop the operator may test again');
    },
  },
  {
    row: '3.1 the unload reply waits until every worker is gone',
    async run(t) {
      const h = supervisorHarness({ autoWorkers: false });
      const id = await h.submit();
      await h.send({ type: 'worker.loaded', kind: 'chat', generation: h.gen('chat') });
      await h.release(id);
      await h.send({ type: 'workers.unloadAll', requestId: 'u' });
      const replied = () => h.emitted.some((e) => e.type === 'supervisor.reply' && e.requestId === 'u');
      t.notOk(replied());
      await h.send({ type: 'worker.unloaded', kind: 'chat', generation: h.gen('chat') });
      t.ok(replied());
    },
  },
];

/** The ids of the queue's wait timers (expiryTimer actors) that were ever created. */
function timersSeen(events: InspectionEvent[]): string[] {
  const ids = events.flatMap((e) => (e.type === '@xstate.actor' ? [(e.actorRef as unknown as { id: string }).id] : []));
  return ids.filter((id) => id.startsWith('expiry-'));
}

const queueRows: Row[] = [
  {
    row: '3.7 FIFO queue | nobody waits, the worker is loaded with the profile and has a slot free (3.2 slot count) | runs at once: granted without entering the queue, no wait timer',
    async run(t) {
      const seen: InspectionEvent[] = [];
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a'), gpu('GPU-b')] }, inspect: (e) => seen.push(e) });
      const first = await h.submit({ slots: 2 });
      t.same(h.outcome(first), ['job.queued', 'granted +start'], 'a worker start goes through the queue: its memory check takes time');
      t.equal(timersSeen(seen).length, 1, 'the job that waited for its start had a wait timer');
      const second = await h.submit({ slots: 2 });
      t.same(h.outcome(second), ['granted'], 'nobody waits, a slot is free: granted at once, never queued');
      t.same(h.grant(second), { type: 'gpu.granted', jobId: second, worker: 'chat', generation: h.gen('chat'), start: null, gpus: h.worker('chat').plan!.gpus }, 'on the loaded start, with its GPUs');
      t.ok(h.grant(second)!.gpus.length > 0, 'the worker holds a GPU: the grant names it');
      t.equal(timersSeen(seen).length, 1, 'no wait timer for the job granted at once');
      t.same(h.queueJobs(), [], 'the queue never held it');
      t.match(h.context().jobs[second], { phase: 'running', worker: 'chat' });
      const third = await h.submit({ slots: 2 });
      t.same(h.outcome(third), ['job.queued'], 'both slots taken: the third waits in the queue');
      t.equal(timersSeen(seen).length, 2, 'with its wait timer');
      await h.release(second);
      t.same(h.outcome(third), ['job.queued', 'granted'], 'the freed slot goes to the waiting job');
      await h.release(first);
      await h.release(third);
      const again = await h.submit({ slots: 2 });
      t.same(h.outcome(again), ['granted'], 'once nobody waits, the next runs at once again');
      await h.send({ type: 'job.cancel', jobId: again });
      t.same(h.context().jobs, {}, 'a client that leaves frees the reservation it got at once');
      t.same(h.queueJobs(), []);
    },
  },
  {
    row: '3.7 FIFO queue | the job ended and nobody waits for its reservation (3.2 chat worker loaded, nothing to unload) | its slot is free at once: no plan() is made; with someone waiting, or a worker due for an unload, plan() decides as before',
    async run(t) {
      const seen: InspectionEvent[] = [];
      const h = supervisorHarness({ inspect: (e) => seen.push(e) });
      // Releases that made a plan: the transitions taken on gpu.release, by the guard they passed.
      const plansMade = () =>
        seen.filter((e) => e.type === '@xstate.microstep' && e.event.type === 'gpu.release' && e._transitions.some((tr) => tr.guard === undefined && tr.eventType === 'gpu.release')).length;
      const first = await h.submit({ slots: 2 });
      const second = await h.submit({ slots: 2 });
      t.same(h.outcome(second), ['granted']);
      let before = plansMade();
      await h.release(first);
      t.equal(plansMade(), before, 'nobody waits: the release makes no plan');
      t.match(h.worker('chat'), { state: 'loaded', profileId: 'a' }, 'the worker stays loaded');
      t.same(Object.keys(h.context().jobs), [second], 'the released job is gone, the other runs on');
      const again = await h.submit({ slots: 2 });
      t.same(h.outcome(again), ['granted'], 'the freed slot is taken at once');
      const waiter = await h.submit({ slots: 2 });
      t.same(h.outcome(waiter), ['job.queued'], 'both slots taken: it waits');
      before = plansMade();
      await h.release(second);
      t.ok(plansMade() > before, 'someone waits: plan() decides');
      t.same(h.outcome(waiter), ['job.queued', 'granted'], 'FIFO: the freed slot goes to the waiting job');
      await h.send({ type: 'profile.changed', profileId: 'a', revision: 2, published: true });
      before = plansMade();
      await h.release(again);
      t.same(h.outcome(waiter), ['job.queued', 'granted']);
      t.equal(h.worker('chat').state, 'loaded', 'a stale worker with a job still running stays');
      await h.release(waiter);
      t.ok(plansMade() > before, 'the stale worker falls idle: plan() decides');
      t.equal(h.unloads('chat').length, 1, 'and unloads it');
      t.same(h.context().jobs, {});
    },
  },
  {
    row: '3.7 FIFO: a job never goes at once past one that waits, even with a slot free for it; it queues and plan() decides',
    async run(t) {
      const h = supervisorHarness();
      await h.release(await h.submit({ profileId: 'a', slots: 4 }));
      const stt = await h.submit({ kind: 'stt', profileId: 's' });
      const sttNext = await h.submit({ kind: 'stt', profileId: 's' });
      t.same(h.outcome(sttNext), ['job.queued'], 'one STT job at a time: the second waits');
      const chat = await h.submit({ profileId: 'a', slots: 4 });
      t.same(h.outcome(chat), ['job.queued', 'granted'], 'someone waits: the chat goes through the queue (and runs, as it needs nothing the STT job waits for)');
      const running = await h.submit({ profileId: 'a', slots: 4 });
      const sw = await h.submit({ profileId: 'b' });
      const later = await h.submit({ profileId: 'a', slots: 4 });
      t.same(h.outcome(running), ['job.queued', 'granted']);
      t.same(h.outcome(sw), ['job.queued'], 'the switch to b waits for the running chats of a');
      t.same(h.outcome(later), ['job.queued', 'granted'], 'swap-aware: a free slot of a is taken past the waiting switch to b, through the queue');
      await h.release(stt);
      t.ok(h.granted(sttNext));
    },
  },
  {
    row: '3.7 the grant at once is refused like any job: endpoint stopped, a stale snapshot, an unloading or stale worker, a slot in use',
    async run(t) {
      const h = supervisorHarness({ autoWorkers: false });
      const first = await h.submit({ slots: 1 });
      await h.send({ type: 'worker.loaded', kind: 'chat', generation: h.gen('chat') });
      const full = await h.submit({ slots: 1 });
      t.same(h.outcome(full), ['job.queued'], 'the one slot is in use');
      await h.send({ type: 'job.cancel', jobId: full });
      await h.release(first);
      await h.send({ type: 'profile.changed', profileId: 'a', revision: 2, published: true });
      const old = await h.submit({ revision: 1 });
      t.same(h.outcome(old), ['denied profile_changed'], 'a snapshot older than a save that reached us is refused, as before');
      t.equal(h.worker('chat').state, 'unloading', 'the stale worker goes');
      const fresh = await h.submit({ revision: 2 });
      t.same(h.outcome(fresh), ['job.queued'], 'no grant on an unloading worker: it waits for the new start');
      await h.send({ type: 'endpoint.discard', requestId: 'd1' });
      const late = await h.submit({ revision: 2 });
      t.same(h.outcome(late), ['denied endpoint_stopped']);
    },
  },
  {
    row: '3.7 at most 16 waiting: the 17th is refused with queue_full and a Retry-After hint',
    async run(t) {
      const h = supervisorHarness();
      const running = await h.submit();
      const waiting = [];
      for (let i = 0; i < 16; i++) waiting.push(await h.submit({ kind: 'chat', profileId: 'a' }));
      const seventeenth = await h.submit();
      t.same(h.waiting(), waiting);
      t.match(h.denial(seventeenth), { code: 'queue_full', retryAfterSeconds: 10 });
      await h.release(running);
      t.ok(h.granted(waiting[0]!), 'FIFO: the first waiting job runs next');
    },
  },
  {
    row: '3.7 at most 600 s waiting: a job expires with queue_timeout on the machine clock, never waited for',
    async run(t) {
      const h = supervisorHarness();
      const running = await h.submit();
      const waiting = await h.submit();
      h.clock.increment(599_999);
      await h.settle();
      t.same(h.outcome(waiting), ['job.queued']);
      h.clock.increment(1);
      await h.settle();
      t.same(h.outcome(waiting), ['job.queued', 'denied queue_timeout']);
      await h.release(running);
      t.same(h.outcome(waiting), ['job.queued', 'denied queue_timeout'], 'an expired job is never granted afterwards');
    },
  },
  {
    row: '3.7 waiting requests of a changed or deactivated profile are rejected; running requests keep their adopted profile',
    async run(t) {
      const h = supervisorHarness();
      const running = await h.submit({ profileId: 'a' });
      const stale = await h.submit({ profileId: 'a' });
      const other = await h.submit({ profileId: 'b' });
      await h.send({ type: 'profile.changed', profileId: 'a', revision: 2, published: true });
      t.same(h.outcome(stale), ['job.queued', 'denied profile_changed']);
      t.match(h.denial(stale)?.message, /send it again/);
      t.same(h.outcome(running), ['job.queued', 'granted +start'], 'the running job is not touched');
      t.same(h.outcome(other), ['job.queued']);
    },
  },
  {
    row: '3.7 a client that disconnects leaves the queue at once',
    async run(t) {
      const h = supervisorHarness();
      const running = await h.submit();
      const gone = await h.submit();
      const next = await h.submit();
      await h.send({ type: 'job.cancel', jobId: gone });
      t.same(h.waiting(), [next]);
      t.same(h.queueJobs(), [next]);
      await h.release(running);
      t.ok(h.granted(next));
      t.same(h.outcome(gone), ['job.queued'], 'a job that left hears nothing more');
    },
  },
  {
    row: '8 memory check: one start check at a time; a job that leaves during its check is not started',
    async run(t) {
      const h = supervisorHarness();
      h.holdChecks();
      const chat = await h.submit();
      const stt = await h.submit({ kind: 'stt', profileId: 's' });
      t.equal(h.pendingChecks.length, 1, 'the STT start waits for the chat check');
      await h.send({ type: 'job.cancel', jobId: chat });
      t.equal(h.pendingChecks.length, 2, 'the check of the job that left was dropped; the next one runs');
      await h.releaseChecks();
      t.same(h.outcome(chat), ['job.queued']);
      t.equal(h.worker('chat').state, 'unloaded');
      t.same(h.outcome(stt), ['job.queued', 'granted +start']);
    },
  },
  {
    row: '8 a check whose facts cannot be gathered refuses the job with start_check_failed and names why',
    async run(t) {
      const h = supervisorHarness();
      h.world.failNext = 'not a GGUF file: /models/x.gguf';
      const id = await h.submit();
      t.same(h.outcome(id), ['job.queued', 'denied start_check_failed']);
      t.match(h.denial(id)?.message, /not a GGUF file/);
      const next = await h.submit();
      t.ok(h.granted(next), 'the next job is checked afresh');
    },
  },
];

const audioRows: Row[] = [
  {
    row: '3.6 auto (default) | load at the first job and keep loaded',
    async run(t) {
      const h = supervisorHarness();
      t.same(h.context().audio, { tts: 'auto', stt: 'auto' }, 'auto is the default for both kinds');
      for (const kind of ['tts', 'stt'] as const) {
        const id = await h.submit({ kind, profileId: kind });
        t.same(h.outcome(id), ['job.queued', 'granted +start'], `${kind}: loaded at the first job`);
        await h.release(id);
        h.clock.increment(3_600_000);
        t.equal(h.worker(kind).state, 'loaded', `${kind}: kept loaded`);
        const next = await h.submit({ kind, profileId: kind });
        t.same(h.outcome(next), ['granted'], `${kind}: the next job needs no start (granted at once)`);
      }
      t.same(h.unloads(), []);
    },
  },
  {
    row: '3.6 per_request | unload after each request; the next request loads again',
    async run(t) {
      const h = supervisorHarness();
      await h.send({ type: 'audio.mode', kind: 'stt', mode: 'per_request' });
      const first = await h.submit({ kind: 'stt', profileId: 's' });
      const second = await h.submit({ kind: 'stt', profileId: 's' });
      t.same(h.outcome(second), ['job.queued'], 'one STT job at a time');
      await h.release(first);
      t.same(h.unloads('stt').map((u) => [u.code, u.reason]), [['per_request', 'audio memory policy per_request: unloaded after its request']]);
      t.same(h.outcome(second), ['job.queued', 'granted +start'], 'the waiting request does not reuse the worker: it loads again');
      await h.release(second);
      t.equal(h.worker('stt').state, 'unloaded');
      t.equal(h.unloads('stt').length, 2);
    },
  },
  {
    row: '3.6 per_request is per kind: TTS per_request leaves STT (auto) loaded',
    async run(t) {
      const h = supervisorHarness();
      await h.send({ type: 'audio.mode', kind: 'tts', mode: 'per_request' });
      await h.release(await h.submit({ kind: 'tts', profileId: 't' }));
      await h.release(await h.submit({ kind: 'stt', profileId: 's' }));
      t.equal(h.worker('tts').state, 'unloaded');
      t.equal(h.worker('stt').state, 'loaded');
    },
  },
  {
    row: '3.6 switching to per_request unloads an idle loaded worker; a busy one goes after its request',
    async run(t) {
      const h = supervisorHarness();
      await h.release(await h.submit({ kind: 'tts', profileId: 't' }));
      const busy = await h.submit({ kind: 'stt', profileId: 's' });
      await h.send({ type: 'audio.mode', kind: 'tts', mode: 'per_request' });
      await h.send({ type: 'audio.mode', kind: 'stt', mode: 'per_request' });
      t.same(h.unloads().map((u) => u.kind), ['tts']);
      await h.release(busy);
      t.same(h.unloads().map((u) => u.kind), ['tts', 'stt']);
    },
  },
  {
    row: '3.6 warm | STT loads on the CPU: the preload job starts the worker without a GPU and it stays loaded',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a')] } });
      await h.send({ type: 'audio.mode', kind: 'stt', mode: 'warm' });
      const preload = await h.submit({ kind: 'stt', profileId: 's', source: 'preload' });
      t.same(h.outcome(preload), ['job.queued', 'granted +start']);
      t.same(h.grant(preload)?.start?.gpus, [], 'on the CPU');
      await h.release(preload);
      t.equal(h.worker('stt').state, 'loaded', 'the preload is over, the worker stays');
      const request = await h.submit({ kind: 'stt', profileId: 's' });
      t.same(h.outcome(request), ['granted'], 'the first request finds it loaded (granted at once)');
    },
  },
  {
    row: '3.6 warm | a preload waits behind requests for its worker and holds up none',
    async run(t) {
      const h = supervisorHarness();
      const running = await h.submit({ kind: 'stt', profileId: 'old' });
      const preload = await h.submit({ kind: 'stt', profileId: 'warm', source: 'preload' });
      const later = await h.submit({ kind: 'stt', profileId: 'old' });
      await h.release(running);
      t.same(h.outcome(later), ['job.queued', 'granted'], 'the later request goes first, on the loaded worker');
      t.same(h.outcome(preload), ['job.queued']);
      t.same(h.unloads(), [], 'the preload unloads nothing a request still wants');
      await h.release(later);
      t.same(h.unloads('stt').map((u) => [u.code, u.reason]), [['profile_switch', 'switch to profile warm (revision 1)']]);
      t.same(h.outcome(preload), ['job.queued', 'granted +start'], 'then the selection loads');
    },
  },
  {
    row: '3.6 warm | TTS preloads only in the LLM GPU mode: it waits while an image job waits or runs, then loads',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a')], tts: { device: 'GPU-a', memoryMiB: 7 * GIB } } });
      const image = await h.submit({ kind: 'image', profileId: 'img' });
      t.ok(h.granted(image));
      const preload = await h.submit({ kind: 'tts', profileId: 't', source: 'preload', device: 'GPU-a' });
      const second = await h.submit({ kind: 'image', profileId: 'img' });
      await h.release(image);
      t.same(h.outcome(preload), ['job.queued'], 'the image mode goes on');
      t.same(h.outcome(second), ['job.queued', 'granted +start'], 'the waiting image job is not held up by the preload');
      await h.release(second);
      t.same(h.outcome(preload), ['job.queued', 'granted +start'], 'back in the LLM GPU mode, the TTS worker preloads');
    },
  },
  {
    row: '3.6 warm | not enough free memory on its GPU | the preload is refused; the loaded chat worker and foreign processes are not touched',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a', 24 * GIB, 24 * GIB, [])], tts: { device: 'GPU-a', memoryMiB: 7 * GIB } } });
      h.world.chat.big = { model: model(40, 500), context: 4096, gpuSplit: [1], gpuLayers: null };
      await loadedChat(h, { profileId: 'big' });
      h.world.gpus = [gpu('GPU-a', 24 * GIB, 24 * GIB - h.worker('chat').plan!.forecast.gpuMiB['GPU-a']! - 2 * GIB, [{ pid: 99, usedMiB: 2 * GIB }])];
      const preload = await h.submit({ kind: 'tts', profileId: 't', source: 'preload', device: 'GPU-a' });
      t.match(h.outcome(preload), ['job.queued', /^denied (insufficient_memory|resources_busy)$/]);
      t.same(h.unloads(), [], 'nothing of ours is unloaded for a preload');
      t.equal(h.worker('chat').state, 'loaded');
    },
  },
  {
    row: '3.6 warm | a TTS preload still loading gives way to a chat start that needs its GPU memory: revoked, unloaded, the chat starts',
    async run(t) {
      const h = supervisorHarness({ autoWorkers: false, world: { gpus: [gpu('GPU-a', 24 * GIB)], tts: { device: 'GPU-a', memoryMiB: 7 * GIB } } });
      const preload = await h.submit({ kind: 'tts', profileId: 't', source: 'preload', device: 'GPU-a' });
      t.same(h.outcome(preload), ['job.queued', 'granted +start']);
      h.world.chat.big = { model: model(40, 500), context: 4096, gpuSplit: [1], gpuLayers: null };
      const chat = await h.submit({ profileId: 'big' });
      t.same(h.outcome(preload), ['job.queued', 'granted +start', 'revoked resources_busy'], 'the preload gives way');
      t.same(h.unloads().map((u) => u.kind), ['tts']);
      await h.send({ type: 'worker.unloaded', kind: 'tts', generation: h.gen('tts') });
      await h.settle();
      t.same(h.outcome(chat), ['job.queued', 'granted +start'], 'the chat starts with the memory');
    },
  },
  {
    row: '3.6 warm | an image job does not wait out a TTS preload: the preload is revoked and the worker unloaded',
    async run(t) {
      const h = supervisorHarness({ autoWorkers: false, world: { gpus: [gpu('GPU-a')], tts: { device: 'GPU-a', memoryMiB: 7 * GIB } } });
      const preload = await h.submit({ kind: 'tts', profileId: 't', source: 'preload', device: 'GPU-a' });
      const image = await h.submit({ kind: 'image', profileId: 'img' });
      t.same(h.outcome(preload).at(-1), 'revoked resources_busy');
      await h.send({ type: 'worker.unloaded', kind: 'tts', generation: h.gen('tts') });
      t.same(h.outcome(image), ['job.queued', 'granted +start']);
    },
  },
  {
    row: '3.6 warm | a waiting chat request goes before a waiting TTS preload (they compete for GPU memory)',
    async run(t) {
      const h = supervisorHarness({ world: { gpus: [gpu('GPU-a')], tts: { device: 'GPU-a', memoryMiB: 7 * GIB } } });
      h.holdChecks();
      const first = await h.submit({ profileId: 'a' });
      const preload = await h.submit({ kind: 'tts', profileId: 't', source: 'preload', device: 'GPU-a' });
      const second = await h.submit({ profileId: 'b' });
      await h.releaseChecks();
      t.same(h.outcome(first), ['job.queued', 'granted +start']);
      t.same(h.outcome(preload), ['job.queued'], 'the preload waits while a chat request waits');
      t.same(h.outcome(second), ['job.queued']);
      await h.release(first);
      await h.releaseChecks();
      t.same(h.outcome(second), ['job.queued', 'granted +start']);
      await h.releaseChecks();
      t.same(h.outcome(preload), ['job.queued', 'granted +start'], 'then the preload');
      h.holdChecks(false);
    },
  },
  {
    row: '3.6 warm | a request joins the start a preload began, and the preload is no request: one speech job still runs at a time',
    async run(t) {
      const h = supervisorHarness({ autoWorkers: false });
      const preload = await h.submit({ kind: 'stt', profileId: 's', source: 'preload' });
      const request = await h.submit({ kind: 'stt', profileId: 's' });
      const another = await h.submit({ kind: 'stt', profileId: 's' });
      t.same(h.outcome(preload), ['job.queued', 'granted +start']);
      t.same(h.outcome(request), ['granted'], 'joins the loading start at once: the preload is no request, nobody waits');
      t.same(h.outcome(another), ['job.queued'], 'one request at a time');
    },
  },
  {
    row: '3.6 warm | a preload needs no publication: unpublishing the profile does not reject a waiting preload',
    async run(t) {
      const h = supervisorHarness();
      const running = await h.submit({ kind: 'tts', profileId: 'x' });
      const preload = await h.submit({ kind: 'tts', profileId: 't', source: 'preload' });
      await h.send({ type: 'profile.changed', profileId: 't', revision: 1, published: false });
      t.same(h.outcome(preload), ['job.queued']);
      await h.release(running);
      t.same(h.outcome(preload), ['job.queued', 'granted +start']);
    },
  },
];

t.test('3.7 runsAtOnce: only while no job other than a running one exists (one sent to the queue and not yet reported counts as waiting)', async (t) => {
  const h = supervisorHarness();
  await h.release(await h.submit({ slots: 3 }));
  const view = h.context();
  const job = h.spec({ slots: 3 });
  t.ok(runsAtOnce(view, job), 'loaded with its profile, a slot free, nobody waits');
  for (const phase of ['submitted', 'waiting', 'checking'] as const) {
    const other = { spec: h.spec({ kind: 'stt', profileId: 's' }), phase, worker: null, gpus: [] };
    t.notOk(runsAtOnce({ ...view, jobs: { other } }, job), `a ${phase} job of another kind holds it back`);
  }
  t.notOk(runsAtOnce({ ...view, checking: 'x' }, job), 'a memory check in progress holds it back');
  t.notOk(runsAtOnce(view, h.spec({ profileId: 'b' })), 'another profile needs a switch');
  t.notOk(runsAtOnce(view, h.spec({ revision: 2 })), 'another revision needs a restart');
  t.notOk(runsAtOnce(view, h.spec({ kind: 'stt', profileId: 's' })), 'an unloaded worker needs a start');
  h.actor.stop();
});

for (const [name, rows] of [
  ['spec 3.2 chat worker', chatRows],
  ['worker reports, revisions and the end of the service', reportRows],
  ['spec 3.3 image worker', imageRows],
  ['spec 4.7 prompt enhancer under the supervisor', enhancerRows],
  ['spec 3.4 TTS worker', ttsRows],
  ['spec 3.5 STT worker', sttRows],
  ['spec 3.6 audio memory policy under the supervisor', audioRows],
  ['spec 3.1/7 endpoint stop', stopRows],
  ['spec 3.7/8 queue and memory check under the supervisor', queueRows],
] as const) {
  t.test(name, async (t) => {
    for (const row of rows) await t.test(row.row, row.run);
  });
}
