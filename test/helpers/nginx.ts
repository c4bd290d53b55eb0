// Debian's nginx with its JavaScript module, started in the foreground for one test with the
// shipped deploy/nginx/ template rendered into a private folder: its own configuration, pid, logs
// and temp paths, a loopback port, stopped when the test ends.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { access, chmod, constants, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Test } from 'tap';
import { freePort, tempDir } from './build.js';
import { until } from './until.js';

const DEPLOY = fileURLToPath(new URL('../../deploy/nginx/', import.meta.url));
/** Where Debian puts the program and the module (root's PATH has /usr/sbin, a user's may not). */
const NGINX_CANDIDATES = ['/usr/sbin/nginx', '/usr/bin/nginx'];
const JS_MODULE = '/usr/lib/nginx/modules/ngx_http_js_module.so';

export interface NodeTarget {
  address: string;
  token: string;
}

export interface Nginx {
  url: string;
  errorLog: () => Promise<string>;
  accessLog: () => Promise<string>;
}

async function executable(file: string): Promise<boolean> {
  return access(file, constants.X_OK).then(
    () => true,
    () => false,
  );
}

/**
 * The nginx program and its JavaScript module, or the Debian package that is missing (the test
 * script installs both: scripts/install-debian.sh nginx libnginx-mod-http-js).
 */
export async function findNginx(): Promise<{ binary: string; module: string } | { missing: string }> {
  const onPath = (process.env.PATH ?? '').split(':').filter(Boolean).map((dir) => path.join(dir, 'nginx'));
  let binary: string | undefined;
  for (const candidate of [...onPath, ...NGINX_CANDIDATES]) {
    if (await executable(candidate)) {
      binary = candidate;
      break;
    }
  }
  if (!binary) return { missing: 'nginx' };
  const module = await access(JS_MODULE, constants.R_OK).then(
    () => JS_MODULE,
    () => undefined,
  );
  return module ? { binary, module } : { missing: 'libnginx-mod-http-js' };
}

/** The shipped template with its placeholders filled in; a placeholder left over fails the render. */
export async function renderTemplate(values: { listen: string; scriptDir: string; apiToken: string; nodes: [NodeTarget, NodeTarget] }): Promise<string> {
  const template = await readFile(path.join(DEPLOY, 'service-deck.conf.template'), 'utf8');
  const fill: Record<string, string> = {
    LISTEN: values.listen,
    SCRIPT_DIR: values.scriptDir,
    API_TOKEN_SHA256: createHash('sha256').update(values.apiToken).digest('hex'),
    NODE1_ADDRESS: values.nodes[0].address,
    NODE1_TOKEN: values.nodes[0].token,
    NODE2_ADDRESS: values.nodes[1].address,
    NODE2_TOKEN: values.nodes[1].token,
  };
  // Only the configuration below the header comment: the comment names the placeholders.
  const rendered = template.replace(/@([A-Z0-9_]+)@/g, (whole, name: string) => fill[name] ?? whole);
  const body = rendered.split('\n').filter((line) => !line.startsWith('#'));
  const left = body.join('\n').match(/@[A-Z0-9_]+@/);
  if (left) throw new Error(`the template's placeholder ${left[0]} has no value`);
  return rendered;
}

/** nginx in front of two nodes, on a free loopback port, until the test ends. */
export async function startNginx(t: Test, found: { binary: string; module: string }, apiToken: string, nodes: [NodeTarget, NodeTarget]): Promise<Nginx> {
  const dir = await tempDir(t, 'sd-nginx-');
  // Workers run as nobody when the master is root: they read the script and write temp files here.
  await chmod(dir, 0o755);
  const port = await freePort();
  const site = await renderTemplate({ listen: `127.0.0.1:${port}`, scriptDir: DEPLOY, apiToken, nodes });
  const main = [
    `load_module ${found.module};`,
    `pid ${dir}/nginx.pid;`,
    `error_log ${dir}/error.log info;`,
    'worker_processes 1;',
    'events { worker_connections 256; }',
    'http {',
    `  access_log ${dir}/access.log;`,
    `  client_body_temp_path ${dir}/client_body;`,
    `  proxy_temp_path ${dir}/proxy;`,
    `  fastcgi_temp_path ${dir}/fastcgi;`,
    `  uwsgi_temp_path ${dir}/uwsgi;`,
    `  scgi_temp_path ${dir}/scgi;`,
    site,
    '}',
    '',
  ].join('\n');
  const conf = path.join(dir, 'nginx.conf');
  await writeFile(conf, main, { mode: 0o600 });
  const child = spawn(found.binary, ['-p', dir, '-e', 'stderr', '-c', conf, '-g', 'daemon off;'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGQUIT');
      await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5_000))]);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  });
  const url = `http://127.0.0.1:${port}`;
  await until(
    'nginx to listen',
    async () => {
      if (child.exitCode !== null) throw new Error(`nginx exited with ${child.exitCode}:\n${stderr}`);
      return fetch(`${url}/`).then(
        () => true,
        () => undefined,
      );
    },
    15_000,
  );
  return {
    url,
    errorLog: () => readFile(path.join(dir, 'error.log'), 'utf8'),
    accessLog: () => readFile(path.join(dir, 'access.log'), 'utf8'),
  };
}
