// The openai-server TTS backend (spec 3.4): any OpenAI-compatible speech server a user installs
// (a GPU engine), started from the command line stored in the profile and proxied to. The service
// chooses a free loopback port and puts it where the command says `{port}` (`{host}` becomes
// 127.0.0.1); the server sees only the designated GPU (CUDA_VISIBLE_DEVICES, none on the CPU) and
// the worker environment's allowlist. Ready means GET /health or /v1/models answered 2xx. One
// request at a time goes to its POST /v1/audio/speech with `response_format: "wav"`; what comes
// back must be a WAV file. The 7 GiB rule is the supervisor's memory check before the start.
// The command may be a wrapper (`uv run`, a shell script) whose child does the work: the server
// runs in its own process group, and stopping it signals the whole group. A server that listens
// on anything but loopback once it answers is refused (it would bypass the bearer token).
import { readFile } from 'node:fs/promises';
import http from 'node:http';
import type { TtsLaunch } from '../../../machines/ttsWorker/index.js';
import { findCommand } from '../../adapters/runtimes.js';
import { diesWithService } from '../../adapters/parentDeath.js';
import { readWav } from '../../adapters/wav.js';
import type { Logger } from '../../system/observe/log.js';
import type { StartHooks } from '../engine.js';
import { freePort, workerEnv } from '../process.js';

/** A speech answer is at most this big (1000 characters at the slowest speed is far less). */
const MAX_WAV_BYTES = 64 * 1024 * 1024;
const SPEAK_TIMEOUT_MS = 120_000;

export class SpeechServerFailure extends Error {
  override name = 'SpeechServerFailure';
}

/** The stored command line with the chosen port and the loopback host put in. */
export function serverArgv(command: readonly string[], port: number): string[] {
  return command.map((arg) => arg.replaceAll('{port}', String(port)).replaceAll('{host}', '127.0.0.1'));
}

/** One loopback HTTP exchange with the speech server: status and body (bounded). */
function exchange(port: number, method: 'GET' | 'POST', path: string, body: string | null, options: { timeoutMs: number; signal?: AbortSignal; maxBytes?: number }) {
  return new Promise<{ status: number; type: string; body: Buffer }>((resolve, reject) => {
    const request = http.request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        agent: false,
        timeout: options.timeoutMs,
        headers: body === null ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
        ...(options.signal ? { signal: options.signal } : {}),
      },
      (response) => {
        const chunks: Buffer[] = [];
        let size = 0;
        response.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > (options.maxBytes ?? 1024 * 1024)) {
            request.destroy(new SpeechServerFailure(`the speech server's answer is larger than ${options.maxBytes ?? 1024 * 1024} bytes`));
            return;
          }
          chunks.push(chunk);
        });
        response.on('end', () => resolve({ status: response.statusCode ?? 0, type: String(response.headers['content-type'] ?? ''), body: Buffer.concat(chunks) }));
        response.on('error', reject);
      },
    );
    request.on('timeout', () => request.destroy(new SpeechServerFailure(`the speech server did not answer within ${options.timeoutMs / 1000} s (timeout)`)));
    request.on('error', reject);
    request.end(body ?? undefined);
  });
}

/** Whether the server answers: GET /health, else GET /v1/models, with a 2xx. */
async function answers(port: number): Promise<boolean> {
  for (const path of ['/health', '/v1/models']) {
    const status = await exchange(port, 'GET', path, null, { timeoutMs: 2_000 }).then(
      (r) => r.status,
      () => 0,
    );
    if (status >= 200 && status < 300) return true;
    if (status === 0) return false;
  }
  return false;
}

/** Listening sockets on `port` bound to an address other than loopback, from /proc/net/tcp{,6} (empty where unreadable). */
export async function exposedListeners(port: number): Promise<string[]> {
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  const loopback = new Set(['0100007F', '00000000000000000000000001000000', '0000000000000000FFFF00000100007F']);
  const found: string[] = [];
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    const text = await readFile(table, 'utf8').catch(() => '');
    for (const line of text.split('\n').slice(1)) {
      const [, local, , state] = line.trim().split(/\s+/);
      if (!local || state !== '0A') continue;
      const [address, localPort] = local.split(':');
      if (localPort === hexPort && address && !loopback.has(address)) found.push(address);
    }
  }
  return found;
}

export interface ServerRequest {
  model: string;
  input: string;
  voice: string;
  speed: number;
  /** The language name, when the profile lists its languages or the client named one. */
  language: string | undefined;
}

/** One speech request to a ready server; resolves with its WAV file. */
export async function speakTo(port: number, request: ServerRequest, signal?: AbortSignal): Promise<Buffer> {
  const body = JSON.stringify({ ...request, response_format: 'wav' });
  const answer = await exchange(port, 'POST', '/v1/audio/speech', body, { timeoutMs: SPEAK_TIMEOUT_MS, maxBytes: MAX_WAV_BYTES, ...(signal ? { signal } : {}) }).catch(
    (error: unknown) => {
      if (signal?.aborted) throw new SpeechServerFailure('the request was cancelled');
      throw new SpeechServerFailure(`the speech server did not answer: ${(error as Error).message}`);
    },
  );
  if (answer.status !== 200) {
    const detail = answer.body.toString('utf8').slice(0, 300).replace(/\s+/g, ' ').trim();
    throw new SpeechServerFailure(`the speech server answered ${answer.status}${detail ? `: ${detail}` : ''}`);
  }
  try {
    readWav(answer.body);
  } catch (error) {
    throw new SpeechServerFailure(`the speech server did not answer with a WAV file (${answer.type || 'no content type'}): ${(error as Error).message}`);
  }
  return answer.body;
}

export interface ServerEngineDeps {
  env: NodeJS.ProcessEnv;
  log: Logger;
  /** Ports of the ready starts, by generation. */
  ports: Map<number, number>;
}

/** The engine hooks of one speech server start (src/workers/engine.ts runs them). */
export function speechServerHooks(launch: TtsLaunch, deps: ServerEngineDeps): StartHooks {
  const { generation } = launch;
  return {
    prepare: async () => {
      const [program, ...args] = launch.command ?? [];
      const binary = program === undefined ? undefined : await findCommand(program, deps.env);
      if (!binary) return { unable: { cause: 'runtime_missing', message: `The text-to-speech worker cannot start: the speech server program ${program ?? '(none)'} is not installed.` } };
      const port = await freePort();
      const command = await diesWithService(binary, serverArgv(args, port), deps.env);
      const env = { ...workerEnv(deps.env), CUDA_VISIBLE_DEVICES: launch.device === 'cpu' ? '' : launch.device };
      // Its own process group (detached), so that a stop reaches the processes a wrapper started.
      return { command, port, group: true, options: { env, cleanup: false, detached: true } };
    },
    answers: async (port, engine) => {
      if (!(await answers(port)) || engine.over) return false;
      const exposed = await exposedListeners(port);
      if (exposed.length > 0) {
        deps.log.warn({ worker: 'tts', generation, port }, 'speech server listens beyond loopback: stopped');
        engine.fail(
          `The speech server listens on port ${port} beyond loopback (bound to ${exposed.join(', ')} in /proc/net): it was stopped, since it would take requests without the bearer token. Put {host} in its command line where it takes its address.`,
        );
        return false;
      }
      deps.ports.set(generation, port);
      return true;
    },
    cleanup: () => deps.ports.delete(generation),
  };
}
