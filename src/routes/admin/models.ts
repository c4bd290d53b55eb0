// CONTRACT section 10, the models before a profile: the files in the operator's folders with their
// facts and forecast, a hub repository's files, and a remote GGUF's facts and forecast read from
// its header with range requests, before any download; then the pulls of a hub's model file into
// `<state>/models` (202, followed in GET and the console's event stream), and their cancel; and a
// profile made of a listed file (created as `POST /api/v1/profiles` creates one: unpublished, the
// same checks). A repo, revision or path that is not a plain name (`..`, `.`, an empty segment, an
// absolute path), or a pull of a file that is no model file, is refused before the hub is asked; a
// hub that cannot be reached or refuses is a 502 that names its answer.
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { HubError } from '../../adapters/hubDownload.js';
import { ApiError, errors } from '../../errors.js';
import type { Service } from '../../service.js';
import { chatParamsSchema, profileInputSchema, profileNameSchema } from '../../store/profile.schema.js';
import { RemoteModelError } from '../../system/models/modelHub.js';
import { fileProfile } from '../../system/models/modelProfile.js';
import { pullable, type PullStart } from '../../system/models/modelPulls.js';
import { adminAuth } from '../auth.js';
import { clientGone } from '../client.js';
import { validationError } from '../errors.js';
import { createProfile } from './profiles.js';

/** Segments of plain names: no `.` or `..`, no empty segment (so no leading `/`), no backslash or control character. */
const plainPath = (what: string, maxSegments: number) =>
  z
    .string()
    .min(1)
    .max(1000)
    .refine((value) => {
      const segments = value.split('/');
      return segments.length <= maxSegments && segments.every((s) => s !== '' && s !== '.' && s !== '..' && !s.includes('\\') && ![...s].some((c) => c < ' ' || c === '\u007f'));
    }, `${what}: a plain name (no "..", ".", empty segments or absolute paths)`);

const repo = plainPath('repo', 2).refine((value) => value.split('/').length === 2, 'repo: owner/name');
const revision = plainPath('revision', 1).default('main');
const hubQuery = z.strictObject({ repo, revision });
const forecastQuery = z.strictObject({ repo, revision, path: plainPath('path', 64) });
const pullBody = z.strictObject({ repo, revision, path: plainPath('path', 64).refine(pullable, 'path: a model file (a .gguf, or a whisper ggml-*.bin)') });
const pullId = z.strictObject({ id: z.string().min(1).max(100) });

/** A profile from a model file: the path as the listing names it, the profile's name, perhaps its context. */
const fileProfileBody = z.strictObject({
  path: z.string().min(1).max(4096),
  name: profileNameSchema,
  context: chatParamsSchema.shape.context.unwrap().optional(),
});

/** A hub failure as CONTRACT section 10 names it: unreachable (the network), else refused (its status, a redirect not followed). */
function hubFailure(error: unknown, what: string): unknown {
  if (error instanceof RemoteModelError) return errors.modelUnreadable(`${what}: ${error.message}`);
  if (!(error instanceof HubError)) return error;
  const code = error.code === 'network' ? 'hub_unreachable' : 'hub_refused';
  return new ApiError(502, 'server_error', code, `${what}: ${error.message}`);
}

/** A pull that was not started, as CONTRACT section 10 names it. */
function pullRefused(refused: Extract<PullStart, { ok: false }>): ApiError {
  if (refused.code === 'invalid_value') return errors.invalidValue('path', refused.message);
  if (refused.code === 'pull_running') return errors.conflict('pull_running', refused.message);
  return errors.insufficientStorage(refused.message);
}

export const adminModelRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();
  app.addHook('onRequest', adminAuth(service));

  app.get('/api/v1/model-files', async () => service.models.list());

  app.post('/api/v1/model-files/profile', { schema: { body: fileProfileBody } }, async (request, reply) => {
    const entry = await service.models.find(request.body.path);
    const input = profileInputSchema.safeParse(fileProfile(entry, request.body, service.models.dirs));
    if (!input.success) throw validationError(input.error.issues);
    return reply.code(201).send(await createProfile(service, input.data));
  });

  app.get('/api/v1/model-hub/files', { schema: { querystring: hubQuery } }, async (request, reply) => {
    const { repo: id, revision: rev } = request.query;
    return service.modelHub.files(id, rev, clientGone(reply)).catch((error: unknown) => {
      throw hubFailure(error, `The hub did not list ${id} at ${rev}`);
    });
  });

  app.get('/api/v1/model-hub/forecast', { schema: { querystring: forecastQuery } }, async (request, reply) => {
    const { repo: id, revision: rev, path } = request.query;
    return service.modelHub.forecast(id, rev, path, clientGone(reply)).catch((error: unknown) => {
      throw hubFailure(error, `No forecast for ${id}/${path} at ${rev}`);
    });
  });

  app.post('/api/v1/model-pulls', { schema: { body: pullBody } }, async (request, reply) => {
    const { repo: id, revision: rev, path } = request.body;
    const started = await service.pulls.pull({ repo: id, revision: rev, path }, clientGone(reply)).catch((error: unknown) => {
      throw hubFailure(error, `The hub did not answer for ${id}/${path} at ${rev}`);
    });
    if (!started.ok) throw pullRefused(started);
    return reply.code(202).send(started.pull);
  });

  app.get('/api/v1/model-pulls', async () => ({ pulls: service.pulls.list() }));

  app.post('/api/v1/model-pulls/:id/cancel', { schema: { params: pullId, body: z.strictObject({}).nullish() } }, async (request) => {
    const cancelled = await service.pulls.cancel(request.params.id);
    if (cancelled.ok) return cancelled.pull;
    throw cancelled.code === 'pull_not_found' ? errors.notFound(cancelled.code, cancelled.message) : errors.conflict(cancelled.code, cancelled.message);
  });
};
