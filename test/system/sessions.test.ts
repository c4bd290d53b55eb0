// The login throttle on a simulated clock: an attempt is counted before its
// password is checked and taken back when it was right; every loopback address is one source; a
// flood from many sources makes each further attempt wait a short backoff, not a lock; a device
// that logged in before is counted alone, so it gets through a block that others caused. Every
// attempt counts globally, device cookie or not; a device id the server does not know counts
// against its source; and all attempts together stay under the ceiling, however many device
// cookies someone holds (20 harvested cookies gave 200 checked guesses).
import t from 'tap';
import { ApiError } from '../../src/errors.js';
import {
  GLOBAL_ATTEMPTS,
  GLOBAL_BACKOFF_MS,
  GLOBAL_CEILING,
  DEVICE_VALUE,
  LOGIN_ATTEMPTS,
  LOGIN_WINDOW_MS,
  loginSource,
  SessionStore,
  type PasswordCheck,
} from '../../src/system/sessions.js';

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

t.test('every attempt counts globally: guesses with device cookies bring on the backoff for everyone else', async (t) => {
  const { store } = clocked();
  const devices = Math.ceil(GLOBAL_ATTEMPTS / LOGIN_ATTEMPTS);
  for (let d = 0; d < devices; d += 1) {
    for (let i = 0; i < LOGIN_ATTEMPTS; i += 1) t.equal(store.loginAttempt({ source: 'loopback', device: `device-${d}` }), 0);
  }
  t.equal(store.loginAttempt({ source: '192.0.2.1' }), GLOBAL_BACKOFF_MS / 1000, `after ${devices * LOGIN_ATTEMPTS} guesses with device cookies a fresh source waits the backoff`);
});

t.test('the ceiling bounds all attempts together, however many device cookies guess', async (t) => {
  const { store, advance } = clocked();
  // 20 harvested device cookies, 10 guesses each: a guessing attack.
  let checked = 0;
  for (let i = 0; i < LOGIN_ATTEMPTS; i += 1) {
    for (let d = 0; d < 20; d += 1) if (store.loginAttempt({ source: 'loopback', device: `harvested-${d}` }) === 0) checked += 1;
  }
  t.equal(checked, GLOBAL_CEILING, `${checked} of 200 guesses may be checked in a window (the ceiling, ${GLOBAL_CEILING})`);
  t.equal(store.loginAttempt({ source: 'loopback', device: 'operator' }), LOGIN_WINDOW_MS / 1000, 'past the ceiling even a device that never guessed waits for the window');
  t.equal(store.loginAttempt({ source: '192.0.2.1' }), LOGIN_WINDOW_MS / 1000, 'and so does every source');
  advance(LOGIN_WINDOW_MS);
  t.equal(store.loginAttempt({ source: 'loopback', device: 'operator' }), 0, 'a new window, a new count');
});

t.test("a flood without known devices, a whole window long, never reaches the ceiling: the operator's device gets through", async (t) => {
  const { store, advance } = clocked();
  let checked = 0;
  for (let ms = 0; ms < LOGIN_WINDOW_MS - 100; ms += 100) {
    for (let s = 0; s < 5; s += 1) if (store.loginAttempt({ source: `10.${ms % 250}.${s}.1` }) === 0) checked += 1;
    advance(100);
  }
  t.ok(checked > GLOBAL_ATTEMPTS && checked <= GLOBAL_ATTEMPTS + LOGIN_WINDOW_MS / GLOBAL_BACKOFF_MS, `the flood had ${checked} attempts checked: the budget, then one per backoff`);
  t.ok(checked + 2 * LOGIN_ATTEMPTS <= GLOBAL_CEILING, 'below the ceiling by two devices\' budgets');
  for (let i = 0; i < LOGIN_ATTEMPTS; i += 1) t.equal(store.loginAttempt({ source: 'loopback', device: 'operator' }), 0, `the operator's device is checked (${i + 1})`);
});

/** The secrets as checkPassword asks them: one right password, under the stamp `stamp-now`. */
function secrets(): PasswordCheck & { checked: number } {
  return {
    checked: 0,
    hasPassword: true,
    passwordStamp: 'stamp-now',
    refresh: async () => undefined,
    async passwordMatches(password) {
      this.checked += 1;
      return password === 'right';
    },
  };
}

const outcome = (check: Promise<void>) =>
  check.then(
    () => 'in',
    (error: unknown) => (error instanceof ApiError ? `${error.statusCode} ${error.code}` : String(error)),
  );

t.test('a device the server knows carries the mark of the password in force; any other device is unknown', async (t) => {
  const device = SessionStore.newDevice('stamp-now');
  t.match(device, DEVICE_VALUE);
  t.ok(SessionStore.knowsDevice(device, 'stamp-now'), 'made under the password in force: known');
  t.notOk(SessionStore.knowsDevice(device, 'stamp-next'), 'after a password change: revoked');
  t.notOk(SessionStore.knowsDevice(device, null), 'no password: nothing is known');
  const [id] = device.split('.');
  t.notOk(SessionStore.knowsDevice(`${id}.${'A'.repeat(43)}`, 'stamp-now'), 'an id with a mark of its own making: unknown');
  t.notOk(SessionStore.knowsDevice(id ?? '', 'stamp-now'), 'a bare id, as cookies were before: unknown');
});

t.test('a device the server does not know (never issued, or revoked) counts against its source', async (t) => {
  const { store } = clocked();
  const check = secrets();
  for (let i = 0; i < LOGIN_ATTEMPTS; i += 1) t.equal(await outcome(store.checkPassword(check, { source: 'loopback' }, `guess-${i}`)), '401 invalid_password');
  t.equal(await outcome(store.checkPassword(check, { source: 'loopback' }, 'right')), '429 too_many_attempts', 'the loopback source is blocked');
  const unknown = [
    ['revoked by a password change', SessionStore.newDevice('stamp-before')],
    ['never issued', `${SessionStore.newDevice('stamp-now').split('.')[0] ?? ''}.${'A'.repeat(43)}`],
  ] as const;
  for (const [what, device] of unknown) {
    t.equal(await outcome(store.checkPassword(check, { source: 'loopback', device }, 'guess')), '429 too_many_attempts', `${what}: no budget of its own`);
  }
  t.equal(check.checked, LOGIN_ATTEMPTS, 'no password was checked with them');
  t.equal(await outcome(store.checkPassword(check, { source: 'loopback', device: SessionStore.newDevice('stamp-now') }, 'right')), 'in', "the operator's known device gets through");
});
