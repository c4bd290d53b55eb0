// The human form of `service-deck status` (src/cli/status.ts) for what a quiet test service never
// shows: a loaded worker with its memory forecast and GPU use, jobs waiting and running, a stop in
// progress, a listener failure. The report is the status object of CONTRACT section 6.
import t from 'tap';
import { adminUrl } from '../../src/cli/admin.js';
import { formatStatus, stoppedView, type StatusReport, type StatusView } from '../../src/cli/status.js';
import type { JobStatus } from '../../src/system/observe/console.types.js';

const job = (over: Partial<JobStatus>): JobStatus => ({
  job_id: 'j-1',
  kind: 'chat',
  profile_id: 'p-chat',
  revision: 3,
  source: 'api',
  phase: 'waiting',
  position: 1,
  waited_ms: 1840,
  running_ms: null,
  reservation: { worker: null, gpus: [] },
  memory: null,
  progress: null,
  reason: null,
  ...over,
});

const profile = (id: string, name: string, blockers: string[], published = true) =>
  ({ id, name, category: 'chat', published, executable: blockers.length === 0, blockers, notices: [] }) as unknown as StatusView['profiles'][number];

/** A running service's report: the stopped view of its address, running, with `endpoint` over it. */
function report(endpoint: Partial<StatusView>): StatusReport {
  const base = stoppedView({ host: '127.0.0.1', port: 8120, running: true }, [profile('p-chat', 'qwen', [])]);
  return {
    state_dir: '/srv/deck',
    service: { running: true, pid: 4100, admin_url: 'http://127.0.0.1:8110', note: null },
    endpoint: { ...base, status: 'running', ...endpoint },
  };
}

t.test('workers with state and memory, the queue, blocked profiles', async (t) => {
  const text = formatStatus(
    report({
      workers: [
        {
          kind: 'chat',
          profile_id: 'p-chat',
          revision: 3,
          state: 'loaded',
          pid: 41873,
          gpus: ['GPU-a'],
          since: '2026-11-22T13:02:11.412Z',
          stale: 'a new revision of its profile',
          plan: { forecast: { ram_mib: 762, gpu_mib: { 'GPU-a': 4391 }, basis: 'GGUF metadata', note: 'prediction' } } as never,
        },
        { kind: 'stt', profile_id: 'p-gone', state: 'loading', pid: null, gpus: [], since: null },
      ],
      gpus: [{ uuid: 'GPU-a', name: 'sim', memoryTotalMiB: 24576, memoryFreeMiB: 20000, processes: [{ pid: 41873, usedMiB: 4100, own: true }] }],
      queue: {
        waiting: [job({}), job({ job_id: 'j-3', profile_id: 'p-big', position: 2, waited_ms: 12_000, reason: "behind the loaded profile's requests, at most 18 s more" })],
        running: [job({ job_id: 'j-2', phase: 'running', position: null, waited_ms: 3, running_ms: 5120, source: 'test' })],
      },
      profiles: [profile('p-chat', 'qwen', []), profile('p-big', 'big', ['model file missing: /m/big.gguf', 'runtime missing: llama-server'], false)],
    }),
  );
  t.equal(
    text,
    [
      'service-deck: state directory /srv/deck',
      'service: running (process 4100, admin API http://127.0.0.1:8110)',
      'inference listener: running on http://127.0.0.1:8120/v1',
      'workers:',
      '  chat  loaded  qwen (p-chat) revision 3  process 41873  since 2026-11-22T13:02:11.412Z',
      '    memory: forecast RAM 762 MiB, GPU GPU-a 4391 MiB; GPU in use GPU-a 4100 MiB; goes when idle: a new revision of its profile',
      '  stt  loading  p-gone  no process yet  since -',
      '    memory: no forecast (CPU worker or not planned)',
      'queue: 2 waiting, 1 running',
      '  running  chat  qwen (p-chat)  test  waited 3 ms, running 5120 ms',
      '  waiting #1  chat  qwen (p-chat)  api  waited 1840 ms',
      "  waiting #2  chat  big (p-big)  api  waited 12000 ms  (behind the loaded profile's requests, at most 18 s more)",
      'profiles: 2 (1 published, 1 blocked)',
      '  blocked: big (p-big, chat): model file missing: /m/big.gguf; runtime missing: llama-server',
      '',
    ].join('\n'),
  );
});

t.test('the listener line: stopping, a failure, a stopped service', async (t) => {
  const line = (r: StatusReport) => formatStatus(r).split('\n')[2];
  t.equal(
    line(report({ status: 'stopping', stop: { since: 'x', open_requests: 1, running_jobs: 2 } })),
    'inference listener: stopping on 127.0.0.1:8120: waiting for 1 open request and 2 running jobs',
  );
  t.equal(
    line(report({ status: 'stopped', error: { code: 'listen_failed', message: 'port 8120 is in use' } })),
    'inference listener: stopped (port 8120) (last failure: port 8120 is in use)',
  );
  const stopped = report({ status: 'stopped', remembered_running: false });
  stopped.service = { running: false, pid: null, admin_url: null, note: null };
  t.equal(line(stopped), 'inference listener: stopped with the service (port 8120; stays stopped when the service starts)');
});

t.test('the admin URL of a wildcard listener is on loopback', async (t) => {
  t.equal(adminUrl({ host: '0.0.0.0', port: 8110 }), 'http://127.0.0.1:8110');
  t.equal(adminUrl({ host: '::', port: 8110 }), 'http://[::1]:8110');
  t.equal(adminUrl({ host: '::1', port: 8111 }), 'http://[::1]:8111');
  t.equal(adminUrl({ host: '127.0.0.1', port: 8112 }), 'http://127.0.0.1:8112');
});
