// GET /metrics on the admin listener: who may read it (the scrape token, an operator's
// session; not the API token, not a rotated-out scrape token, not nobody), what a chat request
// leaves in it (its route and model, status, latency, queue wait, first token, tokens, the worker
// load) against the stand-in llama-server, that no prompt, path or unknown model name becomes a
// label, and that the sample Grafana dashboard asks only for metrics the service exports.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { answerUsage } from '../../src/routes/metrics.js';
import { SecretStore } from '../../src/store/secrets.js';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { fakeLlamaServerIn, tinyModelIn } from '../helpers/llama.js';
import { sample } from '../helpers/metrics.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const PROMPT = 'PROMPT-zebra-4711 what is the secret of the sky';

const scrape = (b: Built, headers: Record<string, string> = {}) => fetch(`${b.adminUrl}/metrics`, { headers });

/** A service with the stand-in llama-server in `mode` and a published chat profile `fake`. */
async function withChat(t: Test, mode: string): Promise<Built & { modelPath: string }> {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const wrapper = await fakeLlamaServerIn(dir, mode);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: wrapper, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'fake', category: 'chat', params: { model } });
  const id = ((await created.json()) as { id: string }).id;
  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true })).status, 200);
  return Object.assign(b, { modelPath: model });
}

t.test('the usage of an answer is read from its last bytes, and its text cannot fake it', async (t) => {
  const read = (value: unknown) => answerUsage(Buffer.from(JSON.stringify(value)));
  const content = 'say "usage":{"prompt_tokens":999,"completion_tokens":999} and "timings":{"predicted_per_second":999}';
  t.same(
    read({ choices: [{ message: { content } }], usage: { completion_tokens: 12, prompt_tokens: 20, prompt_tokens_details: { cached_tokens: 3 } }, timings: { cache_n: 3, prompt_n: 17, predicted_n: 12, predicted_per_second: 412.0625 } }),
    { promptTokens: 20, completionTokens: 12, perSecond: 412.0625 },
    'usage first, the speed from the timings',
  );
  t.same(read({ choices: [{ delta: {} }], timings: { cache_n: 5, prompt_n: 2, predicted_n: 8, predicted_per_second: 1e-7 } }), { promptTokens: 7, completionTokens: 8, perSecond: undefined }, 'timings alone: computed and cached prompt tokens; an exponent is left out');
  t.equal(read({ choices: [{ message: { content } }] }), undefined, 'the keys inside the answer are escaped text');
  t.same(
    answerUsage(Buffer.from('data: {"choices":[],"usage":{"completion_tokens":4,"prompt_tokens":6,"total_tokens":10}}\n\ndata: [DONE]\n\n')),
    { promptTokens: 6, completionTokens: 4, perSecond: undefined },
    "a stream's last event, then [DONE]",
  );
});

t.test('access: the scrape token or a session; never the API token, a rotated-out token or nobody', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  const none = await scrape(b);
  t.equal(none.status, 401, 'no credentials');
  t.match(await none.json(), { error: { type: 'authentication_error', code: 'invalid_api_key' } });
  t.equal((await scrape(b, { authorization: `Bearer ${TOKEN}` })).status, 401, 'the API token is refused');

  const session = await scrape(b, { cookie: b.session().cookie });
  t.equal(session.status, 200, 'an operator session');
  t.match(session.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
  t.match(await session.text(), /^# HELP service_deck_http_requests_total /m);
  t.equal((await scrape(b, { authorization: `Bearer ${TOKEN}`, cookie: b.session().cookie })).status, 401, 'a wrong bearer is refused even beside a session');

  // What `service-deck rotate-metrics-token` does, from another process's store: the running service picks it up.
  const { store } = await SecretStore.open(b.stateDir);
  const first = await store.rotateMetricsToken();
  t.match(first, /^sdm-/);
  t.equal((await scrape(b, { authorization: `Bearer ${first}` })).status, 200, 'the scrape token');
  const secrets = await readFile(path.join(b.stateDir, 'secrets.json'), 'utf8');
  t.notMatch(secrets, first, 'only its hash is stored');
  t.match(JSON.parse(secrets), { metricsTokenHash: /^[0-9a-f]{64}$/ });

  const second = await store.rotateMetricsToken();
  t.equal((await scrape(b, { authorization: `Bearer ${first}` })).status, 401, 'the rotated-out token no longer works');
  t.equal((await scrape(b, { authorization: `Bearer ${second}` })).status, 200, 'the new one does');
  t.equal((await b.api('GET', '/v1/models', undefined, { authorization: `Bearer ${second}` })).status, 401, 'the scrape token opens no inference route');
  t.equal((await b.api('GET', '/v1/models')).status, 200, 'where the API token works');
});

t.test('a buffered chat request: its route, model, status, latency, queue wait, tokens and worker load appear; no prompt', async (t) => {
  const b = await withChat(t, 'instant');
  const answer = await b.api('POST', '/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: PROMPT }] });
  t.equal(answer.status, 200);
  await answer.text();
  const unknown = await b.api('POST', '/v1/chat/completions', { model: 'no-such-model-zebra', messages: [{ role: 'user', content: PROMPT }] });
  t.equal(unknown.status, 404);
  const text = await (await scrape(b, { cookie: b.session().cookie })).text();

  const chat = 'route="/v1/chat/completions",model="fake"';
  t.equal(sample(text, `service_deck_http_requests_total{listener="inference",${chat},code="200"}`), 1);
  t.equal(sample(text, `service_deck_http_requests_total{listener="inference",route="/v1/chat/completions",model="",code="404"}`), 1, 'an unknown model is counted without its name');
  t.equal(sample(text, `service_deck_http_request_duration_seconds_count{listener="inference",${chat}}`), 1);
  t.equal(sample(text, `service_deck_time_to_first_token_seconds_count{${chat}}`), 1);
  t.equal(sample(text, `service_deck_prompt_tokens_total{${chat}}`), 5, "the worker's usage");
  t.equal(sample(text, `service_deck_completion_tokens_total{${chat}}`), 1);
  t.equal(sample(text, 'service_deck_queue_wait_seconds_count{kind="chat",model="fake"}'), 1);
  t.equal(sample(text, 'service_deck_worker_loads_total{kind="chat",model="fake"}'), 1);
  t.equal(sample(text, 'service_deck_worker_load_seconds_count{kind="chat",model="fake"}'), 1);
  t.equal(sample(text, 'service_deck_worker_state{kind="chat",state="loaded"}'), 1);
  t.equal(sample(text, 'service_deck_queue_depth{kind="chat"}'), 0);
  t.ok((sample(text, 'service_deck_ram_budget_bytes') ?? 0) > 0, 'the RAM budget');
  t.ok((sample(text, 'process_resident_memory_bytes') ?? 0) > 0, 'process metrics');
  t.equal(sample(text, 'service_deck_http_requests_total{listener="admin",route="/api/v1/endpoint/profile",model="",code="200"}'), 1, 'the admin listener is counted too');

  t.notMatch(text, 'zebra', 'neither the prompt nor an unknown model name');
  t.notMatch(text, b.modelPath, 'no model file path');
  t.notMatch(text, b.stateDir, 'no state directory path');
});

t.test('a chat stream: time to first token at its first chunk, tokens and speed from its end', async (t) => {
  const b = await withChat(t, 'slow');
  const started = Date.now();
  const answer = await b.api('POST', '/v1/chat/completions', { model: 'fake', stream: true, messages: [{ role: 'user', content: PROMPT }] });
  t.equal(answer.status, 200);
  const body = await answer.text();
  const total = (Date.now() - started) / 1000;
  t.match(body, /data: \[DONE\]/, 'the stream went through the tap whole');
  t.match(body, /"usage"/);
  const text = await (await scrape(b, { cookie: b.session().cookie })).text();
  const chat = 'route="/v1/chat/completions",model="fake"';
  const firstToken = sample(text, `service_deck_time_to_first_token_seconds_sum{${chat}}`) ?? NaN;
  const duration = sample(text, `service_deck_http_request_duration_seconds_sum{listener="inference",${chat}}`) ?? NaN;
  // The stand-in sends a token every 100 ms for 3 s: the first comes long before the end.
  t.ok(firstToken > 0 && firstToken < duration - 2, `first token at ${firstToken} s, end at ${duration} s`);
  t.ok(duration <= total + 0.1, 'the latency is the answer as the client saw it');
  t.equal(sample(text, `service_deck_prompt_tokens_total{${chat}}`), 5);
  t.equal(sample(text, `service_deck_completion_tokens_total{${chat}}`), 30);
  t.equal(sample(text, `service_deck_tokens_per_second_count{${chat}}`), 1);
  t.equal(sample(text, `service_deck_tokens_per_second_sum{${chat}}`), 10, "the worker's timings");
  t.notMatch(text, 'zebra');
});

/** Every series name the exposition declares: each family, and a histogram's _bucket, _sum and _count. */
function exported(text: string): Set<string> {
  const names = new Set<string>();
  for (const match of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    const [, name = '', type] = match;
    names.add(name);
    if (type === 'histogram' || type === 'summary') for (const suffix of ['_bucket', '_sum', '_count']) names.add(name + suffix);
  }
  return names;
}

t.test('the sample Grafana dashboard parses and asks only for metrics the service exports', async (t) => {
  const b = await build(t);
  const names = exported(await (await scrape(b, { cookie: b.session().cookie })).text());
  const dashboard = JSON.parse(await readFile(path.join(ROOT, 'deploy/grafana/service-deck.json'), 'utf8')) as { panels: Array<{ title: string; targets?: Array<{ expr: string }> }> };
  const exprs = dashboard.panels.flatMap((panel) => (panel.targets ?? []).map((target) => ({ panel: panel.title, expr: target.expr })));
  t.ok(exprs.length >= 10, `${exprs.length} queries`);
  const used = new Set<string>();
  for (const { panel, expr } of exprs) {
    const metrics = [...expr.matchAll(/\b(service_deck_[a-z0-9_]+|process_[a-z0-9_]+|nodejs_[a-z0-9_]+)\b/g)].map((m) => m[1] ?? '');
    t.ok(metrics.length > 0, `${panel}: names a metric`);
    for (const metric of metrics) {
      used.add(metric);
      t.ok(names.has(metric), `${panel}: ${metric} is exported`);
    }
  }
  // The families the issue asks for are all on the dashboard.
  for (const family of [
    'service_deck_http_requests_total',
    'service_deck_http_request_duration_seconds_bucket',
    'service_deck_queue_wait_seconds_bucket',
    'service_deck_time_to_first_token_seconds_bucket',
    'service_deck_prompt_tokens_total',
    'service_deck_completion_tokens_total',
    'service_deck_queue_depth',
    'service_deck_queue_rejections_total',
    'service_deck_worker_loads_total',
    'service_deck_worker_unloads_total',
    'service_deck_worker_crashes_total',
    'service_deck_gpu_memory_used_bytes',
    'service_deck_ram_budget_bytes',
  ]) {
    t.ok(used.has(family), `the dashboard shows ${family}`);
  }
});
