// The state-chart inspector: each running actor (listener, supervisor, queue, each worker, the
// audio policies) drawn from its machine definition as the service runs it (GET /api/v1/machines,
// loaded once), its active states highlighted and its last events listed as the event stream
// brings them (the `actors` signal). Works offline: nothing here leaves the service's origin. An
// event shows only its type, its sender and its time: no payload (prompt, audio, image or secret)
// reaches this view.
import { useComputed, useSignal } from '@preact/signals';
import { useEffect, useMemo, useRef } from 'preact/hooks';
import type { ActorView, MachineView } from '../../../src/system/observe/console.types.js';
import { api, message } from '../api.js';
import { Chart } from '../charts/Chart.js';
import { layoutMachine, type ChartLayout } from '../charts/layout.js';
import { actors } from '../state.js';
import '../charts/charts.css';

const GROUPS = ['Listener', 'Supervisor', 'Queue', 'Workers', 'Audio policies', 'Other'] as const;
type Group = (typeof GROUPS)[number];

function groupOf(actor: ActorView): Group {
  const id = actor.id.toLowerCase();
  const machine = actor.machine.toLowerCase();
  if (machine === 'listener' || id === 'listener') return 'Listener';
  if (machine === 'supervisor' || id === 'supervisor') return 'Supervisor';
  if (machine === 'queue' || id === 'queue') return 'Queue';
  if (machine.startsWith('audiopolicy') || id.startsWith('audio')) return 'Audio policies';
  if (machine.endsWith('worker') || id.startsWith('worker')) return 'Workers';
  return 'Other';
}

/** A snapshot value as one line: `stopping.draining.bounded`, `active(checks.idle, gpuWatch.watching)`. */
function stateText(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value === null || typeof value !== 'object') return String(value);
  const parts = Object.entries(value as Record<string, unknown>).map(([key, child]) => {
    if (typeof child === 'string') return `${key}.${child}`;
    if (child && typeof child === 'object' && Object.keys(child).length === 1) return `${key}.${stateText(child)}`;
    return Object.keys(child ?? {}).length === 0 ? key : `${key}(${stateText(child)})`;
  });
  return parts.join(', ');
}

const STATUS_TEXT: Record<ActorView['status'], string> = { active: 'running', done: 'done', error: 'failed', stopped: 'stopped' };

const timeFormat = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
function timeText(at: string): string {
  const date = new Date(at);
  if (Number.isNaN(date.getTime())) return at;
  return `${timeFormat.format(date)}.${String(date.getMilliseconds()).padStart(3, '0')}`;
}

/** One layout per machine definition object: a definition is laid out once, however often the actor changes. */
const layouts = new WeakMap<MachineView, ChartLayout>();
function layoutOf(machine: MachineView): ChartLayout {
  let layout = layouts.get(machine);
  if (!layout) {
    layout = layoutMachine(machine);
    layouts.set(machine, layout);
  }
  return layout;
}

type Machines = Record<string, MachineView>;

/**
 * The actor's active ids before its latest update (null until the page has seen two of that
 * actor): with them the chart tells which of several transitions on the same event was taken.
 */
function usePreviousActive(actor: ActorView): ReadonlySet<string> | null {
  const seen = useRef<{ id: string; active: string[]; previous: ReadonlySet<string> | null } | null>(null);
  const last = seen.current;
  if (!last || last.id !== actor.id) seen.current = { id: actor.id, active: actor.active, previous: null };
  else if (last.active !== actor.active) seen.current = { id: actor.id, active: actor.active, previous: new Set(last.active) };
  return seen.current!.previous;
}

function ActorList({ selected, onSelect }: { selected: string | null; onSelect: (id: string) => void }) {
  const grouped = useComputed(() => {
    const byGroup = new Map<Group, ActorView[]>();
    for (const actor of actors.value.values()) {
      const group = groupOf(actor);
      byGroup.set(group, [...(byGroup.get(group) ?? []), actor]);
    }
    return GROUPS.flatMap((group) => {
      const list = byGroup.get(group);
      return list ? [{ group, list: list.sort((a, b) => a.id.localeCompare(b.id)) }] : [];
    });
  });
  if (grouped.value.length === 0) {
    return <p class="charts-message">No actors yet: they appear as the event stream reports them.</p>;
  }
  return (
    <>
      {grouped.value.map(({ group, list }) => (
        <section key={group} aria-label={group}>
          <h3>{group}</h3>
          <ul>
            {list.map((actor) => (
              <li key={actor.id}>
                <button type="button" class="charts-actor" aria-pressed={actor.id === selected} onClick={() => onSelect(actor.id)}>
                  <span class="charts-actor-id">{actor.id}</span>
                  <span class="charts-actor-meta">
                    {actor.machine} · <span class={`charts-status--${actor.status}`}>{STATUS_TEXT[actor.status]}</span>
                  </span>
                  <span class="charts-actor-state">{stateText(actor.value)}</span>
                </button>
              </li>
            ))}
          </ul>
        </section>
      ))}
    </>
  );
}

function Events({ actor }: { actor: ActorView }) {
  const newestFirst = [...actor.events].reverse();
  return (
    <section class="charts-events" aria-labelledby="charts-events-title">
      <h3 id="charts-events-title">Last events of {actor.id}</h3>
      {newestFirst.length === 0 ? (
        <p class="charts-message">No events received yet.</p>
      ) : (
        <ol reversed>
          {newestFirst.map((event, i) => (
            <li key={`${event.at} ${event.type} ${newestFirst.length - i}`} class="charts-event">
              <span class="charts-event-type">{event.type}</span>
              <time dateTime={event.at}>{timeText(event.at)}</time>
              <span class="charts-event-source">{event.source ? `from ${event.source}` : 'from outside the actors'}</span>
            </li>
          ))}
        </ol>
      )}
    </section>
  );
}

function Inspector({ actor, machines }: { actor: ActorView; machines: Machines }) {
  const machine = machines[actor.machine];
  const layout = useMemo(() => (machine ? layoutOf(machine) : null), [machine]);
  const active = useMemo(() => new Set(actor.active), [actor.active]);
  const previous = usePreviousActive(actor);
  const recent = actor.events[actor.events.length - 1]?.type ?? null;
  const ended = actor.status !== 'active';
  return (
    <>
      <div class="charts-main">
        <div class="charts-heading">
          <h2>
            {actor.id} <small>({actor.machine})</small>
          </h2>
          <span class="charts-now" aria-live="polite">
            {ended ? 'last state' : 'now'}: {stateText(actor.value)}
          </span>
        </div>
        {ended && (
          <p class="charts-message charts-message--ended" role="status">
            This actor has {actor.status === 'error' ? 'failed' : actor.status === 'done' ? 'finished' : 'stopped'} (at {timeText(actor.updated_at)}): the chart shows
            its last state.
          </p>
        )}
        {machine && layout ? (
          <div class="charts-canvas">
            <Chart machine={machine} layout={layout} active={active} recent={ended ? null : recent} previous={previous} />
          </div>
        ) : (
          <p class="charts-message charts-message--error">The service sent no definition for the machine “{actor.machine}”.</p>
        )}
      </div>
      <Events actor={actor} />
    </>
  );
}

export function Charts() {
  const machines = useSignal<Machines | null>(null);
  const failure = useSignal<string | null>(null);
  const attempt = useSignal(0);
  const chosen = useSignal<string | null>(null);

  useEffect(() => {
    const controller = new AbortController();
    failure.value = null;
    api<{ machines: Machines }>('GET', '/api/v1/machines', undefined, { signal: controller.signal })
      .then((body) => {
        machines.value = body.machines;
      })
      .catch((error: unknown) => {
        if (!controller.signal.aborted) failure.value = message(error);
      });
    return () => controller.abort();
  }, [attempt.value]);

  // The chosen actor, or the first one listed (the supervisor, the root actor, when it is there).
  const selected = useComputed(() => {
    const all = actors.value;
    if (chosen.value !== null && all.has(chosen.value)) return chosen.value;
    if (all.has('supervisor')) return 'supervisor';
    return all.keys().next().value ?? null;
  });
  const actor = selected.value === null ? undefined : actors.value.get(selected.value);

  return (
    <div class="charts-view">
      <nav class="charts-actors" aria-label="Running actors">
        <ActorList selected={selected.value} onSelect={(id) => (chosen.value = id)} />
      </nav>
      {failure.value !== null ? (
        <div class="charts-main">
          <p class="charts-message charts-message--error" role="alert">
            The machine definitions could not be loaded: {failure.value}{' '}
            <button type="button" onClick={() => attempt.value++}>
              Try again
            </button>
          </p>
        </div>
      ) : machines.value === null ? (
        <p class="charts-main charts-message" role="status">
          Loading the machine definitions…
        </p>
      ) : actor ? (
        <Inspector actor={actor} machines={machines.value} />
      ) : (
        <p class="charts-main charts-message">Pick an actor to see its state chart.</p>
      )}
    </div>
  );
}
