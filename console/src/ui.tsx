// Small shared pieces of the console: an action button that shows it is working and turns a
// refusal into a message, sections, definition lists and formatters.
import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import { ApiError, message } from './api.js';
import { notify } from './state.js';

/** Runs an admin call; a refusal (409, 400, 503 …) becomes a visible message with its code. */
export async function attempt<T>(what: string, run: () => Promise<T>): Promise<T | undefined> {
  try {
    return await run();
  } catch (error) {
    const code = error instanceof ApiError && error.code ? ` (${error.status} ${error.code})` : error instanceof ApiError && error.status ? ` (${error.status})` : '';
    notify('error', `${what}: ${message(error)}${code}`);
    return undefined;
  }
}

export function ActionButton(props: { onClick: () => Promise<unknown>; children: ComponentChildren; disabled?: boolean; kind?: 'primary' | 'danger' | 'plain'; label?: string }) {
  const [busy, setBusy] = useState(false);
  return (
    <button
      type="button"
      class={`btn ${props.kind ?? 'plain'}`}
      disabled={busy || props.disabled}
      aria-busy={busy}
      aria-label={props.label}
      onClick={async () => {
        setBusy(true);
        try {
          await props.onClick();
        } finally {
          setBusy(false);
        }
      }}
    >
      {props.children}
    </button>
  );
}

export function Section(props: { title: string; id?: string; children: ComponentChildren; actions?: ComponentChildren }) {
  const headingId = `${props.id ?? props.title.toLowerCase().replace(/[^a-z0-9]+/g, '-')}-heading`;
  return (
    <section class="card" aria-labelledby={headingId} id={props.id}>
      <header class="card-head">
        <h2 id={headingId}>{props.title}</h2>
        {props.actions ? <div class="card-actions">{props.actions}</div> : null}
      </header>
      {props.children}
    </section>
  );
}

export function Facts(props: { items: Array<[string, ComponentChildren]> }) {
  return (
    <dl class="facts">
      {props.items.map(([term, value]) => (
        <div key={term}>
          <dt>{term}</dt>
          <dd>{value ?? '—'}</dd>
        </div>
      ))}
    </dl>
  );
}

export const mib = (value: number | null | undefined): string => (value == null ? '—' : value >= 10240 ? `${(value / 1024).toFixed(1)} GiB` : `${value} MiB`);
export const bytes = (value: number | null | undefined): string =>
  value == null ? '—' : value >= 2 ** 30 ? `${(value / 2 ** 30).toFixed(1)} GiB` : value >= 2 ** 20 ? `${(value / 2 ** 20).toFixed(1)} MiB` : `${Math.round(value / 1024)} KiB`;
export const duration = (ms: number | null | undefined): string =>
  ms == null ? '—' : ms < 1000 ? `${Math.round(ms)} ms` : ms < 120_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 60_000)} min`;
export const since = (iso: string | null | undefined): string => {
  if (!iso) return '—';
  const ms = Date.now() - Date.parse(iso);
  return Number.isFinite(ms) ? `${duration(Math.max(0, ms))} ago` : iso;
};
export const clock = (iso: string | number): string => new Date(iso).toLocaleTimeString();

export function Badge(props: { tone: 'ok' | 'warn' | 'bad' | 'idle'; children: ComponentChildren }) {
  return <span class={`badge ${props.tone}`}>{props.children}</span>;
}

/** A table with a header row of column names; rows are the children. */
export function Table(props: { head: string[]; children: ComponentChildren; label?: string }) {
  return (
    <div class="table-wrap">
      <table aria-label={props.label}>
        <thead>
          <tr>
            {props.head.map((name) => (
              <th key={name} scope="col">
                {name}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>{props.children}</tbody>
      </table>
    </div>
  );
}
