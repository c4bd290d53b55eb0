// The profile an operator's test runs (the chat test, the image test): it must exist, be of the
// test's category and be executable; it needs no publication. A missing runtime is a 503
// runtime_missing, another blocker a 409 profile_not_executable (both list the blockers).
import type { Service } from '../../service.js';
import type { Category, StoredProfile } from '../../store/profile.schema.js';
import { errors } from '../../errors.js';

export async function testProfile<C extends Category>(service: Pick<Service, 'profiles' | 'catalog'>, id: string, category: C): Promise<Extract<StoredProfile, { category: C }>> {
  const profile = service.profiles.get(id);
  if (!profile) throw errors.notFound('profile_not_found', `No profile with id ${id}.`);
  if (profile.category !== category) {
    throw errors.invalidValue('profile_id', `Profile ${id} is a ${profile.category} profile, not ${category === 'image' ? 'an' : 'a'} ${category} profile.`);
  }
  const { blockers } = await service.catalog.view(profile);
  if (blockers.length > 0) {
    const message = `Profile ${profile.name} cannot run: ${blockers.join('; ')}.`;
    throw blockers.some((b) => b.startsWith('runtime missing')) ? errors.unavailable('runtime_missing', message) : errors.conflict('profile_not_executable', message);
  }
  return profile as Extract<StoredProfile, { category: C }>;
}
