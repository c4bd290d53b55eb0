// The operator's own settings: the password (every other session ends; this page stays logged in
// with the fresh session the answer sets), the API token (rotated, shown once, with a copy
// button) and the host's facts for the hardware view.
import { useEffect, useState } from 'preact/hooks';
import type { HostView } from '../../../src/system/observe/console.types.js';
import { ApiError, api, message, setCsrfToken } from '../api.js';
import { notify } from '../state.js';
import { Alert, ActionButton, Facts, Section, attempt, bytes, clock } from '../ui.js';

function PasswordChange() {
  const [current, setCurrent] = useState('');
  const [next, setNext] = useState('');
  const [repeat, setRepeat] = useState('');
  const [error, setError] = useState<string | null>(null);
  return (
    <Section title="Operator password">
      <form
        onSubmit={async (event) => {
          event.preventDefault();
          setError(null);
          if (next !== repeat) {
            setError('The two new passwords differ.');
            return;
          }
          try {
            const { csrfToken } = await api<{ csrfToken: string }>('POST', '/api/v1/password', { current, password: next }, { auth: false });
            setCsrfToken(csrfToken);
            setCurrent('');
            setNext('');
            setRepeat('');
            notify('info', 'Password changed: every other session is logged out.');
          } catch (failure) {
            setError(failure instanceof ApiError && failure.status === 401 ? 'The current password is wrong.' : message(failure));
          }
        }}
      >
        <div class="field">
          <label for="pw-current">Current password</label>
          <input id="pw-current" type="password" autocomplete="current-password" required value={current} onInput={(e) => setCurrent(e.currentTarget.value)} />
        </div>
        <div class="field">
          <label for="pw-new">New password</label>
          <input id="pw-new" type="password" autocomplete="new-password" minLength={8} required value={next} onInput={(e) => setNext(e.currentTarget.value)} />
          <small class="hint">At least 8 characters.</small>
        </div>
        <div class="field">
          <label for="pw-repeat">New password again</label>
          <input id="pw-repeat" type="password" autocomplete="new-password" minLength={8} required value={repeat} onInput={(e) => setRepeat(e.currentTarget.value)} />
        </div>
        <Alert text={error} />
        <button class="btn primary" type="submit">
          Change password
        </button>
      </form>
    </Section>
  );
}

function TokenRotation() {
  const [token, setToken] = useState<string | null>(null);
  return (
    <Section title="API token">
      <p>Clients send it as <code>Authorization: Bearer …</code>. A new token takes effect at once; the old one stops working.</p>
      <ActionButton
        kind="danger"
        onClick={async () => {
          if (!window.confirm('Rotate the API token? Every client needs the new one.')) return;
          const answer = await attempt('Token rotation', () => api<{ token: string }>('POST', '/api/v1/token/rotate', {}));
          if (answer) setToken(answer.token);
        }}
      >
        Rotate token
      </ActionButton>
      {token ? (
        <div class="token" role="alert">
          <label for="new-token">New API token (shown once: copy it now)</label>
          <div class="inline">
            <input id="new-token" readOnly value={token} onFocus={(e) => e.currentTarget.select()} />
            <ActionButton
              onClick={async () => {
                try {
                  await navigator.clipboard.writeText(token);
                  notify('info', 'Token copied.');
                } catch {
                  notify('error', 'The browser did not allow copying: select the field and copy it.');
                }
              }}
            >
              Copy
            </ActionButton>
            <button type="button" class="btn" onClick={() => setToken(null)}>
              Hide
            </button>
          </div>
        </div>
      ) : null}
    </Section>
  );
}

function Host() {
  const [host, setHost] = useState<HostView | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    api<HostView>('GET', '/api/v1/host').then(setHost, (failure: unknown) => setError(message(failure)));
  }, []);
  return (
    <Section title="Hardware">
      {error ? <p class="error">{error}</p> : null}
      {host ? (
        <>
          <Facts
            items={[
              ['System', host.os ? `${host.os.distro} ${host.os.release} (${host.os.platform} ${host.os.arch}, kernel ${host.os.kernel})` : null],
              ['Host', host.os?.hostname],
              ['CPU', host.cpu ? `${host.cpu.manufacturer} ${host.cpu.brand}: ${host.cpu.physicalCores} cores, ${host.cpu.cores} threads${host.cpu.speedGHz ? `, ${host.cpu.speedGHz} GHz` : ''}` : null],
              ['RAM', host.memory ? `${bytes(host.memory.availableBytes)} available of ${bytes(host.memory.totalBytes)}` : null],
              ['Disk (state directory)', host.disk ? `${bytes(host.disk.availableBytes)} free of ${bytes(host.disk.sizeBytes)} on ${host.disk.mount}` : null],
              ['Node.js', host.node],
              ['Read at', clock(host.read_at)],
            ]}
          />
          {host.unavailable.length > 0 ? <p class="hint">Could not be read this time: {host.unavailable.join(', ')}.</p> : null}
          {host.graphics.length === 0 ? (
            <p class="empty">No graphics controller reported.</p>
          ) : (
            <ul class="plain">
              {host.graphics.map((g, i) => (
                <li key={i}>
                  {g.vendor} {g.model}
                  {g.vramMiB ? `, ${g.vramMiB} MiB` : ''}
                  {g.driverVersion ? `, driver ${g.driverVersion}` : ''}
                </li>
              ))}
            </ul>
          )}
          <p class="hint">GPU memory and processes for scheduling come from nvidia-smi (Overview); these are facts about the host.</p>
        </>
      ) : !error ? (
        <p class="loading">Reading…</p>
      ) : null}
    </Section>
  );
}

export function Settings() {
  return (
    <div class="grid two">
      <PasswordChange />
      <TokenRotation />
      <Host />
    </div>
  );
}
