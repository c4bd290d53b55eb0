// Small shared pieces of the console: an action button that shows it is working and turns a
// refusal into a message, sections, definition lists and formatters.
import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { ApiError, message } from './api.js';
import { notify, status } from './state.js';
import type { Category, ProfileView } from './types.js';

/** An error as the operator reads it: the service's message and, for a refusal, its status and code. */
export function failureText(error: unknown): string {
  const code = error instanceof ApiError && error.code ? ` (${error.status} ${error.code})` : error instanceof ApiError && error.status ? ` (${error.status})` : '';
  return `${message(error)}${code}`;
}

/** Runs an admin call; a refusal (409, 400, 503 …) becomes a visible message with its code. */
export async function attempt<T>(what: string, run: () => Promise<T>): Promise<T | undefined> {
  try {
    return await run();
  } catch (error) {
    notify('error', `${what}: ${failureText(error)}`);
    return undefined;
  }
}

/** A form's submission: busy while it runs, its failure kept as text for the form to show. */
export function useSubmit() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const run = async (work: () => Promise<void>) => {
    setBusy(true);
    setError(null);
    try {
      await work();
    } catch (failed) {
      setError(failureText(failed));
    } finally {
      setBusy(false);
    }
  };
  return { busy, error, setError, run };
}

/** A failure line under a form, announced to screen readers; nothing when there is none. */
export function Alert(props: { text: string | null; testId?: string }) {
  return props.text ? (
    <p class="error" role="alert" data-testid={props.testId}>
      {props.text}
    </p>
  ) : null;
}

/** The profiles of a category (live) and the one chosen for a test: the first that can run, at first. */
export function useProfiles(category: Category) {
  const profiles = (status.value?.profiles ?? []).filter((p) => p.category === category);
  const [profileId, setProfileId] = useState('');
  useEffect(() => {
    if (!profileId && profiles[0]) setProfileId((profiles.find((p) => p.executable) ?? profiles[0]).id);
  }, [profiles.length]);
  return { profiles, profileId, setProfileId };
}

/** The profile a test runs: a test needs no publication, but a profile that cannot run says why. */
export function ProfileSelect(props: { id: string; label: string; profiles: ProfileView[]; value: string; onChange: (id: string) => void }) {
  return (
    <div class="field">
      <label for={props.id}>{props.label}</label>
      <select id={props.id} value={props.value} onChange={(e) => props.onChange(e.currentTarget.value)}>
        {props.profiles.length === 0 ? <option value="">none</option> : null}
        {props.profiles.map((p) => (
          <option key={p.id} value={p.id} disabled={!p.executable}>
            {p.name}
            {p.executable ? '' : ` (cannot run: ${p.blockers.join('; ')})`}
          </option>
        ))}
      </select>
      <small class="hint">Needs no publication.</small>
    </div>
  );
}

export function ActionButton(props: { onClick: () => Promise<unknown>; children: ComponentChildren; disabled?: boolean; kind?: 'primary' | 'danger' | 'plain'; label?: string; title?: string }) {
  const [busy, setBusy] = useState(false);
  return (
    <button
      type="button"
      class={`btn ${props.kind ?? 'plain'}`}
      disabled={busy || props.disabled}
      aria-busy={busy}
      aria-label={props.label}
      title={props.title}
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
  value == null
    ? '—'
    : value >= 2 ** 30
      ? `${(value / 2 ** 30).toFixed(1)} GiB`
      : value >= 2 ** 20
        ? `${(value / 2 ** 20).toFixed(1)} MiB`
        : value >= 1024
          ? `${Math.round(value / 1024)} KiB`
          : `${value} bytes`;
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

/** What follows the page's name in the address (#/profiles/<name> → <name>), decoded; '' when nothing does. */
export function addressTarget(): string {
  const rest = location.hash.replace(/^#\/?/, '').split('/').slice(1).join('/');
  try {
    return decodeURIComponent(rest);
  } catch {
    // Not a valid escape: the text as it stands.
    return rest;
  }
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
