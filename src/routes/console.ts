// The operator console on the admin listener: the page Vite built (console/ → dist/console) at `/`,
// served by @fastify/static, with a strict Content-Security-Policy on every answer of this
// listener: scripts, styles and connections only from the service's own origin, no inline script,
// no frame, no remote origin, no CORS header. The page talks only to /api/v1.
import { existsSync } from 'node:fs';
import path from 'node:path';
import fastifyStatic from '@fastify/static';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Service } from '../service.js';
import { errors } from '../errors.js';

export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  // The image test's picture and the speech test's sound are shown from blob: and data: URLs.
  "img-src 'self' data: blob:",
  "media-src 'self' blob:",
  "connect-src 'self'",
  "font-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy': CONSOLE_CSP,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
};

/**
 * An onSend hook for the whole admin listener: the page's documents and the API's answers alike.
 * No API answer is kept by a cache (CSRF tokens, a rotated API token, the status).
 */
export async function securityHeaders(request: FastifyRequest, reply: FastifyReply, payload: unknown): Promise<unknown> {
  for (const [name, value] of Object.entries(SECURITY_HEADERS)) reply.header(name, value);
  if (request.url.startsWith('/api/') && !reply.hasHeader('cache-control')) reply.header('cache-control', 'no-store');
  return payload;
}

export const consoleRoutes: FastifyPluginAsync<{ service: Service }> = async (app, { service }) => {
  const root = service.config.consoleDir;
  if (!existsSync(path.join(root, 'index.html'))) {
    service.log.warn({ dir: root }, 'the operator console is not built: run `npm run build` (the set-up does)');
    app.get('/', async () => {
      throw errors.unavailable('console_not_built', `The operator console is not built (${root} has no index.html): run \`npm run build\` (the service and the console), or \`npm run demo\`, which builds both.`);
    });
    return;
  }
  await app.register(fastifyStatic, {
    root,
    prefix: '/',
    index: ['index.html'],
    wildcard: false,
    cacheControl: false,
    // Hashed asset names never change their content; the page itself is always asked again.
    setHeaders: (res, file) => {
      res.header('cache-control', file.endsWith('index.html') ? 'no-cache' : 'public, max-age=31536000, immutable');
    },
  });
};
