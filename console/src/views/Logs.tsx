// The service's recent log lines (pino's, already redacted: no token, prompt or answer is ever
// logged) as the event stream brings them, with a level filter, a text filter and a pause.
import { useMemo, useState } from 'preact/hooks';
import { logs } from '../state.js';
import { clock } from '../ui.js';

const LEVELS: Array<[number, string]> = [
  [10, 'trace'],
  [20, 'debug'],
  [30, 'info'],
  [40, 'warn'],
  [50, 'error'],
  [60, 'fatal'],
];
const levelName = (level: number) => [...LEVELS].reverse().find(([n]) => level >= n)?.[1] ?? String(level);

/** A field's value as a cell shows it: text as it is, a number rounded, anything else as compact JSON. */
function text(value: unknown): string {
  if (typeof value === 'string') return value;
  if (typeof value === 'number') return Number.isInteger(value) ? String(value) : value.toFixed(1);
  return JSON.stringify(value) ?? '';
}

/** The first of `keys` that a line has (the service's lines name one thing differently in places: `profile`, `profile_id`). */
const first =
  (...keys: string[]) =>
  (fields: Record<string, unknown>): string => {
    const key = keys.find((k) => fields[k] !== undefined);
    return key === undefined ? '' : text(fields[key]);
  };

/** The columns beside time, level and message, and the fields each shows. */
const COLUMNS: Array<{ title: string; keys: string[]; value: (fields: Record<string, unknown>) => string; numeric?: boolean }> = [
  { title: 'Source', keys: ['listener', 'worker', 'kind', 'component'], value: first('listener', 'worker', 'kind', 'component') },
  { title: 'Profile', keys: ['profile', 'profile_id', 'profileId'], value: first('profile', 'profile_id', 'profileId') },
  { title: 'Job', keys: ['job', 'job_id', 'jobId'], value: first('job', 'job_id', 'jobId') },
  {
    title: 'Request',
    keys: ['method', 'route'],
    value: (fields) => [fields.method, fields.route].filter((v) => v !== undefined).map(text).join(' '),
  },
  { title: 'Status', keys: ['status', 'statusCode', 'code'], value: first('status', 'statusCode', 'code') },
  { title: 'ms', keys: ['duration_ms', 'ms', 'elapsed_ms'], value: first('duration_ms', 'ms', 'elapsed_ms'), numeric: true },
];

/** The fields without a column of their own, as `key=value` pairs; a column shows only the first of its keys, so the others stay here. */
function others(fields: Record<string, unknown>): Array<[string, string]> {
  const inColumns = new Set<string>();
  for (const column of COLUMNS) {
    const keys = column.keys.filter((key) => fields[key] !== undefined);
    for (const key of column.title === 'Request' ? keys : keys.slice(0, 1)) inColumns.add(key);
  }
  return Object.entries(fields)
    .filter(([key]) => !inColumns.has(key))
    .map(([key, value]) => [key, text(value)]);
}

export function Logs() {
  const [minimum, setMinimum] = useState(30);
  const [filter, setFilter] = useState('');
  const [paused, setPaused] = useState<readonly (typeof logs.value)[number][] | null>(null);
  const source = paused ?? logs.value;
  const shown = useMemo(() => {
    const needle = filter.trim().toLowerCase();
    return source
      .filter((line) => line.level >= minimum)
      .filter((line) => !needle || `${line.msg} ${JSON.stringify(line.fields)}`.toLowerCase().includes(needle))
      .slice(-500)
      .reverse();
  }, [source, minimum, filter]);
  return (
    <section class="card" aria-label="Log lines">
      <form class="inline" onSubmit={(e) => e.preventDefault()}>
        <label for="log-level">Level</label>
        <select id="log-level" value={String(minimum)} onChange={(e) => setMinimum(Number(e.currentTarget.value))}>
          {LEVELS.map(([n, name]) => (
            <option key={n} value={String(n)}>
              {name} and above
            </option>
          ))}
        </select>
        <label for="log-filter">Contains</label>
        <input id="log-filter" type="search" value={filter} onInput={(e) => setFilter(e.currentTarget.value)} />
        <button type="button" class="btn" aria-pressed={paused !== null} onClick={() => setPaused(paused ? null : logs.value)}>
          {paused ? 'Resume' : 'Pause'}
        </button>
        <span class="hint">
          {shown.length} of {logs.value.length} lines, newest first
        </span>
      </form>
      <div class="log-scroll">
        <table class="log" aria-live="off">
          <thead>
            <tr>
              <th scope="col">Time</th>
              <th scope="col">Level</th>
              <th scope="col">Message</th>
              {COLUMNS.map((column) => (
                <th key={column.title} scope="col" class={column.numeric ? 'num' : undefined}>
                  {column.title}
                </th>
              ))}
              <th scope="col">Other fields</th>
            </tr>
          </thead>
          <tbody>
            {shown.map((line) => (
              <tr key={line.seq} class={`lvl-${levelName(line.level)}`} data-level={levelName(line.level)}>
                <td class="time">
                  <time dateTime={new Date(line.time).toISOString()}>{clock(line.time)}</time>
                </td>
                <td class="lvl">{levelName(line.level)}</td>
                <td class="log-msg">{line.msg}</td>
                {COLUMNS.map((column) => (
                  <td key={column.title} data-column={column.title} class={column.numeric ? 'num' : undefined}>
                    {column.value(line.fields)}
                  </td>
                ))}
                <td class="fields">
                  {others(line.fields).map(([key, value]) => (
                    <span key={key} class="field">
                      <span class="key">{key}</span>={value}
                    </span>
                  ))}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}
