// Spec 4.1, the model lists, in OpenAI's list shape. Only published, executable profiles appear;
// images appear only as the alias `service-image`. Listing starts no worker.
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { IMAGE_ALIAS, type Category, type StoredProfile } from '../../store/profile.schema.js';
import type { Service } from '../../service.js';

const OWNER = 'service-deck';

export interface ModelEntry {
  id: string;
  object: 'model';
  created: number;
  owned_by: string;
}

function entry(id: string, profile: StoredProfile): ModelEntry {
  return { id, object: 'model', created: Math.floor(Date.parse(profile.created_at) / 1000), owned_by: OWNER };
}

export const modelRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();
  const { catalog } = service;

  const list = async (category: Category) => {
    const listed = await catalog.listed(category);
    const data = category === 'image' ? listed.slice(0, 1).map((p) => entry(IMAGE_ALIAS, p)) : listed.map((p) => entry(p.name, p));
    return { object: 'list' as const, data };
  };

  app.get('/v1/models', async () => list('chat'));
  app.get('/v1/images/models', async () => list('image'));
  app.get('/v1/audio/speech/models', async () => list('tts'));
  app.get('/v1/audio/transcriptions/models', async () => list('stt'));

  app.get('/v1/models/:model', { schema: { params: z.object({ model: z.string().min(1) }) } }, async (request) => {
    const profile = await catalog.require('chat', request.params.model);
    return entry(profile.name, profile);
  });
};
