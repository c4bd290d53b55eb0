// The operator console: login, then one page per admin task, chosen by the address's hash
// (#/overview, #/profiles, …) so the browser's back button and links work without a server route.
import { render, type FunctionComponent } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { ApiError, message, onSessionLost } from './api.js';
import { loggedOut, login, logout, resumeSession } from './live.js';
import { connection, dismiss, notices, passwordSet, session, status } from './state.js';
import { Audio } from './views/Audio.js';
import { ChatTest } from './views/ChatTest.js';
import { Enhancers } from './views/Enhancers.js';
import { ImageTest } from './views/ImageTest.js';
import { Logs } from './views/Logs.js';
import { Models } from './views/Models.js';
import { Overview } from './views/Overview.js';
import { Profiles } from './views/Profiles.js';
import { Requests } from './views/Requests.js';
import { Settings } from './views/Settings.js';
import { Alert } from './ui.js';
import './style.css';

/** The state charts carry the graph layout (dagre): loaded only when the page is opened. */
function LazyCharts() {
  const [View, setView] = useState<FunctionComponent | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    import('./views/Charts.js').then(
      (module) => setView(() => module.Charts),
      (failure: unknown) => setError(message(failure)),
    );
  }, []);
  if (error) return <p class="error">The state-chart view could not be loaded: {error}</p>;
  return View ? <View /> : <p class="loading">Loading…</p>;
}

const PAGES = [
  { path: 'overview', title: 'Overview', view: Overview },
  { path: 'profiles', title: 'Profiles', view: Profiles },
  { path: 'models', title: 'Models', view: Models },
  { path: 'requests', title: 'Requests', view: Requests },
  { path: 'chat', title: 'Chat test', view: ChatTest },
  { path: 'image', title: 'Image test', view: ImageTest },
  { path: 'enhancers', title: 'Enhancers', view: Enhancers },
  { path: 'audio', title: 'Audio', view: Audio },
  { path: 'charts', title: 'State charts', view: LazyCharts },
  { path: 'logs', title: 'Logs', view: Logs },
  { path: 'settings', title: 'Settings', view: Settings },
] as const;

/** The page the address names: its first segment (#/profiles/<name> is the Profiles page). */
function currentPath(hash: string): string {
  const path = hash.replace(/^#\/?/, '').split('/')[0] ?? '';
  return PAGES.some((p) => p.path === path) ? path : 'overview';
}

function Login() {
  const [password, setPassword] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  return (
    <main class="login">
      <form
        class="card"
        aria-labelledby="login-heading"
        onSubmit={async (event) => {
          event.preventDefault();
          setBusy(true);
          setError(null);
          try {
            await login(password);
            setPassword('');
          } catch (failure) {
            setError(failure instanceof ApiError && failure.status === 401 ? 'Wrong password.' : message(failure));
          } finally {
            setBusy(false);
          }
        }}
      >
        <h1 id="login-heading">Service Deck</h1>
        <p>
          Log in with the operator password (<code>service-deck demo</code> prints it; <code>service-deck set-password</code> sets it).
        </p>
        {passwordSet.value ? null : (
          <p class="error" role="alert">
            No operator password is set yet: run <code>service-deck set-password</code> on the host.
          </p>
        )}
        <label for="password">Operator password</label>
        <input id="password" name="password" type="password" autocomplete="current-password" required value={password} onInput={(e) => setPassword(e.currentTarget.value)} />
        <Alert text={error} />
        <button class="btn primary" type="submit" disabled={busy}>
          Log in
        </button>
      </form>
    </main>
  );
}

function Notices() {
  return (
    <div class="notices" role="status" aria-live="polite">
      {notices.value.map((n) => (
        <div key={n.id} class={`notice ${n.kind}`}>
          <span>{n.text}</span>
          <button type="button" class="btn plain" aria-label="Dismiss message" onClick={() => dismiss(n.id)}>
            ×
          </button>
        </div>
      ))}
    </div>
  );
}

function Shell() {
  // The whole address, so that a page is drawn again when what follows its name changes.
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const onHash = () => setHash(location.hash);
    window.addEventListener('hashchange', onHash);
    return () => window.removeEventListener('hashchange', onHash);
  }, []);
  const path = currentPath(hash);
  const page = PAGES.find((p) => p.path === path) ?? PAGES[0];
  useEffect(() => {
    document.title = `${page.title} · Service Deck`;
  }, [page]);
  const View = page.view;
  const state = status.value?.status;
  return (
    <div class="shell">
      <header class="top">
        <a class="brand" href="#/overview">
          Service Deck
        </a>
        <nav aria-label="Console pages">
          {PAGES.map((p) => (
            <a key={p.path} href={`#/${p.path}`} aria-current={p.path === path ? 'page' : undefined}>
              {p.title}
            </a>
          ))}
        </nav>
        <div class="top-right">
          <span class={`live ${connection.value}`} title="The page's live connection to the service">
            {connection.value === 'live' ? 'live' : connection.value === 'connecting' ? 'connecting…' : 'reconnecting…'}
          </span>
          {state ? <span class={`endpoint ${state}`}>endpoint {state}</span> : null}
          <button type="button" class="btn plain" onClick={() => void logout()}>
            Log out
          </button>
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        <h1 class="page-title">{page.title}</h1>
        <View />
      </main>
      <Notices />
    </div>
  );
}

function App() {
  useEffect(() => {
    onSessionLost(loggedOut);
    void resumeSession();
  }, []);
  if (session.value === 'checking') return <p class="loading">Loading…</p>;
  return session.value === 'in' ? <Shell /> : <Login />;
}

render(<App />, document.getElementById('app')!);
