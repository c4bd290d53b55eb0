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
      <ol class="log" aria-live="off">
        {shown.map((line) => (
          <li key={line.seq} class={`lvl-${levelName(line.level)}`} data-level={levelName(line.level)}>
            <time dateTime={new Date(line.time).toISOString()}>{clock(line.time)}</time>
            <span class="lvl">{levelName(line.level)}</span>
            <span class="msg">{line.msg}</span>
            {Object.keys(line.fields).length > 0 ? <code class="fields">{JSON.stringify(line.fields)}</code> : null}
          </li>
        ))}
      </ol>
    </section>
  );
}
