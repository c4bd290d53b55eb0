// The two listeners as Fastify instances. Both share one construction: the same limits (1 MiB
// bodies, no chunked bodies, JSON only, a time limit to receive a request, a connection cap at
// which waiting connections make room and past which a new one is answered 503, answers for
// clients that half-close), the Host check, one error handler rendering the OpenAI error body,
// and one access line per request. Routes live in src/routes/; they validate, send one event,
// await the reply and map it to HTTP.
import { randomFillSync } from 'node:crypto';
import fastifyCookie from '@fastify/cookie';
import fastifyMultipart from '@fastify/multipart';
import Fastify, {
  LogController,
  type onRequestHookHandler,
  type FastifyBaseLogger,
  type FastifyRequest,
  type FastifyInstance,
  type RawReplyDefaultExpression,
  type RawRequestDefaultExpression,
  type RawServerDefault,
} from 'fastify';
import { serializerCompiler, validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import { DEFAULT_HTTP, type HttpConfig } from './config.js';
import type { Logger } from './system/observe/log.js';
import type { Service } from './service.js';
import { logAccess, type AccessRecorder } from './routes/access.js';
import { recentRequestRecorder } from './routes/recent.js';
import { bearerAuth } from './routes/auth.js';
import { errors, type ApiError } from './errors.js';
import { clientErrorHandler, installErrorHandling } from './routes/errors.js';
import { hostGuard } from './routes/host.js';
import { checkJsonBody } from './routes/jsonBody.js';
import { refuseChunked } from './routes/chunked.js';
import { guardConnections } from './routes/connections.js';
import { halfClose } from './routes/halfClose.js';
import { adminAudioPolicyRoutes } from './routes/admin/audioPolicy.js';
import { adminImageTestRoutes } from './routes/admin/imageTests.js';
import { adminSpeechTestRoutes } from './routes/admin/speechTests.js';
import { imageRoutes } from './routes/inference/images.js';
import { adminChatTestRoutes } from './routes/admin/chatTests.js';
import { adminWorkerRoutes } from './routes/admin/workers.js';
import { adminConsoleRoutes } from './routes/admin/console.js';
import { adminEnhancerRoutes } from './routes/admin/enhancers.js';
import { adminModelRoutes } from './routes/admin/models.js';
import { adminEndpointRoutes } from './routes/admin/endpoint.js';
import { adminProfileRoutes } from './routes/admin/profiles.js';
import { adminSessionRoutes } from './routes/admin/session.js';
import { chatRoutes } from './routes/inference/chat.js';
import { responsesRoutes } from './routes/inference/responses.js';
import { healthRoutes } from './routes/inference/health.js';
import { speechRoutes } from './routes/inference/speech.js';
import { transcriptionRoutes } from './routes/inference/transcriptions.js';
import { TRANSCRIPTION_WAV } from './adapters/wav.js';
import { modelRoutes } from './routes/inference/models.js';
import { consoleRoutes, securityHeaders } from './routes/console.js';
import { adminMetricsRoutes } from './routes/admin/metrics.js';
import { chatAnswerMetrics, requestMetrics } from './routes/metrics.js';

export const JSON_BODY_LIMIT = 1024 * 1024;

export type App = FastifyInstance<RawServerDefault, RawRequestDefaultExpression, RawReplyDefaultExpression, FastifyBaseLogger, ZodTypeProvider>;

/** How often Node looks for requests over their time limit (its default, 30 s, would add up to 30 s to each limit). */
const TIMEOUT_CHECK_MS = 1_000;

export interface ListenerOptions {
  onAccess?: AccessRecorder;
  http?: HttpConfig;
  /** The listener's own admission check (the inference token), before any body is read. */
  gate?: onRequestHookHandler;
  /**
   * Whether a request proved a credential before its body is read (every hook of `onRequest` has
   * passed): its connection then holds its place until the answer is over. Without it, a request
   * with a body waits as a pending connection until the body is in (src/routes/connections.ts).
   */
  credited?: (request: FastifyRequest) => boolean;
}

/**
 * Request ids: 16 random hex digits each, cut from a block of 512 filled at once, so that one
 * request costs no call into OpenSSL of its own (`randomBytes(8)` per request costs ~2 % of the
 * busy time under bench/chat).
 */
export function requestIds(count = 512): () => string {
  const block = Buffer.alloc(8 * count);
  let at = block.length;
  return () => {
    if (at === block.length) {
      randomFillSync(block);
      at = 0;
    }
    const id = block.toString('hex', at, at + 8);
    at += 8;
    return id;
  };
}

export function createListenerApp(name: 'admin' | 'inference', log: Logger, { onAccess, http = DEFAULT_HTTP, gate, credited }: ListenerOptions = {}): App {
  const app = Fastify({
    loggerInstance: log.child({ listener: name }) as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: JSON_BODY_LIMIT,
    // A slow or stalled client may hold a connection only while it sends its request: the limit
    // ends when the request is in whole, so a long SSE answer or a long image job is not cut.
    // No idle limit on the socket (connectionTimeout): an answer may be silent for minutes.
    requestTimeout: http.requestTimeoutMs,
    keepAliveTimeout: http.keepAliveTimeoutMs,
    http: {
      headersTimeout: http.headersTimeoutMs,
      connectionsCheckingInterval: Math.min(TIMEOUT_CHECK_MS, http.headersTimeoutMs),
      // A request without Host is refused by the Host check, in the OpenAI body (Node's own 400 has none).
      requireHostHeader: false,
    },
    clientErrorHandler: clientErrorHandler(http),
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    requestIdHeader: false,
    genReqId: requestIds(),
  }).withTypeProvider<ZodTypeProvider>() as App;
  // At the connection cap, waiting connections make room or the new one is answered 503; silent ones go early.
  const guard = guardConnections(app.server, http);
  // A client that ends its side after its request still gets its answer (src/routes/halfClose.ts).
  void app.register(halfClose);
  if (credited) {
    app.addHook('preParsing', (request, _reply, payload, done) => {
      if (credited(request)) guard.trust(request.raw.socket);
      done(null, payload);
    });
  }
  // A closing listener waits for requests under way, not for connections still sending their headers.
  app.addHook('preClose', (done) => {
    guard.closePending();
    done();
  });
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  app.removeContentTypeParser('text/plain');
  installErrorHandling(app);
  app.addHook('onRequest', hostGuard(http.allowedHosts));
  app.addHook('preValidation', checkJsonBody);
  // Callback-style hooks on every request's path: no promise per request.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    done();
  });
  if (gate) app.addHook('onRequest', gate);
  // After the gate: only a request that may be answered gets its chunked body read before the refusal.
  app.addHook('onRequest', refuseChunked);
  // An answer sent before the body was read (a 401, a refused Host) ends the connection: a client
  // must not keep it by trickling the rest of a body nobody reads.
  app.addHook('onSend', (request, reply, payload, done) => {
    if (!request.raw.complete) reply.header('connection', 'close');
    done(null, payload);
  });
  app.addHook('onResponse', (request, reply, done) => {
    logAccess(request, reply, onAccess);
    done();
  });
  return app;
}

/** The inference listener (spec 4.1): bearer token on every route, no CORS, open only while running. */
export async function buildInferenceApp(service: Service): Promise<App> {
  const authenticate = bearerAuth(service.secrets);
  const measure = requestMetrics(service.metrics, 'inference', service.profiles);
  const remember = recentRequestRecorder(service.recent, service.profiles);
  const app = createListenerApp('inference', service.log, {
    onAccess: (route, status, request, reply) => {
      service.counters.record(route, status);
      measure(route, status, request, reply);
      remember(route, status, request, reply);
    },
    http: service.config.http,
    // A request that reaches its body has passed the token check.
    credited: () => true,
    gate: (request, reply, done) => {
      // What an endpoint stop waits for: every request until its answer is over or its client gone.
      service.counters.opened();
      reply.raw.once('close', () => service.counters.closed());
      const admit = (refused: ApiError | undefined) =>
        done(refused ?? (service.accepting() ? undefined : errors.unavailable('endpoint_stopped', 'The endpoint is stopping or stopped: no new requests are accepted.')));
      // A callback hook: the token check answers at once unless the token file changed.
      const checked = authenticate(request);
      if (checked instanceof Promise) checked.then(admit, done);
      else admit(checked);
    },
  });
  app.addHook('onSend', chatAnswerMetrics(service.metrics, service.profiles));
  await app.register(healthRoutes, { service });
  await app.register(modelRoutes, { service });
  await app.register(chatRoutes, { service, limits: service.chatLimits });
  await app.register(responsesRoutes, { service, limits: service.chatLimits });
  // Multipart forms (transcriptions): one file of at most 8 MiB, a few short fields.
  await app.register(fastifyMultipart, { limits: { fileSize: TRANSCRIPTION_WAV.maxBytes, files: 1, fields: 10, fieldSize: 1024, parts: 12 } });
  await app.register(transcriptionRoutes, { service });
  await app.register(speechRoutes, { service });
  await app.register(imageRoutes, { service });
  return app;
}

/** The UI/admin listener: the operator console at `/` and its session API under /api/v1. */
export async function buildAdminApp(service: Service): Promise<App> {
  const app = createListenerApp('admin', service.log, {
    http: service.config.http,
    onAccess: requestMetrics(service.metrics, 'admin', service.profiles),
    // An operator's session (adminAuth); a login proves the password only with its body.
    credited: (request) => request.adminSession !== undefined,
  });
  app.addHook('onSend', securityHeaders);
  await app.register(fastifyCookie, { secret: service.secrets.sessionKey });
  await app.register(adminMetricsRoutes, { service });
  await app.register(adminSessionRoutes, { service });
  await app.register(adminEndpointRoutes, { service });
  await app.register(adminProfileRoutes, { service });
  await app.register(adminChatTestRoutes, { service });
  await app.register(adminWorkerRoutes, { service });
  await app.register(adminAudioPolicyRoutes, { service });
  await app.register(adminImageTestRoutes, { service });
  await app.register(adminSpeechTestRoutes, { service });
  await app.register(adminConsoleRoutes, { service });
  await app.register(adminEnhancerRoutes, { service });
  await app.register(adminModelRoutes, { service });
  await app.register(consoleRoutes, { service });
  return app;
}
