// The floor under the service's own cost (the physical limit it can approach): three proxies in
// the bench's process that forward a chat request to the same worker as the service does, and do
// nothing else. bench/chat.ts measures them beside the service with the same client, so its report
// shows how much of the service's added time any Node proxy pays, how much the design card's stack
// pays (Fastify, zod, the listener's own hooks), and what is left for the service's own work.
//
// - `node proxy`: node:http server, the body parsed and serialised again, forwarded over a
//   keep-alive node:http agent, the answer sent back with its length.
// - `fastify proxy`: a bare Fastify instance (no logger, no hooks, no schema, its own JSON body
//   parser), forwarding the same way: what the design card's HTTP framework costs by itself.
// - `listener proxy`: the service's own listener (createListenerApp: the Host check, the request
//   id, the JSON body check, the chunked refusal, the access log) with the strict chat schema
//   (zod), forwarding the same way. No token check, profile look-up, reservation or metrics.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import { createListenerApp } from '../src/app.js';
import type { Logger } from '../src/system/observe/log.js';
import { chatRequestSchema } from '../src/workers/chat/chat.schema.js';

export interface ReferenceProxy {
  name: 'node proxy' | 'fastify proxy' | 'listener proxy';
  port: number;
}

/** POSTs `body` to the worker's chat route over `agent`; resolves with the whole answer. */
function forward(agent: http.Agent, port: number, body: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      { host: '127.0.0.1', port, path: '/v1/chat/completions', method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => resolve(Buffer.concat(chunks)));
        response.on('error', reject);
      },
    );
    request.on('error', reject);
    request.end(body);
  });
}

/** Starts the three proxies in front of the worker at `workerPort`; `close` ends them. */
export async function startReferenceProxies(workerPort: number, log: Logger): Promise<{ proxies: ReferenceProxy[]; close(): Promise<void> }> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });

  const bare = http.createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      forward(agent, workerPort, JSON.stringify(JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown)).then(
        (answer) => response.writeHead(200, { 'content-type': 'application/json', 'content-length': answer.length }).end(answer),
        (error: Error) => response.writeHead(502).end(error.message),
      );
    });
  });
  await new Promise<void>((resolve) => bare.listen(0, '127.0.0.1', resolve));

  const framework = Fastify({ logger: false });
  framework.post('/v1/chat/completions', async (request, reply) => {
    const answer = await forward(agent, workerPort, JSON.stringify(request.body));
    return reply.code(200).type('application/json').send(answer);
  });
  await framework.listen({ port: 0, host: '127.0.0.1' });

  const listener = createListenerApp('inference', log);
  listener.post('/v1/chat/completions', { schema: { body: chatRequestSchema } }, async (request, reply) => {
    const answer = await forward(agent, workerPort, JSON.stringify(request.body));
    return reply.code(200).type('application/json').send(answer);
  });
  await listener.listen({ port: 0, host: '127.0.0.1' });

  return {
    proxies: [
      { name: 'node proxy', port: (bare.address() as AddressInfo).port },
      { name: 'fastify proxy', port: (framework.server.address() as AddressInfo).port },
      { name: 'listener proxy', port: (listener.server.address() as AddressInfo).port },
    ],
    async close() {
      agent.destroy();
      await listener.close();
      await framework.close();
      await new Promise((resolve) => bare.close(resolve));
    },
  };
}
