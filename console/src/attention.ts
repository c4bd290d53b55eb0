// What the overview lists under "Needs attention", most serious first: a pure function of the
// status and the audio policy (tested in node: test/console/attention.test.ts).
import type { AudioPolicyView, EndpointStatus, SupervisedWorker, WorkerView } from './types.js';

/**
 * A worker that ended on its own is unloaded with `<cause>: <diagnosis>` as its last word: the
 * causes of src/system/diagnose.ts (not `stopped`, which we asked for) and a missing runtime.
 */
const DIED = /^(ram_oom|gpu_oom|timeout|model_error|unclear|runtime_missing): /;

export interface Attention {
  key: string;
  tone: 'bad' | 'warn';
  text: string;
  /** What the operator does about it in the console, where that is not in `text`. */
  fix?: string;
  link?: string;
}

/** The listener's last failure; a saved port outside the allowed range (spec 8) with its fix in console words. */
function listenerAttention(s: EndpointStatus): Attention | null {
  if (!s.error) return null;
  if (s.error.code !== 'saved_port_out_of_range') return { key: 'listener', tone: 'bad', text: `Listener: ${s.error.message} (${s.error.code})` };
  const { first, last } = s.port_range;
  return {
    key: 'listener',
    tone: 'bad',
    text: `Listener: the saved port ${s.port} is outside the allowed ports ${first}-${last}, so the inference listener stays stopped (${s.error.code})`,
    fix: `Fix: enter a port from ${first} to ${last} under Listener, press Change port, then Start. Or allow port ${s.port} with a wider --api-ports (service-deck update --api-ports <first>-<last>) and restart the service.`,
    link: '#listener',
  };
}

/** What the operator should look at first, most serious first. */
export function attentionOf(s: EndpointStatus, audio: AudioPolicyView | null): Attention[] {
  const out: Attention[] = [];
  const listener = listenerAttention(s);
  if (listener) out.push(listener);
  if (s.secrets_problem) out.push({ key: 'secrets', tone: 'bad', text: `Secrets: ${s.secrets_problem}` });
  if (s.gpu_probe.problem) out.push({ key: 'gpus', tone: 'warn', text: `GPU probe: ${s.gpu_probe.problem}` });
  const ramProblem = s.memory.ram.problem;
  if (typeof ramProblem === 'string') out.push({ key: 'ram', tone: 'warn', text: `RAM probe: ${ramProblem}` });
  for (const view of s.workers) {
    const w = view as WorkerView & Partial<SupervisedWorker>;
    // A worker that died on its own is unloaded with `<cause>: <diagnosis>` as its last word.
    const died = w.state === 'unloaded' && w.last ? DIED.exec(w.last) : null;
    if (died) out.push({ key: `worker-${w.kind}`, tone: 'bad', text: `The ${w.kind} worker ended: ${w.last}` });
  }
  for (const e of audio?.errors ?? []) {
    out.push({ key: `audio-${e.kind}`, tone: 'bad', text: `Audio policy ${e.kind} (${e.profile_id ?? 'no profile'}): ${e.message}${e.attempts > 0 ? `, ${e.attempts} attempts` : ''}`, link: '#/audio' });
  }
  for (const p of s.profiles) {
    if (p.published && p.blockers.length > 0) out.push({ key: `profile-${p.id}`, tone: 'bad', text: `Published profile ${p.name} cannot run: ${p.blockers.join('; ')}`, link: '#/profiles' });
  }
  for (const p of s.profiles) {
    if (!p.published && p.blockers.length > 0) out.push({ key: `profile-${p.id}`, tone: 'warn', text: `Profile ${p.name}: ${p.blockers.join('; ')}`, link: '#/profiles' });
  }
  return out;
}

