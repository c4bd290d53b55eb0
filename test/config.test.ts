// The listeners' connection limits from the environment (src/config.ts): the cap's
// default follows the process's open-file limit, and the first-byte limit never exceeds the
// headers limit; the queue order and its swap bound.
import t from 'tap';
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
  t.throws(() => http({ SERVICE_DECK_MAX_PENDING_CONNECTIONS: 'many' }), /SERVICE_DECK_MAX_PENDING_CONNECTIONS/);
});

t.test('the queue order and the swap bound from the environment', async (t) => {
  const scheduling = (env: NodeJS.ProcessEnv) => loadConfig({ stateDir: '/tmp/unused' }, env).scheduling;
  t.same(scheduling({}), { order: 'swap-aware', switchMaxWaitMs: 30_000 });
  t.same(scheduling({ SERVICE_DECK_QUEUE_ORDER: 'strict' }), { order: 'strict', switchMaxWaitMs: 30_000 });
  t.same(scheduling({ SERVICE_DECK_SWITCH_MAX_WAIT_MS: '90000' }), { order: 'swap-aware', switchMaxWaitMs: 90_000 });
  t.throws(() => scheduling({ SERVICE_DECK_QUEUE_ORDER: 'fifo' }), /SERVICE_DECK_QUEUE_ORDER: "fifo" is not one of swap-aware, strict/);
  t.throws(() => scheduling({ SERVICE_DECK_SWITCH_MAX_WAIT_MS: '-1' }), /SERVICE_DECK_SWITCH_MAX_WAIT_MS/);
});
