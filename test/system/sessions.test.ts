// The login throttle on a simulated clock: an attempt is counted before its
// password is checked and taken back when it was right; every loopback address is one source; a
// flood from many sources makes each further attempt wait a short backoff, not a lock; a device
// that logged in before is counted alone, so it gets through a block that others caused.
import t from 'tap';
import { GLOBAL_ATTEMPTS, GLOBAL_BACKOFF_MS, LOGIN_ATTEMPTS, LOGIN_WINDOW_MS, loginSource, SessionStore } from '../../src/system/sessions.js';

function clocked() {
  let now = 1_000_000;
  const store = new SessionStore(() => now);
  return { store, advance: (ms: number) => (now += ms) };
}

t.test('every loopback address is one source; other addresses are their own', async (t) => {
  t.same(['127.0.0.1', '127.0.0.2', '127.1.2.3', '::1', '::ffff:127.0.0.1'].map(loginSource), Array(5).fill('loopback'));
  t.equal(loginSource('::ffff:10.0.0.7'), '10.0.0.7', 'an IPv4-mapped address is its IPv4 address');
  t.equal(loginSource('10.0.0.7'), '10.0.0.7');
  t.equal(loginSource('2001:db8::1'), '2001:db8::1');
});

t.test('a source is blocked after its attempts, counted before any check; a right password takes its attempt back', async (t) => {
  const { store, advance } = clocked();
  const client = { source: 'loopback' };
  for (let i = 0; i < LOGIN_ATTEMPTS; i += 1) t.equal(store.loginAttempt(client), 0, `attempt ${i + 1} may be checked`);
  t.equal(store.loginAttempt(client), LOGIN_WINDOW_MS / 1000, 'the next waits for the whole window');
  t.equal(store.loginAttempt({ source: '10.0.0.1' }), 0, 'another source is not blocked');
  advance(LOGIN_WINDOW_MS);
  t.equal(store.loginAttempt(client), 0, 'a new window, a new count');
  store.loginTakenBack(client);
  for (let i = 0; i < LOGIN_ATTEMPTS; i += 1) {
    t.equal(store.loginAttempt(client), 0);
    store.loginTakenBack(client);
  }
  t.equal(store.loginAttempt(client), 0, 'right passwords are not counted against the source');
});

t.test('a flood from many sources: a short global backoff, not a lock', async (t) => {
  const { store, advance } = clocked();
  for (let i = 0; i < GLOBAL_ATTEMPTS; i += 1) t.equal(store.loginAttempt({ source: `10.0.${i}.1` }), 0);
  const fresh = { source: '192.0.2.1' };
  t.equal(store.loginAttempt(fresh), GLOBAL_BACKOFF_MS / 1000, 'a source never seen waits the backoff');
  advance(GLOBAL_BACKOFF_MS);
  t.equal(store.loginAttempt(fresh), 0, 'after the backoff one attempt is checked');
  t.equal(store.loginAttempt({ source: '192.0.2.2' }), GLOBAL_BACKOFF_MS / 1000, 'and the next waits again');
  t.equal(store.loginAttempt({ source: 'loopback', device: 'device-a' }), 0, 'a known device does not wait');
  advance(LOGIN_WINDOW_MS);
  t.equal(store.loginAttempt({ source: '192.0.2.2' }), 0, 'the flood over, no backoff');
});

t.test('a known device gets through a block of its source, and is blocked by its own guesses only', async (t) => {
  const { store } = clocked();
  for (let i = 0; i < LOGIN_ATTEMPTS; i += 1) store.loginAttempt({ source: 'loopback' });
  t.ok(store.loginAttempt({ source: 'loopback' }) > 0, 'the loopback source is blocked');
  const device = { source: 'loopback', device: 'device-a' };
  t.equal(store.loginAttempt(device), 0, 'the device that logged in before is checked');
  store.loginTakenBack(device);
  for (let i = 0; i < LOGIN_ATTEMPTS; i += 1) t.equal(store.loginAttempt({ source: 'loopback', device: 'device-b' }), 0);
  t.ok(store.loginAttempt({ source: 'loopback', device: 'device-b' }) > 0, 'a device that guesses is blocked itself');
  t.equal(store.loginAttempt(device), 0, 'the other device still is not');
});
