// The overview, live from the event stream: the listener with start, stop and its port; the
// extensions beyond the specification (off by default); what needs attention first; the workers
// with their memory plans; the queue; the counters; GPUs and RAM.
import { useEffect, useState } from 'preact/hooks';
import { api, message } from '../api.js';
import { attentionOf } from '../attention.js';
import { audioPolicy, notify, status } from '../state.js';
import type { EndpointStatus, SupervisedWorker, WorkerStderrView, WorkerView } from '../types.js';
import { ActionButton, Badge, Facts, Section, Table, attempt, clock, duration, mib, since } from '../ui.js';

/** A profile by its name (the API's model name), its id when it is gone. */
const profileName = (s: EndpointStatus, id: string | null) => (id === null ? '—' : (s.profiles.find((p) => p.id === id)?.name ?? id));

/** Where the allowed ports come from (the status's `port_range.from`). */
const RANGE_FROM: Record<EndpointStatus['port_range']['from'], string> = {
  option: 'serve --api-ports, this run',
  saved: 'saved by service-deck update --api-ports',
  env: 'SERVICE_DECK_API_PORTS',
  native: 'any unprivileged port',
};

function Listener({ s }: { s: EndpointStatus }) {
  const [port, setPort] = useState('');
  const running = s.status === 'running';
  const outside = s.error?.code === 'saved_port_out_of_range';
  return (
    <Section
      title="Listener"
      id="listener"
      actions={
        <>
          <ActionButton kind="primary" disabled={s.status !== 'stopped'} onClick={() => attempt('Start', () => api('POST', '/api/v1/endpoint/start', {}))}>
            Start
          </ActionButton>
          <ActionButton kind="danger" disabled={s.status !== 'running'} onClick={() => attempt('Stop', () => api('POST', '/api/v1/endpoint/stop', {}))}>
            Stop
          </ActionButton>
        </>
      }
    >
      <Facts
        items={[
          ['State', <Badge tone={running ? 'ok' : s.status === 'stopping' ? 'warn' : 'idle'}>{s.status}</Badge>],
          ['Address', `http://${s.host}:${s.port}/v1`],
          ['Allowed ports', `${s.port_range.first}-${s.port_range.last} (${RANGE_FROM[s.port_range.from]})`],
          ['Remembered', s.remembered_running ? 'running at the next start' : 'stopped at the next start'],
          ...(s.stop ? ([['Stopping', `since ${since(s.stop.since)}: ${s.stop.open_requests} open requests, ${s.stop.running_jobs} running jobs`]] as Array<[string, string]>) : []),
        ]}
      />
      <form
        class="inline"
        onSubmit={async (event) => {
          event.preventDefault();
          const value = Number(port);
          const done = await attempt('Port change', () => api('POST', '/api/v1/endpoint/config', { port: value }));
          if (done) {
            notify('info', `The endpoint will listen on port ${value}.`);
            setPort('');
          }
        }}
      >
        <label for="port">Port</label>
        <input
          id="port"
          type="number"
          min={s.port_range.first}
          max={s.port_range.last}
          required
          placeholder={String(outside ? s.port_range.first : s.port)}
          value={port}
          onInput={(e) => setPort(e.currentTarget.value)}
        />
        <button
          class="btn"
          type="submit"
          disabled={s.status !== 'stopped'}
          aria-describedby={s.status !== 'stopped' ? 'port-why' : undefined}
          title={s.status !== 'stopped' ? 'The port changes only while the listener is stopped: stop it first.' : undefined}
        >
          Change port
        </button>
        {s.status !== 'stopped' ? (
          <span class="hint" id="port-why">
            The port changes only while the listener is stopped (spec 3.1): stop it first, then change the port and start it again.
          </span>
        ) : null}
        {outside ? (
          <span class="hint">
            The saved port {s.port} is outside {s.port_range.first}-{s.port_range.last}: choose one in the range, then Start.
          </span>
        ) : null}
      </form>
    </Section>
  );
}

/**
 * The operator's switches for what goes beyond the specification (CONTRACT section 9): each off on
 * a default install, each in force from the next request, the listener running or not.
 */
function Extensions({ s }: { s: EndpointStatus }) {
  // What the operator asked for, shown while the service answers (then the service's answer).
  const [asked, setAsked] = useState<boolean | null>(null);
  const turn = async (on: boolean) => {
    setAsked(on);
    const answer = await attempt('Responses API', () => api<{ extensions: EndpointStatus['extensions'] }>('POST', '/api/v1/endpoint/extensions', { responses: on }));
    // The switch shows what the service answered at once, not after the next status event.
    if (answer && status.value) status.value = { ...status.value, extensions: answer.extensions };
    setAsked(null);
    if (!answer) return;
    notify('info', on ? 'The Responses API is on: POST /v1/responses serves the chat profiles from the next request.' : 'The Responses API is off: POST /v1/responses answers 404 from the next request.');
  };
  return (
    <Section title="Extensions" id="extensions">
      <p class="hint">Beyond the specification: a default install offers none of these. Each is the operator's choice, kept across restarts.</p>
      <label class="choice" for="extension-responses">
        <input
          id="extension-responses"
          type="checkbox"
          role="switch"
          aria-describedby="extension-responses-what"
          checked={asked ?? s.extensions.responses}
          disabled={asked !== null}
          onChange={(e) => void turn(e.currentTarget.checked)}
        />{' '}
        Responses API (<code>POST /v1/responses</code>) <Badge tone={s.extensions.responses ? 'warn' : 'idle'}>{s.extensions.responses ? 'on' : 'off'}</Badge>
      </label>
      <p class="hint" id="extension-responses-what">
        OpenAI's Responses API on the published chat profiles, for clients that speak nothing else (the AI SDK's default OpenAI provider, OpenAI's Agents SDK). It goes
        beyond the specification, which does not offer it: while off, the route answers 404 like any unknown route.
      </p>
    </Section>
  );
}

/** A worker whose process runs and takes jobs (the supervisor says loaded; a hook may say ready). */
const loaded = (state: string) => state === 'loaded' || state === 'ready';

const WORKER_KINDS: Array<WorkerView['kind']> = ['chat', 'image', 'tts', 'stt', 'enhancer'];

/**
 * The spec's explicit unload (3.2), for any loaded worker: the service refuses it with 409
 * `active_requests` while a job runs on the worker, and answers once the process is gone.
 */
async function unloadWorker(kind: WorkerView['kind']) {
  if (!window.confirm(`Unload the ${kind} worker? Its process ends; the next request for it loads it again.`)) return;
  const done = await attempt(`Unload ${kind}`, () => api<{ unloaded: boolean }>('POST', `/api/v1/workers/${kind}/unload`, {}));
  if (done) notify('info', done.unloaded ? `The ${kind} worker is unloaded.` : `The ${kind} worker is unloading.`);
}

/** A worker kind's recent stderr lines (bounded and redacted by the service), read when shown and on Refresh. */
function WorkerStderr({ kind, asked, onKind }: { kind: WorkerView['kind']; asked: number; onKind: (kind: WorkerView['kind']) => void }) {
  const [view, setView] = useState<WorkerStderrView | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [reads, setReads] = useState(0);
  useEffect(() => {
    const controller = new AbortController();
    setError(null);
    api<WorkerStderrView>('GET', `/api/v1/workers/${kind}/stderr`, undefined, { signal: controller.signal }).then(setView, (failure: unknown) => {
      if (!controller.signal.aborted) setError(message(failure));
    });
    return () => controller.abort();
  }, [kind, reads, asked]);
  return (
    <Section
      title="Worker stderr"
      id="worker-stderr"
      actions={
        <>
          <label for="stderr-kind">Worker</label>
          <select id="stderr-kind" value={kind} onChange={(e) => onKind(e.currentTarget.value as WorkerView['kind'])}>
            {WORKER_KINDS.map((k) => (
              <option key={k} value={k}>
                {k}
              </option>
            ))}
          </select>
          <button type="button" class="btn" onClick={() => setReads(reads + 1)}>
            Refresh
          </button>
        </>
      }
    >
      <p class="hint">
        What the worker's own process wrote to stderr, its last {view?.limit ?? 200} lines, each cut to {view?.line_chars ?? 300} characters, in the service's memory only.
        Redacted: a line that may quote a prompt or an answer is withheld, quoted text and secrets are replaced.
      </p>
      {error ? <p class="error">{error}</p> : null}
      {view && view.lines.length === 0 ? <p class="empty">The {kind} worker has written nothing to stderr since the service started.</p> : null}
      {view && view.lines.length > 0 ? (
        <ol class="log stderr" aria-label={`stderr of the ${kind} worker`}>
          {view.lines.map((line) => (
            <li key={line.seq}>
              <time dateTime={line.at}>{clock(line.at)}</time>
              <span class="hint">#{line.generation}</span>
              <span class="stderr-text">{line.text}</span>
            </li>
          ))}
        </ol>
      ) : null}
    </Section>
  );
}

function Workers({ s, onStderr }: { s: EndpointStatus; onStderr: (kind: WorkerView['kind']) => void }) {
  return (
    <Section title="Workers" id="workers">
      {s.workers.length === 0 ? (
        <p class="empty">No worker has started since the service started.</p>
      ) : (
        <Table head={['Kind', 'State', 'Profile', 'PID', 'GPUs', 'Since', 'Memory plan (forecast vs free)', 'Notes', 'Actions']}>
              {s.workers.map((view) => {
                // Workers the supervisor knows carry their plan and notes; the others only their state.
                const w = view as WorkerView & Partial<SupervisedWorker>;
                const plan = w.plan ?? null;
                return (
                  <tr key={w.kind} data-worker={w.kind}>
                    <th scope="row">{w.kind}</th>
                    <td>
                      <Badge tone={loaded(w.state) ? 'ok' : w.state.startsWith('fail') ? 'bad' : 'idle'}>{w.state}</Badge>
                    </td>
                    <td>{profileName(s, w.profile_id)}</td>
                    <td>{w.pid ?? '—'}</td>
                    <td>{w.gpus.length > 0 ? w.gpus.join(', ') : 'CPU'}</td>
                    <td>{since(w.since)}</td>
                    <td>
                      {plan ? (
                        <ul class="plain">
                          <li>
                            RAM {mib(plan.ram_budget.forecast_mib)} of {mib(plan.ram_budget.available_mib)} available (reserve {mib(plan.ram_budget.reserve_mib)})
                          </li>
                          {plan.gpu_budget.map((g) => (
                            <li key={g.uuid}>
                              {g.uuid}: {mib(g.forecast_mib)} of {mib(g.available_mib)} (free {mib(g.free_mib)}, reserve {mib(g.reserve_mib)})
                            </li>
                          ))}
                          <li class="hint">{plan.fit}</li>
                        </ul>
                      ) : (
                        '—'
                      )}
                    </td>
                    <td>
                      {w.stale ? <div>goes when idle: {w.stale}</div> : null}
                      {w.last ? <div>last: {w.last}</div> : null}
                      {w.active_jobs !== undefined ? <div>{w.active_jobs} active of {w.slots} slots</div> : null}
                    </td>
                    <td>
                      <div class="row-actions">
                      <ActionButton
                        kind="danger"
                        label={`Unload the ${w.kind} worker`}
                        disabled={!loaded(w.state) || (w.active_jobs ?? 0) > 0}
                        title={
                          !loaded(w.state)
                            ? `Only a loaded worker is unloaded (this one is ${w.state}).`
                            : (w.active_jobs ?? 0) > 0
                              ? 'Refused while it answers a request (spec 3.2): wait for its end.'
                              : 'End its process now; the next request loads it again.'
                        }
                        onClick={() => unloadWorker(w.kind)}
                      >
                        Unload
                      </ActionButton>
                      <button type="button" class="btn" aria-label={`stderr of the ${w.kind} worker`} onClick={() => onStderr(w.kind)}>
                        stderr
                      </button>
                      </div>
                    </td>
                  </tr>
                );
              })}
            </Table>
      )}
    </Section>
  );
}

function Queue({ s }: { s: EndpointStatus }) {
  const jobs = [...s.queue.running, ...s.queue.waiting];
  return (
    <Section title="Queue" id="queue">
      {jobs.length === 0 ? (
        <p class="empty">No job is running or waiting.</p>
      ) : (
        <Table head={['Job', 'Kind', 'Profile', 'Phase', 'Position', 'Waited', 'Waits for / holds']}>
              {jobs.map((j) => (
                <tr key={j.job_id}>
                  <td>
                    <code>{j.job_id.slice(0, 8)}</code> <span class="hint">{j.source}</span>
                  </td>
                  <td>{j.kind}</td>
                  <td>{profileName(s, j.profile_id)}</td>
                  <td>
                    {j.phase}
                    {j.progress ? ` (step ${j.progress.step}/${j.progress.steps})` : ''}
                    {j.reason ? <div class="hint">{j.reason}</div> : null}
                  </td>
                  <td>{j.position ?? '—'}</td>
                  <td>{duration(j.waited_ms)}</td>
                  <td>
                    {j.reservation.worker ?? '—'}
                    {j.reservation.gpus.length > 0 ? ` on ${j.reservation.gpus.join(', ')}` : ''}
                  </td>
                </tr>
              ))}
            </Table>
      )}
    </Section>
  );
}

function Resources({ s }: { s: EndpointStatus }) {
  const ram = s.memory.ram;
  return (
    <Section title="GPUs and RAM">
      <Facts
        items={[
          ['RAM available', `${mib(ram.available_mib as number)} (budget ${mib(ram.budget_mib as number)} after a reserve of ${mib(ram.reserve_mib as number)}, limited by ${String(ram.limited_by)})`],
          ['Host RAM', `${mib(ram.host_available_mib as number)} free of ${mib(ram.host_total_mib as number)}`],
          ['cgroup', ram.cgroup_limit_mib == null ? 'no limit' : `${mib(ram.cgroup_usage_mib as number)} used of ${mib(ram.cgroup_limit_mib as number)}`],
          ['GPU probe', s.gpu_probe.source],
        ]}
      />
      {s.gpus.length === 0 ? (
        <p class="empty">No GPU: workers run on the CPU.</p>
      ) : (
        <ul class="gpus">
          {s.gpus.map((g) => {
            const used = g.memoryTotalMiB - g.memoryFreeMiB;
            return (
              <li key={g.uuid}>
                <strong>{g.name}</strong> <code>{g.uuid}</code>
                <meter min={0} max={g.memoryTotalMiB} value={used} aria-label={`${g.name} memory used`} />
                {mib(used)} used of {mib(g.memoryTotalMiB)}; {g.processes.length} processes ({g.processes.filter((p) => !p.own).length} foreign)
              </li>
            );
          })}
        </ul>
      )}
      <p class="hint">{s.memory.note}</p>
    </Section>
  );
}

export function Overview() {
  const s = status.value;
  const [stderrKind, setStderrKind] = useState<WorkerView['kind']>('chat');
  /** Each click on a worker's stderr button reads its lines again. */
  const [stderrAsked, setStderrAsked] = useState(0);
  if (!s) return <p class="loading">Waiting for the service's status…</p>;
  const attention = attentionOf(s, audioPolicy.value);
  return (
    <div class="grid">
      <Section title="Needs attention" id="attention">
        {attention.length === 0 ? (
          <p class="empty">Nothing: every published profile can run, no worker failed, the audio policy is fine.</p>
        ) : (
          <ul class="attention">
            {attention.map((a) => (
              <li key={a.key} class={a.tone}>
                {a.link ? <a href={a.link}>{a.text}</a> : a.text}
                {a.fix ? <div class="fix">{a.fix}</div> : null}
              </li>
            ))}
          </ul>
        )}
      </Section>
      <Listener s={s} />
      <Extensions s={s} />
      <Workers
        s={s}
        onStderr={(kind) => {
          setStderrKind(kind);
          setStderrAsked((n) => n + 1);
          document.getElementById('worker-stderr')?.scrollIntoView({ block: 'start' });
        }}
      />
      <WorkerStderr kind={stderrKind} asked={stderrAsked} onKind={setStderrKind} />
      <Queue s={s} />
      <Section title="Counters">
        <Facts
          items={[
            ['Requests', s.counters.requests],
            ['Refused (4xx)', s.counters.rejected],
            ['Failed (5xx)', s.counters.errors],
            ...Object.entries(s.counters.by_route).map(([route, n]): [string, number] => [route, n]),
          ]}
        />
      </Section>
      <Resources s={s} />
    </div>
  );
}
