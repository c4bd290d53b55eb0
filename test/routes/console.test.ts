// The console's own routes on the admin listener: the page at / with its strict headers, the
// explanation when the page is not built, the session check a reloaded page makes, and the
// profile schemas its forms are drawn from.
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import { build, tempDir } from '../helpers/build.js';

async function consoleDir(t: Test): Promise<string> {
  const dir = await tempDir(t, 'sd-console-');
  await mkdir(path.join(dir, 'assets'));
  await writeFile(path.join(dir, 'index.html'), '<!doctype html><title>console</title><script type="module" src="/assets/app-1a2b.js"></script>');
  await writeFile(path.join(dir, 'assets', 'app-1a2b.js'), 'console.log("page")');
  return dir;
}

t.test('the page and its assets are served at / with a strict CSP and no CORS', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_CONSOLE_DIR: await consoleDir(t) }, login: false });
  const page = await fetch(`${b.adminUrl}/`, { headers: { origin: 'http://evil.example' } });
  t.equal(page.status, 200);
  t.match(page.headers.get('content-type'), /^text\/html/);
  t.match(await page.text(), /<title>console<\/title>/);
  const csp = page.headers.get('content-security-policy') ?? '';
  t.match(csp, /default-src 'none'/);
  t.match(csp, /script-src 'self';/);
  t.match(csp, /connect-src 'self';/);
  t.match(csp, /frame-ancestors 'none'/);
  t.notMatch(csp, /unsafe|\*|https?:/, 'no inline code, no wildcard, no remote origin');
  t.equal(page.headers.get('x-frame-options'), 'DENY');
  t.equal(page.headers.get('x-content-type-options'), 'nosniff');
  t.equal(page.headers.get('cache-control'), 'no-cache', 'the page is always asked again');
  t.equal(page.headers.get('access-control-allow-origin'), null, 'no CORS for another origin');

  const asset = await fetch(`${b.adminUrl}/assets/app-1a2b.js`);
  t.equal(asset.status, 200);
  t.match(asset.headers.get('content-type'), /javascript/);
  t.match(asset.headers.get('cache-control'), /immutable/, 'hashed assets are cached for good');

  const api = await fetch(`${b.adminUrl}/api/v1/endpoint`, { headers: { 'x-service-deck': '1' } });
  t.equal(api.status, 401);
  t.match(api.headers.get('content-security-policy'), /default-src 'none'/, 'the API answers carry the same headers');

  const missing = await fetch(`${b.adminUrl}/assets/nothing.js`);
  t.equal(missing.status, 404);
  t.equal(((await missing.json()) as { error: { code: string } }).error.code, 'unknown_route', 'an unknown path is the usual JSON 404');
  const outside = await fetch(`${b.adminUrl}/assets/..%2f..%2fetc%2fpasswd`);
  t.equal(outside.status, 404, 'nothing outside the console folder');
});

t.test('an unbuilt console is a 503 that says how to build it', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_CONSOLE_DIR: await tempDir(t, 'sd-empty-') }, login: false });
  const page = await fetch(`${b.adminUrl}/`);
  t.equal(page.status, 503);
  const body = (await page.json()) as { error: { code: string; message: string } };
  t.equal(body.error.code, 'console_not_built');
  t.match(body.error.message, /npm run build\b/);
  t.ok(b.logLines.some((line) => line.includes('the operator console is not built')), 'the log says so at start');
});

t.test('GET /api/v1/session: whether the cookie is a session, and its CSRF token if so', async (t) => {
  const b = await build(t, { login: false });
  const noHeader = await fetch(`${b.adminUrl}/api/v1/session`);
  t.equal(noHeader.status, 403, 'the admin header is needed');
  t.equal(((await noHeader.json()) as { error: { code: string } }).error.code, 'header_required');

  let response = await b.admin('GET', '/api/v1/session');
  t.equal(response.status, 200, 'not logged in is an answer, not an error');
  t.same(await response.json(), { logged_in: false, password_set: true });

  await b.login();
  response = await b.admin('GET', '/api/v1/session');
  t.same(await response.json(), { logged_in: true, password_set: true, csrfToken: b.session().csrf }, "the session's own CSRF token");

  const forged = await b.admin('GET', '/api/v1/session', undefined, { cookie: 'sd_session=forged.value' });
  t.same(await forged.json(), { logged_in: false, password_set: true });

  await b.admin('DELETE', '/api/v1/session');
  response = await b.admin('GET', '/api/v1/session');
  t.same(await response.json(), { logged_in: false, password_set: true }, 'after logout: no session');
});

t.test('GET /api/v1/session says when no password is set yet', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_ADMIN_PASSWORD: undefined }, login: false });
  const response = await b.admin('GET', '/api/v1/session');
  t.same(await response.json(), { logged_in: false, password_set: false });
});

t.test('GET /api/v1/profile-schemas: the schemas the profile routes validate with', async (t) => {
  const b = await build(t, { login: false });
  t.equal((await b.admin('GET', '/api/v1/profile-schemas')).status, 401, 'only for a session');
  await b.login();
  const response = await b.admin('GET', '/api/v1/profile-schemas');
  t.equal(response.status, 200);
  const body = (await response.json()) as {
    name: { pattern: string };
    image_alias: string;
    categories: Record<string, { properties: Record<string, { default?: unknown; minimum?: number; maximum?: number; enum?: string[] }>; required?: string[] }>;
  };
  t.same(Object.keys(body.categories), ['chat', 'image', 'tts', 'stt']);
  t.equal(body.image_alias, 'service-image');
  const chat = body.categories.chat!;
  t.same(chat.required, ['model'], 'only the model is required: the rest has defaults');
  t.same(chat.properties.context, { default: 8192, type: 'integer', minimum: 256, maximum: 1048576, description: 'the context window in tokens, shared by the slots' });
  t.same(body.categories.stt!.properties.defaultLanguage!.enum, ['de', 'en', 'auto']);
  t.equal(body.categories.image!.properties.width!.default, 1024);
  t.ok(new RegExp(body.name.pattern).test('tiny-chat'), 'the name pattern accepts a usual name');
  t.notOk(new RegExp(body.name.pattern).test('-bad'), 'and refuses what the API refuses');
});
