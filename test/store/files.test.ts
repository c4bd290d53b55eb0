// CONTRACT section 2: atomic writes, private modes, and damaged files reported by name.
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { EndpointStore } from '../../src/store/endpoint.js';
import { ensurePrivateDir, linkOrCopy, makePrivateFolders, readJsonFile, StateFileError, WriteQueue, writeJsonAtomic } from '../../src/store/files.js';
import { normalisePublished } from '../../src/store/profiles.js';
import { MIN_TOKEN_LENGTH, newApiToken, SecretStore, WeakSecretError } from '../../src/store/secrets.js';
import { tempDir } from '../helpers/build.js';

t.test('atomic writes leave 0600 files and no temp file behind', async (t) => {
  const dir = await tempDir(t);
  const file = path.join(dir, 'x.json');
  await writeJsonAtomic(file, { a: 1 });
  await writeJsonAtomic(file, { a: 2 });
  t.same(JSON.parse(await readFile(file, 'utf8')), { a: 2 });
  t.equal((await stat(file)).mode & 0o777, 0o600);
  t.same(await readdir(dir), ['x.json'], 'no temp file is left');
});

t.test('a failed write leaves the old content and no temp file', async (t) => {
  const dir = await tempDir(t);
  const file = path.join(dir, 'x.json');
  await writeJsonAtomic(file, { a: 1 });
  await t.rejects(writeJsonAtomic(file, { big: 1n } as unknown));
  t.same(JSON.parse(await readFile(file, 'utf8')), { a: 1 });
  t.same(await readdir(dir), ['x.json']);
});

t.test('private folders are 0700, also when they existed with a wider mode', async (t) => {
  const dir = await tempDir(t);
  const inner = path.join(dir, 'a');
  await mkdir(inner, { mode: 0o755 });
  await ensurePrivateDir(inner);
  t.equal((await stat(inner)).mode & 0o777, 0o700);
});

t.test('reading: missing is undefined; empty, truncated or unreadable files throw naming the file', async (t) => {
  const dir = await tempDir(t);
  t.equal(await readJsonFile(path.join(dir, 'none.json')), undefined);
  for (const [name, text] of [
    ['empty.json', ''],
    ['half.json', '{"running": tr'],
  ] as const) {
    const file = path.join(dir, name);
    await writeFile(file, text);
    const error: unknown = await readJsonFile(file).catch((e: unknown) => e);
    t.ok(error instanceof StateFileError && error.file === file && error.message.includes(file), `${name} is reported by name`);
  }
  const folder = path.join(dir, 'folder.json');
  await mkdir(folder);
  await t.rejects(readJsonFile(folder), /cannot be read/);
});

t.test('a valid JSON file with the wrong shape is refused, not replaced', async (t) => {
  const dir = await tempDir(t);
  await writeFile(path.join(dir, 'endpoint.json'), '{"running":"yes","port":8120}');
  await t.rejects(EndpointStore.open(dir), /endpoint\.json: has unexpected content/);
  await writeFile(path.join(dir, 'secrets.json'), '{"passwordHash":"plain text","tokenHash":null,"sessionKey":"short"}');
  await t.rejects(SecretStore.open(dir), /secrets\.json: has unexpected content/);
  t.equal(await readFile(path.join(dir, 'endpoint.json'), 'utf8'), '{"running":"yes","port":8120}');
});

t.test('the write queue keeps order, and idle() waits for everything queued', async (t) => {
  const queue = new WriteQueue();
  const order: number[] = [];
  const slow = queue.run(async () => {
    await new Promise((r) => setTimeout(r, 20));
    order.push(1);
  });
  const failing = queue.run(async () => {
    order.push(2);
    throw new Error('boom');
  });
  void queue.run(async () => void order.push(3));
  await queue.idle();
  t.same(order, [1, 2, 3]);
  await slow;
  await t.rejects(failing, /boom/);
});

t.test('endpoint updates are merged and durable', async (t) => {
  const dir = await tempDir(t);
  const store = await EndpointStore.open(dir);
  t.same(store.record, { running: false, port: 8120, host: '127.0.0.1', published: [], extensions: { responses: false } });
  void store.update({ running: true });
  void store.update({ port: 8121 });
  // A function patch is computed in its turn: it sees the writes queued before it.
  void store.update((now) => ({ extensions: { ...now.extensions, responses: now.port === 8121 } }));
  await store.flushed();
  t.same(JSON.parse(await readFile(path.join(dir, 'endpoint.json'), 'utf8')), { running: true, port: 8121, host: '127.0.0.1', published: [], extensions: { responses: true } });
  t.same((await EndpointStore.open(dir)).record.port, 8121);
});

t.test('an endpoint.json written before the extensions existed reads as every extension off', async (t) => {
  const dir = await tempDir(t);
  await writeFile(path.join(dir, 'endpoint.json'), JSON.stringify({ running: true, port: 8125, host: '127.0.0.1', published: ['p-1'] }));
  t.same((await EndpointStore.open(dir)).record, { running: true, port: 8125, host: '127.0.0.1', published: ['p-1'], extensions: { responses: false } });
});

t.test('publication rules 2 and 3 on a saved list', async (t) => {
  const categories: Record<string, 'chat' | 'image'> = { c1: 'chat', c2: 'chat', i1: 'image', i2: 'image' };
  const categoryOf = (id: string) => categories[id];
  t.same(normalisePublished(['i2', 'c1', 'i1', 'c2'], categoryOf), ['i2', 'c1', 'c2'], 'the first saved image id stays');
  t.same(normalisePublished(['gone', 'c1', 'c1'], categoryOf), ['c1'], 'deleted and repeated ids leave');
});

t.test('secrets: scrypt password, SHA-256 token, constant-time checks', async (t) => {
  const dir = await tempDir(t);
  const token = 'tok-abc-0123456789-0123456789-01';
  const { store } = await SecretStore.open(dir, { password: 'longenough', token });
  t.ok(await store.passwordMatches('longenough'));
  t.notOk(await store.passwordMatches('longenougH'));
  t.ok(store.tokenMatches(token));
  t.notOk(store.tokenMatches(`${token.slice(0, -1)}2`));
  t.notOk(store.tokenMatches(''));
  const text = await readFile(path.join(dir, 'secrets.json'), 'utf8');
  t.notMatch(text, /longenough|tok-abc/);
  t.match(JSON.parse(text), { passwordHash: /^scrypt\$32768\$8\$1\$/, tokenHash: /^[0-9a-f]{64}$/ });
  const again = await SecretStore.open(dir, { password: 'other-password', token: 'other' });
  t.ok(await again.store.passwordMatches('longenough'), 'the environment only seeds a first start');
  t.ok(again.store.tokenMatches(token));
  await t.rejects(SecretStore.open(await tempDir(t), { password: 'short' }), /at least 8/);
  for (const [what, password, named] of [
    ['a carriage return from a file with Windows line ends', 'longenough\r', 'the control character U+000D at character 11 of 11'],
    ['a newline inside', 'long\nenough', 'the control character U+000A at character 5 of 11'],
  ] as const) {
    const dir = await tempDir(t);
    const error = await SecretStore.open(dir, { password }).then(() => undefined, (e: unknown) => e);
    t.ok(error instanceof WeakSecretError, `a first-start password with ${what}: refused`);
    t.match(error, { message: `SERVICE_DECK_ADMIN_PASSWORD contains ${named}: no one could type it into the console's login field` }, `${what}: the message says which and why`);
    t.notOk(existsSync(path.join(dir, 'secrets.json')), `${what}: nothing was stored`);
  }
  t.ok(await (await SecretStore.open(await tempDir(t), { password: 'längeres Passwort' })).store.passwordMatches('längeres Passwort'), 'letters beyond ASCII are fine in a password (it travels in a JSON body)');
});

t.test('a first-start API token has at least 32 characters and no whitespace; another is refused and nothing is stored', async (t) => {
  t.equal(MIN_TOKEN_LENGTH, 32);
  for (const weak of ['x', 'a'.repeat(31)]) {
    const dir = await tempDir(t);
    const error = await SecretStore.open(dir, { password: 'longenough', token: weak }).then(() => undefined, (e: unknown) => e);
    t.ok(error instanceof WeakSecretError, `${weak.length} characters: refused`);
    t.match(error, { message: `SERVICE_DECK_API_TOKEN must have at least 32 characters, it has ${weak.length}` }, 'the message names the variable, the minimum and what was given');
    t.notOk(existsSync(path.join(dir, 'secrets.json')), 'nothing was stored: the next start asks again');
  }
  const { store } = await SecretStore.open(await tempDir(t), { token: 'b'.repeat(32) });
  t.ok(store.tokenMatches('b'.repeat(32)), '32 characters are taken');
  t.ok(newApiToken().length >= MIN_TOKEN_LENGTH, 'a generated token is long enough itself');
  for (const [what, spaced] of [
    ['a trailing newline', `${'d'.repeat(40)}\n`],
    ['a space inside', `${'d'.repeat(20)} ${'d'.repeat(20)}`],
    ['a leading tab', `\t${'d'.repeat(40)}`],
  ] as const) {
    const dir = await tempDir(t);
    const error = await SecretStore.open(dir, { token: spaced }).then(() => undefined, (e: unknown) => e);
    t.ok(error instanceof WeakSecretError, `${what}: refused`);
    t.match(error, { message: /^SERVICE_DECK_API_TOKEN contains whitespace .*: a bearer token is one word, so no client could ever send this one/ }, `${what}: the message says why`);
    t.notOk(existsSync(path.join(dir, 'secrets.json')), `${what}: nothing was stored`);
  }
  for (const [what, unsendable, named] of [
    ['a control character', `${'e'.repeat(20)}\u0007${'e'.repeat(20)}`, 'the control character U+0007 at character 21 of 41'],
    ['a DEL', `${'e'.repeat(40)}\u007f`, 'the control character U+007F at character 41 of 41'],
    ['a non-ASCII letter', `${'e'.repeat(20)}é${'e'.repeat(20)}`, '"é" (U+00E9) at character 21 of 41'],
    ['a letter outside Latin-1', `ж${'e'.repeat(40)}`, '"ж" (U+0436) at character 1 of 41'],
  ] as const) {
    const dir = await tempDir(t);
    const error = await SecretStore.open(dir, { token: unsendable }).then(() => undefined, (e: unknown) => e);
    t.ok(error instanceof WeakSecretError, `${what}: refused`);
    t.match(error, { message: `SERVICE_DECK_API_TOKEN contains ${named}: a bearer token travels in an HTTP header, which carries printable ASCII only` }, `${what}: the message names the variable, the character and what is allowed`);
    t.notOk(existsSync(path.join(dir, 'secrets.json')), `${what}: nothing was stored`);
  }
  const punctuated = `!"#$%&'()*+,-./:;<=>?@[\\]^_\`{|}~${'f'.repeat(10)}`;
  t.ok((await SecretStore.open(await tempDir(t), { token: punctuated })).store.tokenMatches(punctuated), 'every printable ASCII character is taken');
  const stored = await tempDir(t);
  await SecretStore.open(stored, { token: 'c'.repeat(40) });
  t.ok((await SecretStore.open(stored, { token: 'x' })).store.tokenMatches('c'.repeat(40)), 'once a token is stored, the variable is not read, so it is not checked either');
});

t.test('private folders are made one by one, never through a symlink', async (t) => {
  const root = await tempDir(t);
  t.equal(await makePrivateFolders(root, path.join('a', 'b', 'c')), null);
  for (const folder of ['a', 'a/b', 'a/b/c']) t.equal((await stat(path.join(root, folder))).mode & 0o777, 0o700, folder);
  const elsewhere = await tempDir(t);
  await symlink(elsewhere, path.join(root, 'link'));
  t.equal(await makePrivateFolders(root, path.join('link', 'x')), path.join(root, 'link'), 'the symlink is named, not entered');
  t.same(await readdir(elsewhere), []);
});

t.test('a verified file is shared as a hard link, or copied across filesystems; never half there', async (t) => {
  const dir = await tempDir(t);
  const from = path.join(dir, 'from.gguf');
  await writeFile(from, Buffer.alloc(100_000, 3), { mode: 0o600 });
  const to = path.join(dir, 'to.gguf');
  t.equal(await linkOrCopy(from, to), 'linked');
  t.equal((await stat(to)).ino, (await stat(from)).ino, 'one file, two names');
  t.same((await readdir(dir)).sort(), ['from.gguf', 'to.gguf'], 'no temp file left');

  // /dev/shm is a tmpfs: another filesystem than the temp folder's, where no hard link can go.
  const shm = await mkdtemp('/dev/shm/sd-test-');
  t.teardown(() => rm(shm, { recursive: true, force: true }));
  t.not((await stat(shm)).dev, (await stat(dir)).dev, 'the two folders are on two filesystems');
  const asked: number[] = [];
  const copied = path.join(shm, 'copy.gguf');
  t.equal(await linkOrCopy(from, copied, { beforeCopy: async (bytes) => void asked.push(bytes) }), 'copied');
  t.same(asked, [100_000], 'the room for the copy was asked first');
  t.ok((await readFile(copied)).equals(await readFile(from)));
  t.equal((await stat(copied)).mode & 0o777, 0o600);
  const full = path.join(shm, 'full.gguf');
  await t.rejects(linkOrCopy(from, full, { beforeCopy: async () => Promise.reject(new Error('no room')) }), /no room/);
  t.same((await readdir(shm)).sort(), ['copy.gguf'], 'a refused copy leaves nothing');
  const aborted = AbortSignal.abort();
  await t.rejects(linkOrCopy(from, full, { signal: aborted }));
  t.same((await readdir(shm)).sort(), ['copy.gguf'], 'nor does an aborted one');
  await symlink(from, path.join(dir, 'link.gguf'));
  await t.rejects(linkOrCopy(path.join(dir, 'link.gguf'), path.join(dir, 'x.gguf')), /not a regular file/, 'a symlink is not followed');
});
