// CONTRACT section 4: profile CRUD with one zod schema per category and optimistic revisions.
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { CATEGORIES, IMAGE_ALIAS, paramsSchemas, profileInputSchema, profileNameSchema, profileUpdateSchema, type ProfileInput, type ProfileView } from '../../store/profile.schema.js';
import { ProfileError } from '../../store/profiles.js';
import type { Service } from '../../service.js';
import { adminAuth } from '../auth.js';
import { errors } from '../../errors.js';

const idParams = z.strictObject({ id: z.string().min(1).max(100) });

function mapProfileError(error: unknown): unknown {
  if (!(error instanceof ProfileError)) return error;
  switch (error.code) {
    case 'not_found':
      return errors.notFound('profile_not_found', error.message);
    case 'stale_revision':
      return errors.conflict('stale_revision', error.message);
    case 'name_taken':
      return errors.conflict('name_taken', error.message);
    case 'category_change':
      return errors.invalidValue('category', error.message);
    case 'profile_limit':
      return errors.conflict('profile_limit', error.message);
  }
}

/**
 * Creates a profile from a body the profile schema has checked, unpublished: `POST
 * /api/v1/profiles`, and a model file's profile (src/routes/admin/models.ts), so that both refuse
 * the same names and limits the same way.
 */
export async function createProfile(service: Pick<Service, 'profiles' | 'catalog'>, input: ProfileInput): Promise<ProfileView> {
  const profile = await service.profiles.create(input).catch((error: unknown) => {
    throw mapProfileError(error);
  });
  return service.catalog.view(profile);
}

/**
 * The schemas the profile routes validate with, as JSON Schema (what the operator may write, so
 * defaults are optional): the console draws its forms from them, so a form and the API cannot
 * disagree.
 */
function profileSchemas() {
  const input = (schema: z.ZodType) => z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' });
  return {
    name: input(profileNameSchema),
    categories: Object.fromEntries(CATEGORIES.map((category) => [category, input(paramsSchemas[category])])),
    image_alias: IMAGE_ALIAS,
  };
}

export const adminProfileRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();
  const { profiles, catalog } = service;
  app.addHook('onRequest', adminAuth(service));
  app.setErrorHandler((error, _request, _reply) => {
    throw mapProfileError(error);
  });

  const existing = (id: string) => {
    const profile = profiles.get(id);
    if (!profile) throw errors.notFound('profile_not_found', `no profile with id ${id}`);
    return profile;
  };

  const schemas = profileSchemas();
  app.get('/api/v1/profile-schemas', async () => schemas);

  app.get('/api/v1/profiles', async () => ({ profiles: await catalog.views() }));

  app.get('/api/v1/profiles/:id', { schema: { params: idParams } }, async (request) => catalog.view(existing(request.params.id)));

  app.post('/api/v1/profiles', { schema: { body: profileInputSchema } }, async (request, reply) => {
    return reply.code(201).send(await createProfile(service, request.body));
  });

  app.put('/api/v1/profiles/:id', { schema: { params: idParams, body: profileUpdateSchema } }, async (request) => {
    const { revision, name, category, params, prompt_enhancer } = request.body;
    const input = { name, category, params, ...(prompt_enhancer ? { prompt_enhancer } : {}) } as z.output<typeof profileInputSchema>;
    if (request.body.id !== undefined && request.body.id !== request.params.id) {
      throw errors.invalidValue('id', `the body's id ${request.body.id} differs from the path's ${request.params.id}`);
    }
    return catalog.view(await profiles.update(request.params.id, revision, input));
  });

  app.delete('/api/v1/profiles/:id', { schema: { params: idParams } }, async (request, reply) => {
    await profiles.delete(request.params.id);
    return reply.code(204).send();
  });
};
