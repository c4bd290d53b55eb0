// CONTRACT section 5: the one error handler per listener. It renders the catalog's ApiError
// (src/errors.ts), a job's refused or revoked reservation, and Fastify's own errors (body too
// large, bad JSON, wrong media type) and zod validation failures in the same OpenAI body.
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, HTTPMethods } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { ApiError, errors } from '../errors.js';
import { jobFailure } from '../workers/lease.js';
import { clientLeft } from './client.js';

interface ZodIssueLike {
  code?: string;
  expected?: string;
  errors?: ZodIssueLike[][];
  keyword?: string;
  path?: PropertyKey[];
  instancePath?: string;
  keys?: string[];
  message?: string;
  params?: { keys?: string[]; errors?: ZodIssueLike[][] };
}

/** Dotted path of a zod issue: messages.0.content. */
function issuePath(issue: ZodIssueLike, prefix: string): string | null {
  const parts = issue.path ?? (issue.instancePath ? issue.instancePath.split('/').filter(Boolean) : []);
  const joined = parts.map(String).join('.');
  return joined || (prefix === 'body' ? null : prefix);
}

/**
 * A failed union says only "Invalid input"; its branches say more. The branch that got furthest
 * (its first issue is not a wrong type at the union's own place) gives the issue, with the
 * union's path in front; when every branch failed on the type, the expected types are named.
 */
function unwrapUnion(issue: ZodIssueLike): ZodIssueLike {
  const code = issue.code ?? issue.keyword;
  const branches = (issue.errors ?? issue.params?.errors ?? []).filter((b) => b.length > 0);
  if (code !== 'invalid_union' || branches.length === 0) return issue;
  const at = issue.path ?? (issue.instancePath ? issue.instancePath.split('/').filter(Boolean) : []);
  const deeper = branches.find((b) => (b[0]?.path ?? []).length > 0 || b[0]?.code !== 'invalid_type');
  if (deeper?.[0]) return unwrapUnion({ ...deeper[0], path: [...at, ...(deeper[0].path ?? [])] });
  const expected = branches.map((b) => b[0]?.expected).filter((e): e is string => e !== undefined);
  return { ...issue, message: `expected ${expected.join(' or ')}` };
}

/** Turns the first validation issue into the contract's 400: unknown_parameter or invalid_value. */
export function validationError(issues: ZodIssueLike[], prefix = 'body'): ApiError {
  const first = issues[0] && unwrapUnion(issues[0]);
  if (!first) return errors.invalidValue(null, 'Invalid request.');
  const at = issuePath(first, prefix);
  const unknownKey = first.keys?.[0] ?? first.params?.keys?.[0];
  if ((first.code ?? first.keyword) === 'unrecognized_keys' && unknownKey) {
    const key = at ? `${at}.${unknownKey}` : unknownKey;
    return errors.unknownParameter(key);
  }
  return errors.invalidValue(at, `Invalid value${at ? ` for '${at}'` : ''}: ${first.message ?? 'not accepted'}.`);
}

const invalidJson = (detail: string) =>
  new ApiError(400, 'invalid_request_error', 'invalid_json', `The request body is not valid JSON: ${detail}`);

/** Maps any thrown error to an ApiError. Unknown errors become a 500 whose details stay in the log. */
export function toApiError(error: unknown): ApiError {
  const known = jobFailure(error);
  if (known) return known;
  const fe = error as FastifyError & { validationContext?: string };
  if (hasZodFastifySchemaValidationErrors(fe)) {
    return validationError(fe.validation as unknown as ZodIssueLike[], fe.validationContext ?? 'body');
  }
  switch (fe.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return errors.tooLarge('The request body is larger than the 1 MiB limit.');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return errors.mediaType('Unsupported Content-Type: send application/json.');
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return errors.invalidValue(null, 'The JSON body is empty.');
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return errors.invalidValue(null, `Invalid request body: ${fe.message}`);
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return invalidJson(fe.message);
    // The multipart parser's limits and refusals (@fastify/multipart), named by the contract.
    case 'FST_REQ_FILE_TOO_LARGE':
    case 'FST_PARTS_LIMIT':
    case 'FST_FILES_LIMIT':
    case 'FST_FIELDS_LIMIT':
      return errors.tooLarge(`The form is over its limits: ${fe.message}.`);
    case 'FST_INVALID_MULTIPART_CONTENT_TYPE':
      return errors.mediaType('Send the form as multipart/form-data.');
    case 'FST_PROTO_VIOLATION':
      // @fastify/multipart refuses a form field named after an Object.prototype property
      // (`constructor`, `__proto__`, `toString`) before a route sees it; no route takes such a name.
      return new ApiError(400, 'invalid_request_error', 'unknown_parameter', 'A form field named after a built-in object property (such as constructor or __proto__) is not a parameter of this route.');
  }
  if (fe instanceof SyntaxError || fe.statusCode === 400) return invalidJson(fe.message);
  if (typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    // A framework's own code (FST_*) is no code of the contract.
    const code = fe.code === undefined || fe.code.startsWith('FST_') ? 'invalid_request' : fe.code;
    return new ApiError(fe.statusCode, 'invalid_request_error', code, fe.message);
  }
  return errors.internal();
}

export function sendError(reply: FastifyReply, error: ApiError): FastifyReply {
  reply.request.errorCode = error.code;
  return reply.code(error.statusCode).headers(error.headers).type('application/json; charset=utf-8').send(error.body());
}

const LINGER_MS = 500;

/** What Node's HTTP parser refused before there was a request to route, as the contract's error. */
export function clientError(error: { code?: string }, limits: { requestTimeoutMs: number }): ApiError {
  switch (error.code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new ApiError(408, 'invalid_request_error', 'request_timeout', `The request was not received in whole within ${limits.requestTimeoutMs / 1000} s.`);
    case 'HPE_HEADER_OVERFLOW':
      return new ApiError(431, 'invalid_request_error', 'payload_too_large', 'The request headers are larger than the 16 KiB limit.');
    // Content-Length with Transfer-Encoding (the parser's code depends on the header order).
    case 'HPE_UNEXPECTED_CONTENT_LENGTH':
    case 'HPE_INVALID_TRANSFER_ENCODING':
      return errors.chunked();
    default:
      return new ApiError(400, 'invalid_request_error', 'invalid_request', 'The request is not valid HTTP/1.1.');
  }
}

/**
 * Fastify's clientErrorHandler: the parser's refusals (timeouts, headers too large, a body framed
 * twice) in the OpenAI body, and the connection closed. Nothing is written once an answer has
 * begun on the connection (a timeout may strike while a refusal is already on its way).
 */
export function clientErrorHandler(limits: { requestTimeoutMs: number }) {
  return function (this: FastifyInstance, error: Error & { code?: string }, socket: Socket): void {
    if (error.code === 'ECONNRESET' || socket.destroyed) return;
    const answering = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true;
    const apiError = clientError(error, limits);
    this.log.debug({ code: error.code, status: apiError.statusCode }, 'client error');
    if (socket.writable && !answering) {
      const body = JSON.stringify(apiError.body());
      const head = `HTTP/1.1 ${apiError.statusCode} ${STATUS_CODES[apiError.statusCode] ?? ''}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n`;
      socket.end(head + body);
      // The client may go on sending. Once the answer is out it has a moment to read it (a close
      // with its bytes unread would reset the connection and could drop the answer), then it goes.
      socket.once('finish', () => setTimeout(() => socket.destroy(), LINGER_MS).unref());
      return;
    }
    socket.destroy();
  };
}

/** The one error handler and not-found handler of a listener. */
export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((error: unknown, request: FastifyRequest, reply: FastifyReply) => {
    // A client that gave up (in the queue, or while its answer was made) is normal: no error, no stack.
    if (clientLeft(error)) {
      request.log.info({ reason: (error as Error).name }, 'the client went away before its answer');
      return reply.code(499).send();
    }
    const apiError = toApiError(error);
    // Our own errors are logged by code only: a worker's message may quote what it was working on.
    if (apiError.statusCode >= 500) {
      if (error instanceof ApiError) request.log.error({ status: apiError.statusCode, code: apiError.code }, 'request failed');
      else request.log.error({ err: error }, 'request failed');
    }
    return sendError(reply, apiError);
  });
  app.setNotFoundHandler((request, reply) => {
    const route = request.url.split('?')[0] ?? '';
    sendError(reply, errors.notFound('unknown_route', `Unknown route: ${request.method} ${route}${baseUrlHint(app, request.method, route)}`));
  });
}

/**
 * What a newcomer's client most often gets wrong: a base URL without `/v1` (the client sends
 * `/chat/completions`), or with it twice. When the path this listener does serve under the right
 * base is a route of the same method, the refusal says how to fix the base URL.
 */
function baseUrlHint(app: FastifyInstance, method: string, route: string): string {
  const served = (url: string) => app.hasRoute({ method: method as HTTPMethods, url });
  if (route.startsWith('/v1/v1/') && served(route.slice(3))) {
    return `. The base URL already ends in /v1 and the client adds it again: use http://<host>:<port>/v1 as the base URL, and ${route.slice(3)} is the route.`;
  }
  if (!route.startsWith('/v1/') && route !== '/' && served(`/v1${route}`)) {
    return `. The base URL of this API ends in /v1: use http://<host>:<port>/v1 as the client's base URL (OpenAI's baseURL / base_url), so that it sends ${method} /v1${route}.`;
  }
  return '';
}
