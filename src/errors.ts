// CONTRACT section 5: every error on both listeners has the OpenAI body
// { error: { message, type, param, code } }. This is the catalog of those errors: routes, workers
// and their flows throw ApiError, and one handler per listener (src/routes/errors.ts) renders it.
// It imports nothing, so every layer may raise it.

export type ErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'conflict'
  | 'rate_limit_error'
  | 'server_error';

export interface ErrorBody {
  error: { message: string; type: ErrorType; param: string | null; code: string | null };
}

export class ApiError extends Error {
  constructor(
    readonly statusCode: number,
    readonly type: ErrorType,
    readonly code: string | null,
    message: string,
    readonly param: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'ApiError';
  }

  body(): ErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export const errors = {
  invalidValue: (param: string | null, message: string) => new ApiError(400, 'invalid_request_error', 'invalid_value', message, param),
  unknownParameter: (param: string) =>
    new ApiError(400, 'invalid_request_error', 'unknown_parameter', `Unknown parameter: '${param}'.`, param),
  invalidApiKey: (message = 'Missing or invalid bearer token in the Authorization header.') =>
    new ApiError(401, 'authentication_error', 'invalid_api_key', message, null, { 'www-authenticate': 'Bearer' }),
  notLoggedIn: () => new ApiError(401, 'authentication_error', 'session_required', 'Log in first: no valid admin session.'),
  passwordNotSet: () =>
    new ApiError(401, 'authentication_error', 'password_not_set', 'No operator password is set: run `service-deck set-password` on the host.'),
  wrongPassword: () => new ApiError(401, 'authentication_error', 'invalid_password', 'Wrong password.'),
  forbidden: (code: string, message: string) => new ApiError(403, 'permission_error', code, message),
  notFound: (code: string, message: string) => new ApiError(404, 'invalid_request_error', code, message),
  modelNotFound: (model: string, why = `The model '${model}' does not exist or is not published.`) =>
    new ApiError(404, 'invalid_request_error', 'model_not_found', why, 'model'),
  conflict: (code: string, message: string) => new ApiError(409, 'conflict', code, message),
  misdirected: (message: string) => new ApiError(421, 'invalid_request_error', 'misdirected_request', message),
  tooLarge: (message: string, param: string | null = null) => new ApiError(413, 'invalid_request_error', 'payload_too_large', message, param),
  /** A chunked body (src/routes/chunked.ts); a multipart upload is told how the openai client sends a file with a length. */
  chunked: (multipart = false) =>
    new ApiError(
      400,
      'invalid_request_error',
      'chunked_upload',
      `Chunked request bodies are not accepted: send the body with a Content-Length.${
        multipart
          ? ' With the openai client, pass the file as a Buffer, e.g. `file: await toFile(await fs.promises.readFile(path), "name.wav")`, not as `fs.createReadStream(path)`, whose upload is chunked.'
          : ''
      }`,
      null,
      { 'x-should-retry': 'false' },
    ),
  mediaType: (message: string) => new ApiError(415, 'invalid_request_error', 'unsupported_media_type', message),
  tooManyRequests: (code: string, message: string, retryAfterSeconds: number) =>
    new ApiError(429, 'rate_limit_error', code, message, null, { 'retry-after': String(retryAfterSeconds) }),
  unavailable: (code: string, message: string) => new ApiError(503, 'server_error', code, message),
  /** The disk has no room for an upload (src/workers/uploadRoom.ts). */
  insufficientStorage: (message: string) => new ApiError(507, 'server_error', 'insufficient_storage', message, null, { 'retry-after': '30' }),
  /** A model file whose header the service cannot read (not GGUF or ggml, damaged, over a bound). */
  modelUnreadable: (message: string) => new ApiError(422, 'invalid_request_error', 'model_unreadable', message, 'path'),
  workerFailed: (message: string) => new ApiError(502, 'server_error', 'worker_failed', message),
  enhancerFailed: (message: string) => new ApiError(502, 'server_error', 'enhancer_failed', message),
  internal: () => new ApiError(500, 'server_error', 'internal_error', 'The server failed to answer; see its log.'),
} as const;
