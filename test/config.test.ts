// The listeners' connection limits from the environment (src/config.ts): the cap's
// default follows the process's open-file limit, and the first-byte limit never exceeds the
// headers limit; the queue order and its swap bound, a bound above its cap refused at start.
import t from 'tap';
import { SWITCH_MAX_WAIT_CAP_MS } from '../machines/supervisor/index.js';
import { main } from '../src/cli.js';
import { UsageError } from '../src/cli/errors.js';
import { DEFAULT_HTTP, defaultMaxConnections, loadConfig } from '../src/config.js';

const limits = (soft: string) => `Limit                     Soft Limit           Hard Limit           Units\nMax open files            ${soft}                ${soft}                files\n`;

t.test('the connection cap: 2048, or a third of a lower open-file limit', async (t) => {
  t.equal(defaultMaxConnections(limits('20000')), DEFAULT_HTTP.maxConnections);
  t.equal(defaultMaxConnections(limits('1024')), 341, 'both listeners, the workers and the state files share 1024 descriptors');
  t.equal(defaultMaxConnections(limits('unlimited')), DEFAULT_HTTP.maxConnections);
  t.equal(defaultMaxConnections(limits('100')), 64, 'never below 64');
  t.equal(defaultMaxConnections(''), DEFAULT_HTTP.maxConnections, 'no /proc: the default');
});

t.test('the pending budget and the first-byte limit from the environment', async (t) => {
  const http = (env: NodeJS.ProcessEnv) => loadConfig({ stateDir: '/tmp/unused' }, env).http;
  t.match(http({}), { maxPendingConnections: 128, firstByteTimeoutMs: 2000, headersTimeoutMs: 10_000 });
  t.match(http({ SERVICE_DECK_MAX_PENDING_CONNECTIONS: '16', SERVICE_DECK_FIRST_BYTE_TIMEOUT_MS: '700' }), { maxPendingConnections: 16, firstByteTimeoutMs: 700 });
  t.match(http({ SERVICE_DECK_HEADERS_TIMEOUT_MS: '1000', SERVICE_DECK_FIRST_BYTE_TIMEOUT_MS: '5000' }), { firstByteTimeoutMs: 1000 }, 'at most the headers limit');
  t.match(http({ SERVICE_DECK_MAX_CONNECTIONS: '300' }), { maxConnections: 300 });
  t.match(http({ SERVICE_DECK_MAX_CONNECTIONS: '100', SERVICE_DECK_MAX_PENDING_CONNECTIONS: '90' }), { maxPendingConnections: 50 }, 'at most half the cap');
  t.match(http({ SERVICE_DECK_MAX_CONNECTIONS: '4' }), { maxPendingConnections: 2 }, 'the default too');
  t.throws(() => http({ SERVICE_DECK_MAX_PENDING_CONNECTIONS: 'many' }), /SERVICE_DECK_MAX_PENDING_CONNECTIONS/);
});

t.test('the queue order and the swap bound from the environment', async (t) => {
  const scheduling = (env: NodeJS.ProcessEnv) => loadConfig({ stateDir: '/tmp/unused' }, env).scheduling;
  t.same(scheduling({}), { order: 'swap-aware', switchMaxWaitMs: 30_000 });
  t.same(scheduling({ SERVICE_DECK_QUEUE_ORDER: 'strict' }), { order: 'strict', switchMaxWaitMs: 30_000 });
  t.same(scheduling({ SERVICE_DECK_SWITCH_MAX_WAIT_MS: '90000' }), { order: 'swap-aware', switchMaxWaitMs: 90_000 });
  t.throws(() => scheduling({ SERVICE_DECK_QUEUE_ORDER: 'fifo' }), /SERVICE_DECK_QUEUE_ORDER: "fifo" is not one of swap-aware, strict/);
  t.throws(() => scheduling({ SERVICE_DECK_SWITCH_MAX_WAIT_MS: '-1' }), /SERVICE_DECK_SWITCH_MAX_WAIT_MS/);
  t.same(scheduling({ SERVICE_DECK_SWITCH_MAX_WAIT_MS: String(SWITCH_MAX_WAIT_CAP_MS) }), { order: 'swap-aware', switchMaxWaitMs: 120_000 }, 'the cap itself is allowed');
  t.throws(
    () => scheduling({ SERVICE_DECK_SWITCH_MAX_WAIT_MS: '120001' }),
    { name: 'ConfigError', message: 'SERVICE_DECK_SWITCH_MAX_WAIT_MS: 120001 is above 120000, the longest a waiting model switch may be overtaken (milliseconds)' },
    'above the cap: refused, naming the variable and the cap',
  );
});

t.test("the Responses API's kept responses: 64 MiB and an hour by default, 0 MiB keeps none, out of range refused", async (t) => {
  const responses = (env: NodeJS.ProcessEnv) => loadConfig({ stateDir: '/tmp/unused' }, env).responses;
  t.same(responses({}), { memoryMiB: 64, ttlSeconds: 3600 });
  t.same(responses({ SERVICE_DECK_RESPONSES_MEMORY_MIB: '0', SERVICE_DECK_RESPONSES_TTL_S: '2592000' }), { memoryMiB: 0, ttlSeconds: 2_592_000 });
  t.throws(() => responses({ SERVICE_DECK_RESPONSES_MEMORY_MIB: 'lots' }), { name: 'ConfigError', message: /^SERVICE_DECK_RESPONSES_MEMORY_MIB: "lots" is not a whole number of MiB/ });
  t.throws(() => responses({ SERVICE_DECK_RESPONSES_MEMORY_MIB: '65537' }), { name: 'ConfigError', message: /^SERVICE_DECK_RESPONSES_MEMORY_MIB: 65537 is above 65536 MiB/ });
  t.throws(() => responses({ SERVICE_DECK_RESPONSES_TTL_S: '0' }), { name: 'ConfigError', message: /^SERVICE_DECK_RESPONSES_TTL_S: 0 is not between 1 and 2592000 seconds/ });
  t.throws(() => responses({ SERVICE_DECK_RESPONSES_TTL_S: '2592001' }), { name: 'ConfigError', message: /^SERVICE_DECK_RESPONSES_TTL_S: 2592001 is not between 1 and 2592000/ });
});

t.test('serve refuses a swap bound above the cap before it starts, naming the variable', async (t) => {
  const names = ['SERVICE_DECK_SWITCH_MAX_WAIT_MS', 'SERVICE_DECK_BUILD_POLL_MS'] as const;
  const before = names.map((name) => process.env[name]);
  t.teardown(() =>
    names.forEach((name, i) => {
      if (before[i] === undefined) delete process.env[name];
      else process.env[name] = before[i];
    }),
  );
  process.env.SERVICE_DECK_SWITCH_MAX_WAIT_MS = '600000';
  // A bad value that loadConfig reads after the bound: should the bound pass, serve is refused all
  // the same (naming this one), so a regression fails here without starting a service in the test.
  process.env.SERVICE_DECK_BUILD_POLL_MS = 'never';
  // The CLI prints a UsageError's message after `service-deck: ` and exits 2 (run() in src/cli.ts).
  const error = await main(['serve', '--state-dir', t.testdir({})]).then(
    (code) => new Error(`serve returned ${code}`),
    (thrown: unknown) => thrown as Error,
  );
  t.type(error, UsageError);
  t.match(error.message, /^SERVICE_DECK_SWITCH_MAX_WAIT_MS: 600000 is above 120000/);
});

t.test('SERVICE_DECK_MODEL_DIRS: absolute folders, each once, and <state>/models (where pulls land) always among them', async (t) => {
  const dirs = (value?: string) => loadConfig({ stateDir: '/srv/deck' }, value === undefined ? {} : { SERVICE_DECK_MODEL_DIRS: value }).modelDirs;
  t.same(dirs(), ['/srv/deck/models'], 'none given: <state>/models');
  t.same(dirs('/data/gguf:/data/whisper/:/data/gguf'), ['/data/gguf', '/data/whisper', '/srv/deck/models'], 'the named folders, each once, then <state>/models');
  t.same(dirs('/srv/deck/models:/data/gguf'), ['/srv/deck/models', '/data/gguf'], 'named already: kept where it was named');
  t.throws(() => dirs('models'), /SERVICE_DECK_MODEL_DIRS: "models" is not an absolute path/);
});
