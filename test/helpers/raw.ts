// Requests that fetch cannot make: another Host header, another loopback source address, a raw
// socket that sends a request piece by piece and sees when the server closes it.
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';

export interface RawReply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

export interface RawRequest {
  method?: string;
  headers?: Record<string, string>;
  body?: string;
  /** The source address (any 127.x.y.z works on loopback). */
  localAddress?: string;
}

/** One request over its own connection (no keep-alive pool), answered whole. */
export function rawRequest(url: string, { method = 'GET', headers = {}, body, localAddress }: RawRequest = {}): Promise<RawReply> {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname + target.search,
        method,
        headers: { connection: 'close', ...(body === undefined ? {} : { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) }), ...headers },
        agent: false,
        ...(localAddress ? { localAddress } : {}),
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

export interface OpenSocket {
  socket: Socket;
  /** Everything the server sent so far. */
  received(): string;
  /** Resolves with the time (ms since `open`) at which the server ended or reset the connection. */
  closed: Promise<number>;
}

/** A raw TCP connection to the listener of `url`, recording what comes back and when it closes. */
export async function openSocket(url: string): Promise<OpenSocket> {
  const target = new URL(url);
  const socket = connect({ host: target.hostname, port: Number(target.port) });
  const started = Date.now();
  let data = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => (data += chunk));
  const closed = new Promise<number>((resolve) => {
    socket.on('close', () => resolve(Date.now() - started));
    // A reset shows as an error, followed by close.
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  return { socket, received: () => data, closed };
}

/** The status and the JSON body of the first answer in raw bytes. */
export function parseRaw(raw: string): { status: number; body: unknown } {
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(raw)?.[1] ?? 0);
  const start = raw.indexOf('\r\n\r\n');
  let body: unknown;
  try {
    body = JSON.parse(raw.slice(start + 4));
  } catch {
    body = undefined;
  }
  return { status, body };
}
