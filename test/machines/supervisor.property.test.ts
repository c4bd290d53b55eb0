// Thousands of random arrival sequences through the real supervisor and queue machines: chats of
// several profiles, images (API and GUI test; half of them with the prompt enhancer first, some of
// the tests a preview that makes no image), TTS, STT, client cancels, releases, profile edits and
// unpublications, foreign GPU processes, worker deaths, endpoint stops, warm preloads and audio
// policy changes, and the clock running on.
// Checked from the outside, on the emitted events alone:
// - every job ends exactly once: granted or denied, never both, never twice; a revocation only
//   follows a grant; after the sequence, with the load gone, nothing is left waiting;
// - FIFO without overtaking: a job is never granted while an earlier job that needs the same
//   resource still waits (so no profile switch starves behind later chats); two exceptions by
//   design: a warm preload (spec 3.6) is granted only while no request waits for its worker, so it
//   never holds anyone up; and under the swap-aware order (half the runs; the others are strict)
//   a chat for the loaded profile may overtake a waiting chat for another profile, on the loaded
//   worker, only while that switch has waited less than its bound (spec 3.2: "not indefinitely"):
//   the setting, or the load measured for the switch's own profile if longer, and never 120 s or
//   more (CONTRACT 9), so no switch waits for its grant longer than 120 s plus the running answers;
//   in half of these runs the workers report a measured load per profile, some far above 120 s.
//   Such an overtake needs the loaded profile's answers, at their p95 as the runs measure them
//   (grant to release, the last 20 of its revision; none measured: the 600 s stream limit), to end
//   30 s before the switch's 600 s limit even when begun at the end of the setting's bound, and
//   begun now. Chats of one profile never overtake each other;
// - the 600 s wait is absolute (spec 3.7), for a switch as for any job: after every step, no job
//   still waits 600 s after it was queued (the simulated clock fires a timer in the step that
//   reaches it: no grain beyond that step);
// - a switch expires only because of answers that ran beyond their measured p95: when an overtaken
//   switch reaches queue_timeout, every chat that overtook it and still runs, or ended less than
//   SWITCH_DEADLINE_MARGIN_MS before (what the switch needs for its own unload and memory check),
//   ran longer than the p95 that admitted it (one that kept to its p95 ended at least that long
//   before the 600 s). An overtaken switch may also expire for what it found ahead of it (an
//   answer already running when it was queued that runs long), as it would under strict order.
//   In half the runs everything streams for 600 s before the load goes away: overtakers run far
//   past their p95, and the switches they overtook expire on time; counters show such expiries;
// - reservations never overlap where the spec forbids it: an image holds the GPUs alone, one chat
//   profile at a time up to its slots, one TTS and one STT job at a time;
// - a queue_timeout comes only after 600 s of waiting, a profile_changed only after an edit;
// - a waiting request of a profile that changed (a new revision, or unpublished for an API
//   request) is rejected with profile_changed by that change, and never granted afterwards;
// - an image job is granted only while no chat worker is loaded (the image job's chat unload,
//   spec 3.3): checked on the supervisor's workers and, with late reports, on the simulated
//   processes, not on the reservations;
// - never two processes of one worker kind: in half the runs the simulated workers report late,
//   in random order across kinds, sometimes twice, and crash at random; a start is granted only
//   once the previous process of that kind is confirmed gone;
// - the prompt enhancer (4.7) lives only inside its image job: no chat or TTS start while one on
//   the GPUs lives, its image process starts only once it is gone (as the job waits for that), and
//   none is left loaded at the end;
// - an enhancer on the CPU (CONTRACT 8) holds no GPU: its job's first grant needs only the image
//   reservation, and its image step, once the enhancer answered, is granted in the job's place:
//   never while an earlier job that needs the GPUs waits, and no later job that needs them is
//   granted while it waits; the GPU invariants above hold at the image step's grant.
import t from 'tap';
import {
  ANSWER_WINDOW,
  SWITCH_DEADLINE_MARGIN_MS,
  SWITCH_MAX_WAIT_CAP_MS,
  UNMEASURED_ANSWER_MS,
  waitingOrder,
  type JobSpec,
  type SupervisorEmitted,
  type SupervisorEvent,
  type WorkerKind,
} from '../../machines/supervisor/index.js';
import { GIB, gpu, model, supervisorHarness } from '../helpers/supervisor.js';

const SEQUENCES = Number(process.env.SUPERVISOR_SEQUENCES ?? 2000);
const STEPS = 40;
const SLOTS: Record<string, number> = { a: 2, b: 1, c: 3 };
/** The swap-aware order's bound: a switch may be overtaken for this long after it was queued. */
const BOUND_MS = 30_000;
const NEEDS: Record<JobSpec['kind'], string[]> = { chat: ['llm'], image: ['llm', 'tts', 'image'], tts: ['tts'], stt: ['stt'] };
/** What a job claims at its (first) grant: an enhancer on the CPU only the image reservation. */
const needs = (job: Tracked): string[] => (job.cpuEnhancer ? ['image'] : NEEDS[job.spec.kind]);
const overlap = (a: string[], b: string[]) => a.some((n) => b.includes(n));

interface Tracked {
  spec: JobSpec;
  /** An image job whose enhancer runs on the CPU: its first grant holds no GPU. */
  cpuEnhancer: boolean;
  /** Its enhancer answered and its image step waits for every GPU. */
  stepDue: boolean;
  submittedAt: number;
  /** Submission order. */
  seq: number;
  pending: boolean;
  granted: number;
  denied: number;
  revoked: number;
  cancelledWhileWaiting: boolean;
  /** The code of its denial, once denied. */
  deniedCode?: string;
  /** Waited while its profile changed: it must be rejected with profile_changed, never granted. */
  staleSince?: string;
  /** Its staleness was reported as a failure already. */
  staleReported?: boolean;
  /** The chats for the loaded profile granted past it while it waited (swap-aware order), and the p95 that let each. */
  overtakenBy: Array<{ id: string; p95: number }>;
  /** When it was granted (its first grant), and when it stopped holding its reservation (released or revoked). */
  grantedAt?: number;
  endedAt?: number;
}

/** The p95 (nearest rank) of a profile's measured answers: of 20, the second longest; none: the stream limit. */
function p95(ms: number[]): number {
  const sorted = [...ms].sort((a, b) => a - b);
  return sorted.length === 0 ? UNMEASURED_ANSWER_MS : sorted[Math.ceil(sorted.length * 0.95) - 1]!;
}

function lcg(seed: number) {
  let state = seed;
  return () => ((state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
}

t.test(`${SEQUENCES} random sequences of ${STEPS} steps keep every scheduling invariant`, async (t) => {
  const failures: string[] = [];
  let grants = 0;
  let denials = 0;
  /** Image grants, and chat workers unloaded for an image job: the image invariant is not vacuous. */
  let imageGrants = 0;
  /** Image steps granted after an enhancer on the CPU, and chats granted while one ran. */
  let imageSteps = 0;
  let chatsBesideCpuEnhancer = 0;
  /** Switches overtaken within their bound (swap-aware runs), and past the setting thanks to a measured load. */
  let overtakes = 0;
  let longOvertakes = 0;
  /** Switches whose own load is above the cap, held 120 s while a later chat for the loaded profile waited: the cap decides. */
  const cappedSwitches = new Set<string>();
  let chatUnloadsForImages = 0;
  /** Jobs that reached queue_timeout, the overtaken switches among them, and those an overtaker that ran past its p95 may have cost the grant. */
  let expiries = 0;
  let overtakenExpiries = 0;
  let expiriesPastP95 = 0;
  /** Waiting requests a profile change made stale: the profile_changed invariant is not vacuous. */
  let staleWaiting = 0;
  for (let run = 0; run < SEQUENCES && failures.length < 5; run++) {
    const random = lcg(run * 7919 + 1);
    const pick = <T>(items: T[]): T | undefined => items[Math.floor(random() * items.length)];
    const lateWorkers = run % 2 === 1;
    const swapAware = Math.floor(run / 2) % 2 === 0;
    // What a chat start of each profile takes to load, as its engine measures it: none reported,
    // or up to 600 s (a bound from it alone would pass the cap, up to the queue's 600 s wait).
    const loads: Record<string, number> = Math.floor(run / 4) % 2 === 1 ? { a: Math.floor(random() * 600_000), b: Math.floor(random() * 600_000), c: Math.floor(random() * 600_000) } : {};
    /** The longest a switch to the profile may be overtaken: the setting, or its own load if longer, capped. */
    const boundOf = (profileId: string) => Math.min(SWITCH_MAX_WAIT_CAP_MS, Math.max(BOUND_MS, loads[profileId] ?? 0));
    const loadOf = (kind: WorkerKind, profileId: string | null) => (kind === 'chat' && profileId !== null ? loads[profileId] : undefined);
    const h = supervisorHarness({
      maxWaiting: 6,
      scheduling: { order: swapAware ? 'swap-aware' : 'strict', switchMaxWaitMs: BOUND_MS },
      autoWorkers: !lateWorkers,
      loadMs: loadOf,
      world: { gpus: [gpu('GPU-a'), gpu('GPU-b')], tts: { device: 'GPU-a', memoryMiB: 7 * GIB } },
    });
    // Simulated worker processes: alive until the supervisor has heard that they are gone.
    const alive: Record<WorkerKind, Set<number>> = { chat: new Set(), image: new Set(), tts: new Set(), stt: new Set(), enhancer: new Set() };
    const current: Partial<Record<WorkerKind, { pid: number; generation: number }>> = {};
    const reports: Array<{ event: SupervisorEvent; ends?: number }> = [];
    /** Image jobs with an enhancer step: its start, whether it answered, and the image start that follows. */
    const enhanced = new Map<string, { enhancer: number; image: number | null; answered: boolean }>();
    const delivered: Array<{ event: SupervisorEvent; ends?: number }> = [];
    let nextPid = 5000;
    const deliver = (count: number) => {
      for (let i = 0; i < count && reports.length > 0; i++) {
        const report = reports.splice(Math.floor(random() * Math.min(reports.length, 2)), 1)[0]!;
        delivered.push(report);
        h.actor.send(report.event);
        if (report.ends !== undefined && 'kind' in report.event) alive[report.event.kind].delete(report.ends);
      }
    };
    const startProcess = (kind: WorkerKind, generation: number) => {
      if (alive[kind].size > 0) fail(`a second ${kind} process was started while ${[...alive[kind]].join(',')} lives`);
      const pid = ++nextPid;
      alive[kind].add(pid);
      current[kind] = { pid, generation };
      const loadMs = loadOf(kind, h.worker(kind).profileId);
      reports.push({ event: { type: 'worker.started', kind, generation, pid } }, { event: { type: 'worker.loaded', kind, generation, ...(loadMs === undefined ? {} : { loadMs }) } });
    };
    /** The job's part after the enhancer answered: its image process, once the enhancer is gone. */
    const startImages = () => {
      for (const [jobId, e] of enhanced) {
        if (!held.has(jobId)) enhanced.delete(jobId);
        else if (e.answered && e.image !== null && (current.enhancer?.generation !== e.enhancer || alive.enhancer.size === 0)) {
          if (alive.enhancer.size > 0) fail(`the image of ${jobId} would start while an enhancer lives`);
          // Without late reports the harness starts it on the image step's grant.
          if (lateWorkers) startProcess('image', e.image);
          enhanced.delete(jobId);
        }
      }
    };
    /** Enhancer starts on the CPU: chat and TTS may start while they live. */
    const cpuEnhancers = new Set<number>();
    h.actor.on('*', (event: SupervisorEmitted) => {
      if (event.type === 'gpu.granted' && event.enhancer) {
        enhanced.set(event.jobId, { enhancer: event.enhancer.generation, image: null, answered: false });
        if (event.enhancer.plan.gpus.length === 0) cpuEnhancers.add(event.enhancer.generation);
      } else if (event.type === 'gpu.granted' && event.step === 'image') {
        const e = enhanced.get(event.jobId);
        if (e) e.image = event.generation;
      }
    });
    const gpuEnhancerAlive = () => [...alive.enhancer].some(() => current.enhancer !== undefined && !cpuEnhancers.has(current.enhancer.generation));
    if (lateWorkers) {
      h.actor.on('*', (event: SupervisorEmitted) => {
        // The image step's process starts once the enhancer is gone (startImages), as the job waits for that.
        if (event.type === 'gpu.granted' && (event.start || event.enhancer) && !event.step) {
          if ((event.worker === 'chat' || event.worker === 'tts') && gpuEnhancerAlive()) fail(`a ${event.worker} start while the enhancer ${[...alive.enhancer].join(',')} on the GPUs lives`);
          // With an enhancer step the enhancer starts now; the image process once it answered and is gone.
          if (event.enhancer) startProcess('enhancer', event.enhancer.generation);
          else startProcess(event.worker, event.generation);
        } else if (event.type === 'worker.unload') {
          // The adapter stops the process of the start the command names.
          const proc = current[event.kind]?.generation === event.generation ? current[event.kind] : undefined;
          const { generation } = event;
          if (random() < 0.3 && proc) reports.push({ event: { type: 'worker.exited', kind: event.kind, generation, cause: 'stopped', message: 'SIGTERM' }, ends: proc.pid });
          reports.push(proc ? { event: { type: 'worker.unloaded', kind: event.kind, generation }, ends: proc.pid } : { event: { type: 'worker.unloaded', kind: event.kind, generation } });
        }
      });
    }
    h.world.chat.a = { model: model(24, 300), context: 8192, gpuSplit: null, gpuLayers: null };
    h.world.chat.b = { model: model(40, 500), context: 4096, gpuSplit: [1, 1], gpuLayers: null };
    h.world.chat.c = { model: model(8, 100), context: 2048, gpuSplit: [1], gpuLayers: 4 };
    const revisions: Record<string, number> = { a: 1, b: 1, c: 1, t: 1, s: 1, img: 1 };
    const editedAt: Record<string, number> = {};
    const jobs = new Map<string, Tracked>();
    const held = new Map<string, JobSpec>();
    const fail = (what: string) => failures.push(`run ${run}: ${what}`);
    /** Per chat profile: how long its last answers of one revision held their slot, as the adapter tells the supervisor. */
    const answers: Record<string, { revision: number; ms: number[] }> = {};
    const answerP95 = (spec: JobSpec) => (answers[spec.profileId]?.revision === spec.revision ? p95(answers[spec.profileId]!.ms) : UNMEASURED_ANSWER_MS);
    /** The adapter's release, with the time the job held its reservation. */
    const release = (id: string) => {
      const job = jobs.get(id)!;
      held.delete(id);
      job.stepDue = false;
      job.endedAt = h.clock.now();
      const event = h.releaseEvent(id);
      if (job.spec.kind === 'chat' && event.type === 'gpu.release' && event.heldMs !== undefined) {
        const kept = answers[job.spec.profileId];
        const ms = kept?.revision === job.spec.revision ? [...kept.ms, event.heldMs].slice(-ANSWER_WINDOW) : [event.heldMs];
        answers[job.spec.profileId] = { revision: job.spec.revision, ms };
      }
      h.actor.send(event);
    };
    /** The 600 s wait is absolute (spec 3.7): once the clock reached it, the job has heard its queue_timeout. */
    const withinWaitLimit = () => {
      for (const job of jobs.values()) {
        if (job.pending && h.clock.now() - job.submittedAt >= 600_000) fail(`${job.spec.id} (${job.spec.kind} ${job.spec.profileId}${job.overtakenBy.length > 0 ? ', overtaken' : ''}) still waits ${h.clock.now() - job.submittedAt} ms after it was queued`);
      }
    };
    /** Marks the jobs still waiting that a profile change makes stale (spec 3.7). */
    const markStale = (stale: (spec: JobSpec) => boolean, why: string) => {
      for (const job of jobs.values()) {
        if (!job.pending || job.staleSince || !stale(job.spec)) continue;
        job.staleSince = why;
        staleWaiting += 1;
      }
    };

    h.actor.on('*', (event: SupervisorEmitted) => {
      if (event.type === 'worker.unload' && event.kind === 'chat' && event.code === 'image_job') chatUnloadsForImages += 1;
      if (!('jobId' in event)) return;
      const job = jobs.get(event.jobId);
      if (!job) return;
      /** Which workers are loaded, not which jobs hold reservations: an idle chat worker holds none. */
      const noChatWorker = (what: string) => {
        const chat = h.worker('chat');
        if (chat.state !== 'unloaded') fail(`${what} ${event.jobId} was granted while the chat worker is ${chat.state} (profile ${chat.profileId})`);
        if (lateWorkers && alive.chat.size > 0) fail(`${what} ${event.jobId} was granted while the chat process ${[...alive.chat].join(',')} lives`);
      };
      if (event.type === 'gpu.granted' && event.step === 'image') {
        // The image step after an enhancer: on the GPUs at once; on the CPU, in the job's place.
        if (!job.cpuEnhancer) return;
        imageSteps += 1;
        if (!job.stepDue || job.granted !== 1) fail(`${event.jobId}: an image step granted before its enhancer answered`);
        job.stepDue = false;
        for (const other of jobs.values()) {
          if (other.pending && other.seq < job.seq && other.spec.source !== 'preload' && overlap(needs(other), NEEDS.image)) fail(`the image step of ${event.jobId} overtook the earlier ${other.spec.id}`);
        }
        const holds = [...held.entries()].filter(([id]) => id !== event.jobId).map(([, spec]) => spec);
        if (holds.some((s) => s.kind === 'chat' || s.kind === 'image' || (s.kind === 'tts' && s.source !== 'preload'))) fail(`the image step of ${event.jobId} shares the GPUs`);
        noChatWorker('the image step of');
        return;
      }
      if (event.type === 'gpu.granted') {
        grants += 1;
        job.granted += 1;
        if (job.granted > 1 || job.denied > 0) fail(`${event.jobId} granted twice or after a denial`);
        for (const other of jobs.values()) {
          if (job.spec.source === 'preload' && (other.pending || other.stepDue) && other.spec.source !== 'preload' && overlap(other.stepDue ? NEEDS.image : needs(other), NEEDS[job.spec.kind])) {
            fail(`the preload ${event.jobId} went ahead of the waiting request ${other.spec.id}`);
          }
          if (other.pending && other.seq < job.seq && other.spec.source !== 'preload' && overlap(needs(other), needs(job))) {
            // The swap-aware exception: a chat on the loaded worker past a switch within its bound.
            const otherProfile = other.spec.kind === 'chat' && (other.spec.profileId !== job.spec.profileId || other.spec.revision !== job.spec.revision);
            const waited = h.clock.now() - other.submittedAt;
            // Its answer, at the p95, ends 30 s before the switch's limit, begun at the end of the
            // bound (the setting's, at least) and begun now.
            const inTime = Math.max(BOUND_MS, waited) + answerP95(job.spec) <= 600_000 - SWITCH_DEADLINE_MARGIN_MS;
            const bounded = swapAware && job.spec.kind === 'chat' && event.start === null && otherProfile && waited < boundOf(other.spec.profileId) && inTime;
            if (bounded) overtakes += 1;
            if (bounded && waited >= BOUND_MS) longOvertakes += 1;
            if (bounded) other.overtakenBy.push({ id: event.jobId, p95: answerP95(job.spec) });
            const why = ` after ${waited} ms (its bound: ${boundOf(other.spec.profileId)} ms; the p95 of ${job.spec.profileId}: ${answerP95(job.spec)} ms)`;
            if (!bounded) fail(`${event.jobId} overtook the earlier ${other.spec.id}${swapAware && other.spec.kind === 'chat' && job.spec.kind === 'chat' ? why : ''}`);
          }
          if (other.stepDue && other.seq < job.seq && job.spec.source !== 'preload' && overlap(NEEDS.image, needs(job))) fail(`${event.jobId} was granted while the image step of ${other.spec.id} waits`);
        }
        job.pending = false;
        job.grantedAt = h.clock.now();
        held.set(event.jobId, job.spec);
        // An image job whose enhancer runs on the CPU holds no GPU until its image step.
        const holds = [...held.entries()].filter(([id]) => !jobs.get(id)?.cpuEnhancer).map(([, spec]) => spec);
        if (job.spec.kind === 'chat' && [...held.keys()].some((id) => jobs.get(id)?.cpuEnhancer && jobs.get(id)?.spec.kind === 'image')) chatsBesideCpuEnhancer += 1;
        const count = (kind: JobSpec['kind']) => holds.filter((s) => s.kind === kind).length;
        if ([...held.values()].filter((s) => s.kind === 'image').length > 1) fail('two image jobs hold the image reservation');
        if (count('image') > 1 || (count('image') === 1 && count('chat') > 0)) fail('an image shares the GPUs');
        const chats = holds.filter((s) => s.kind === 'chat');
        if (new Set(chats.map((s) => `${s.profileId}@${s.revision}`)).size > 1) fail('two chat profiles hold the chat worker');
        if (chats.length > (SLOTS[chats[0]?.profileId ?? 'a'] ?? 1)) fail(`more chats than slots: ${chats.length}`);
        // A preload only waits for the start it asked for: a request may join it, but never two requests.
        const requests = (kind: JobSpec['kind']) => holds.filter((h) => h.kind === kind && h.source !== 'preload').length;
        if (requests('tts') > 1 || requests('stt') > 1) fail('two speech requests on one worker');
        if (count('image') === 1 && holds.some((h) => h.kind === 'tts')) fail('an image shares the GPUs with a TTS job');
        if (job.staleSince) fail(`${event.jobId} granted after its profile changed (${job.staleSince})`);
        if (job.spec.kind === 'image' && !job.cpuEnhancer) {
          imageGrants += 1;
          noChatWorker('the image job');
        }
      } else if (event.type === 'gpu.denied') {
        denials += 1;
        job.denied += 1;
        job.deniedCode ??= event.code;
        if (job.granted > 0 || job.denied > 1) fail(`${event.jobId} denied twice or after a grant`);
        job.pending = false;
        if (event.code === 'queue_timeout' && h.clock.now() - job.submittedAt < 600_000) fail(`${event.jobId} expired early`);
        if (event.code === 'queue_timeout') expiries += 1;
        if (event.code === 'queue_timeout' && job.overtakenBy.length > 0) {
          overtakenExpiries += 1;
          let pastP95 = false;
          for (const { id, p95: admittedAt } of job.overtakenBy) {
            const overtaker = jobs.get(id)!;
            const ended = overtaker.endedAt ?? h.clock.now();
            if (h.clock.now() - ended >= SWITCH_DEADLINE_MARGIN_MS) continue;
            const ran = ended - overtaker.grantedAt!;
            if (ran > admittedAt) pastP95 = true;
            else fail(`${event.jobId} expired ${overtaker.endedAt === undefined ? 'while' : `${h.clock.now() - ended} ms after`} ${id}, which overtook it, ran ${ran} ms, within the p95 of ${admittedAt} ms that let it`);
          }
          if (pastP95) expiriesPastP95 += 1;
        }
        if (event.code === 'profile_changed' && !((editedAt[job.spec.profileId] ?? -1) >= job.submittedAt)) fail(`${event.jobId} profile_changed without an edit`);
        if (event.code === 'image_busy' && job.spec.whenBusy !== 'refuse') fail(`${event.jobId}: an API job got a conflict instead of waiting`);
      } else if (event.type === 'gpu.revoked') {
        job.revoked += 1;
        job.stepDue = false;
        job.endedAt = h.clock.now();
        if (job.granted !== 1 || !held.has(event.jobId)) fail(`${event.jobId} revoked without a grant`);
        held.delete(event.jobId);
      }
    });

    let stopping = 0;
    for (let step = 0; step < STEPS; step++) {
      const r = random();
      const heldIds = [...held.keys()];
      const waitingIds = [...jobs.values()].filter((j) => j.pending).map((j) => j.spec.id);
      if (r < 0.42) {
        const kindRoll = random();
        const profileId = kindRoll < 0.6 ? (pick(['a', 'b', 'c']) ?? 'a') : kindRoll < 0.72 ? 'img' : kindRoll < 0.86 ? 't' : 's';
        const kind: JobSpec['kind'] = profileId === 'img' ? 'image' : profileId === 't' ? 'tts' : profileId === 's' ? 'stt' : 'chat';
        const refuse = kind === 'image' && random() < 0.3;
        const preload = (kind === 'tts' || kind === 'stt') && random() < 0.3;
        // Half the images have the prompt enhancer on; a third of those from the test are previews (no image).
        // Half of those run on the CPU (CONTRACT 8), the others on every GPU.
        const enhancer =
          kind === 'image' && random() < 0.5 ? { task: 't2i' as const, model: '/e.gguf', mmproj: null, context: 8192, image: !(refuse && random() < 0.33), device: random() < 0.5 ? 'cpu' : 'auto' } : null;
        const spec = h.spec({
          kind,
          profileId,
          revision: revisions[profileId] ?? 1,
          slots: SLOTS[profileId] ?? 1,
          device: kind === 'tts' ? 'GPU-a' : 'cpu',
          source: refuse ? 'test' : preload ? 'preload' : 'api',
          whenBusy: refuse ? 'refuse' : 'wait',
          ...(enhancer ? { enhancer } : {}),
        });
        const cpuEnhancer = enhancer?.device === 'cpu';
        jobs.set(spec.id, { spec, cpuEnhancer, stepDue: false, submittedAt: h.clock.now(), seq: jobs.size, pending: true, granted: 0, denied: 0, revoked: 0, cancelledWhileWaiting: false, overtakenBy: [] });
        h.actor.send({ type: 'gpu.reserve', job: spec });
      } else if (r < 0.68 && heldIds.length > 0) {
        release(pick(heldIds)!);
      } else if (r < 0.74 && waitingIds.length > 0) {
        const id = pick(waitingIds)!;
        const job = jobs.get(id)!;
        job.pending = false;
        job.cancelledWhileWaiting = true;
        h.actor.send({ type: 'job.cancel', jobId: id });
      } else if (r < 0.78) {
        const profileId = pick(['a', 'b', 'c', 't', 's'])!;
        revisions[profileId] = (revisions[profileId] ?? 1) + 1;
        editedAt[profileId] = h.clock.now();
        // Every job still waiting with the old revision is stale now.
        markStale((spec) => spec.profileId === profileId && spec.revision !== revisions[profileId], `revision ${revisions[profileId]}`);
        h.actor.send({ type: 'profile.changed', profileId, revision: revisions[profileId]!, published: true });
      } else if (r < 0.8) {
        const profileId = pick(['a', 'b'])!;
        editedAt[profileId] = h.clock.now();
        // An unpublished profile: its waiting API requests are stale (the operator's tests may go on).
        markStale((spec) => spec.profileId === profileId && spec.source === 'api', 'unpublished');
        h.actor.send({ type: 'profile.changed', profileId, revision: revisions[profileId]!, published: false });
      } else if (r < 0.83) {
        const own = h.worker('chat').pid;
        const foreign = random() < 0.5 ? [{ pid: 99_999, usedMiB: 2 * GIB }] : [];
        h.actor.send({ type: 'gpu.inventory', gpus: [gpu('GPU-a', 24 * GIB, 20 * GIB, [...(own ? [{ pid: own, usedMiB: GIB }] : []), ...foreign]), gpu('GPU-b')] });
      } else if (r < 0.85 && !lateWorkers) {
        const kind = pick(['chat', 'tts', 'stt'] as const)!;
        h.actor.send({ type: 'worker.exited', kind, generation: h.gen(kind), cause: 'unclear', message: 'exit code 1' });
      } else if (r < 0.87) {
        h.world.ramMiB = random() < 0.5 ? GIB : 20 * GIB;
      } else if (r < 0.89) {
        stopping += 1;
        h.actor.send({ type: 'endpoint.discard', requestId: `d${stopping}` });
        h.actor.send({ type: 'workers.unloadAll', requestId: `u${stopping}` });
      } else if (r < 0.91 && lateWorkers) {
        // A worker of ours crashes, or an old report arrives once more.
        const kind = pick(['chat', 'tts', 'stt', 'image'] as const)!;
        const proc = current[kind];
        if (random() < 0.5 && proc && alive[kind].has(proc.pid)) {
          reports.push({ event: { type: 'worker.exited', kind, generation: proc.generation, cause: 'unclear', message: 'exit code 134' }, ends: proc.pid });
        }
        else if (delivered.length > 0) reports.push({ event: pick(delivered)!.event });
      } else if (r < 0.93) {
        h.actor.send({ type: 'audio.mode', kind: pick(['tts', 'stt'] as const)!, mode: pick(['auto', 'warm', 'per_request'] as const)! });
      } else if (r < 0.97) {
        // An enhancer answers (its job tells the supervisor); a loaded one only, as the adapter waits for loaded.
        const id = pick([...enhanced].filter(([jobId, e]) => held.has(jobId) && !e.answered && h.worker('enhancer').generation === e.enhancer && h.worker('enhancer').state === 'loaded').map(([jobId]) => jobId));
        if (id) {
          enhanced.get(id)!.answered = true;
          const job = jobs.get(id)!;
          job.stepDue = job.cpuEnhancer && job.spec.enhancer?.image === true;
          h.actor.send({ type: 'enhancer.done', jobId: id });
        }
      } else {
        h.clock.increment(Math.floor(random() * 400_000));
      }
      if (lateWorkers) deliver(Math.floor(random() * 3));
      startImages();
      await h.settle(3);
      for (const job of jobs.values()) {
        if (!job.staleSince || job.staleReported) continue;
        job.staleReported = job.pending || (job.denied > 0 && job.deniedCode !== 'profile_changed');
        if (job.pending) fail(`${job.spec.id} (${job.spec.kind} ${job.spec.profileId}) still waits after its profile changed (${job.staleSince})`);
        else if (job.denied > 0 && job.deniedCode !== 'profile_changed') fail(`${job.spec.id} waited while its profile changed (${job.staleSince}) and was denied with ${job.deniedCode}, not profile_changed`);
      }
      const loaded = h.worker('chat');
      for (const sw of jobs.values()) {
        if (!swapAware || !sw.pending || sw.spec.kind !== 'chat' || (loads[sw.spec.profileId] ?? 0) <= SWITCH_MAX_WAIT_CAP_MS || h.clock.now() - sw.submittedAt < SWITCH_MAX_WAIT_CAP_MS) continue;
        if (loaded.state === 'loaded' && loaded.profileId !== sw.spec.profileId && [...jobs.values()].some((j) => j.pending && j.seq > sw.seq && j.spec.profileId === loaded.profileId)) cappedSwitches.add(`${run} ${sw.spec.id}`);
      }
      withinWaitLimit();
      // The queue keeps the one waiting order: the order the supervisor plans by is the queue's.
      const planned = waitingOrder(h.context().jobs);
      const queued = h.queueJobs();
      if (planned.join() !== queued.join()) fail(`the supervisor plans by ${planned.join()} while the queue holds ${queued.join()}`);
    }

    // In half the runs what runs still streams for 600 s first, far past any p95: every job still waiting expires.
    if (Math.floor(run / 8) % 2 === 1) {
      h.clock.increment(600_000);
      await h.settle(3);
      withinWaitLimit();
    }
    // The load goes away: release everything held, round after round, until nothing waits.
    h.world.ramMiB = 20 * GIB;
    for (let round = 0; round < 60 && [...jobs.values()].some((j) => j.pending); round++) {
      for (const id of [...held.keys()]) release(id);
      deliver(reports.length);
      await h.settle(3);
    }
    for (const job of jobs.values()) {
      if (job.pending) fail(`${job.spec.id} (${job.spec.kind} ${job.spec.profileId}) still waits with no load left: it starved`);
      const ends = job.granted + job.denied;
      if (ends !== (job.cancelledWhileWaiting ? 0 : 1)) fail(`${job.spec.id} ended ${ends} times${job.cancelledWhileWaiting ? ' after its client left' : ''}`);
    }
    if (waitingOrder(h.context().jobs).length !== 0 || h.queueJobs().length !== 0) fail('jobs left in the queue');
    for (const id of [...held.keys()]) release(id);
    for (let round = 0; round < 5; round++) {
      deliver(reports.length);
      await h.settle(3);
    }
    if (h.worker('enhancer').state !== 'unloaded') fail(`an enhancer is left ${h.worker('enhancer').state} with no job`);
    if (lateWorkers && alive.enhancer.size > 0) fail('an enhancer process outlived its job');
    h.actor.stop();
  }
  t.same(failures, [], 'no invariant broken');
  t.ok(grants > SEQUENCES * 5 && denials > SEQUENCES, `the sequences exercised the scheduler: ${grants} grants, ${denials} denials`);
  t.ok(imageGrants > SEQUENCES / 2 && chatUnloadsForImages > SEQUENCES / 20, `image jobs were granted (${imageGrants}), after unloading a loaded chat worker ${chatUnloadsForImages} times`);
  t.ok(staleWaiting > SEQUENCES / 20, `${staleWaiting} waiting requests were made stale by a profile change`);
  t.ok(overtakes > SEQUENCES / 20, `${overtakes} chats for the loaded profile overtook a waiting switch within its bound`);
  t.ok(longOvertakes > SEQUENCES / 400, `${longOvertakes} of them after the setting's ${BOUND_MS} ms, within a bound the switch's own measured load lengthened`);
  t.ok(expiries > SEQUENCES / 10, `${expiries} jobs expired at their 600 s limit`);
  t.ok(expiriesPastP95 > SEQUENCES / 200, `${overtakenExpiries} of them overtaken switches, ${expiriesPastP95} of these while (or less than ${SWITCH_DEADLINE_MARGIN_MS} ms after) a chat that overtook them ran past the p95 that let it`);
  t.ok(cappedSwitches.size > SEQUENCES / 400, `${cappedSwitches.size} switches with a load above 120 s had waited 120 s while a later chat for the loaded profile waited`);
  t.ok(imageSteps > SEQUENCES / 100 && chatsBesideCpuEnhancer > SEQUENCES / 20, `${imageSteps} image steps after an enhancer on the CPU, ${chatsBesideCpuEnhancer} chats granted beside one`);
});
