// The admin API from JavaScript: log in, start the inference listener (nothing to do when it
// runs), read the status, run the operator's chat test on the demo's chat profile and wait for its
// timings, log out. Node's fetch keeps no cookies, so the session cookie is carried by hand.
// Run: OPERATOR_PASSWORD='…' node examples/admin.mjs
//      (ADMIN for another admin address; PROFILE_ID=<profile id> for another chat profile)
const { ADMIN = 'http://127.0.0.1:8110', OPERATOR_PASSWORD, PROFILE_ID = 'demo-chat' } = process.env;
if (!OPERATOR_PASSWORD) throw new Error('Set OPERATOR_PASSWORD to the operator password that `npm run demo` printed (see examples/README.md).');

const login = await fetch(`${ADMIN}/api/v1/session`, {
  method: 'POST',
  headers: { 'X-Service-Deck': '1', 'Content-Type': 'application/json' },
  body: JSON.stringify({ password: OPERATOR_PASSWORD }),
});
if (!login.ok) throw new Error(`login: ${login.status} ${await login.text()}`);
const { csrfToken } = await login.json();
const cookie = login.headers.getSetCookie()[0].split(';')[0]; // "sd_session=..."
const admin = async (method, path, body) => {
  const response = await fetch(`${ADMIN}${path}`, {
    method,
    headers: {
      'X-Service-Deck': '1',
      'X-CSRF-Token': csrfToken,
      cookie,
      ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${await response.text()}`);
  return response;
};

await admin('POST', '/api/v1/endpoint/start', {});
const status = await (await admin('GET', '/api/v1/endpoint')).json();
console.log(`endpoint ${status.status} on ${status.host}:${status.port};`, 'profiles:', status.profiles.map((p) => `${p.name} (${p.category}${p.published ? ', published' : ''})`).join(', '));

const { job } = await (await admin('POST', '/api/v1/chat-tests/start', {
  profile_id: PROFILE_ID,
  messages: [{ role: 'user', content: 'Say hello' }],
  max_tokens: 64,
})).json();
let current = job;
while (!['done', 'cancelled', 'failed'].includes(current.phase)) {
  await new Promise((resolve) => setTimeout(resolve, 250));
  current = (await (await admin('GET', '/api/v1/chat-tests')).json()).job;
}
console.log(`chat test ${current.phase}:`, current.timings, current.usage, current.error ?? '');
if (current.phase !== 'done') process.exitCode = 1;

await admin('DELETE', '/api/v1/session');
