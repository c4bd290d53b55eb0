// The overview's "Needs attention" list (console/src/attention.ts), most serious first, from a
// status and an audio policy view shaped like the service's own.
import t from 'tap';
import { attentionOf } from '../../console/src/attention.js';
import type { AudioPolicyView, EndpointStatus } from '../../console/src/types.js';

function statusWith(over: Partial<EndpointStatus>): EndpointStatus {
  return {
    status: 'running',
    host: '127.0.0.1',
    port: 8120,
    remembered_running: true,
    port_range: { first: 1024, last: 65535, from: 'native' },
    error: null,
    stop: null,
    secrets_problem: null,
    counters: { requests: 0, errors: 0, rejected: 0, by_route: {} },
    workers: [],
    queue: { waiting: [], running: [] },
    profiles: [],
    gpus: [],
    gpu_probe: { source: 'none', problem: null },
    memory: { ram: { problem: null }, gpu_reserve_mib: [], note: '' },
    ...over,
  } as EndpointStatus;
}

const profile = (name: string, published: boolean, blockers: string[]) =>
  ({ id: `p-${name}`, name, category: 'chat', revision: 1, published, executable: blockers.length === 0, blockers, params: {} }) as unknown as EndpointStatus['profiles'][number];
const worker = (kind: string, state: string, last: string | null) => ({ kind, state, last, profile_id: null, pid: null, gpus: [], since: null }) as unknown as EndpointStatus['workers'][number];

t.test('nothing to report', async (t) => {
  t.same(attentionOf(statusWith({ profiles: [profile('ok', true, [])] }), { settings: [], errors: [], states: { tts: 'auto', stt: 'auto' } }), []);
});

t.test('the most serious first, each with its words', async (t) => {
  const audio: AudioPolicyView = {
    settings: [],
    errors: [{ kind: 'tts', profile_id: 'p-voice', code: 'runtime_missing', message: 'the tts profile voice cannot be loaded: runtime missing: espeak-ng', attempts: 3 }],
    states: { tts: 'warm.failed', stt: 'auto' },
  } as AudioPolicyView;
  const items = attentionOf(
    statusWith({
      error: { code: 'listen_failed', message: 'port 8120 is in use' },
      secrets_problem: 'secrets.json is unreadable',
      workers: [
        worker('chat', 'unloaded', 'ram_oom: the chat worker was killed for lack of RAM (oom_kill 0 → 1)'),
        worker('image', 'unloaded', 'gpu_oom: CUDA out of memory'),
        worker('tts', 'unloaded', 'stopped: unloaded on request'),
        worker('stt', 'loaded', null),
      ],
      profiles: [profile('draft', false, ['model file missing: /m.gguf']), profile('live', true, ['runtime missing: llama-server'])],
    }),
    audio,
  );
  t.same(
    items.map((i) => [i.tone, i.text]),
    [
      ['bad', 'Listener: port 8120 is in use (listen_failed)'],
      ['bad', 'Secrets: secrets.json is unreadable'],
      ['bad', 'The chat worker ended: ram_oom: the chat worker was killed for lack of RAM (oom_kill 0 → 1)'],
      ['bad', 'The image worker ended: gpu_oom: CUDA out of memory'],
      ['bad', 'Audio policy tts (p-voice): the tts profile voice cannot be loaded: runtime missing: espeak-ng, 3 attempts'],
      ['bad', 'Published profile live cannot run: runtime missing: llama-server'],
      ['warn', 'Profile draft: model file missing: /m.gguf'],
    ],
  );
  t.notOk(items.some((i) => i.text.includes('tts worker')), 'a worker we stopped is no failure');
});

t.test('spec 8: a saved port outside the allowed range comes first, with the fix in console words', async (t) => {
  const s = statusWith({
    status: 'stopped',
    port: 8120,
    port_range: { first: 8130, last: 8134, from: 'saved' },
    error: { code: 'saved_port_out_of_range', message: 'the saved port 8120 is outside the allowed ports 8130-8134, …' },
    profiles: [profile('draft', false, ['model file missing: /m.gguf'])],
  });
  const items = attentionOf(s, null);
  t.same(items.map((i) => [i.tone, i.text]), [
    ['bad', 'Listener: the saved port 8120 is outside the allowed ports 8130-8134, so the inference listener stays stopped (saved_port_out_of_range)'],
    ['warn', 'Profile draft: model file missing: /m.gguf'],
  ]);
  t.equal(
    items[0]?.fix,
    'Fix: enter a port from 8130 to 8134 under Listener, press Change port, then Start. Or allow port 8120 with a wider --api-ports (service-deck update --api-ports <first>-<last>) and restart the service.',
  );
  t.equal(items[0]?.link, '#listener', 'the item leads to the Listener card, where the port is changed');
  t.equal(attentionOf(statusWith({ error: { code: 'listen_failed', message: 'port 8120 is in use' } }), null)[0]?.fix, undefined, 'other listener failures carry no such fix');
});
