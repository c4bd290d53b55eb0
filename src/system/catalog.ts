// What the inference API can see (spec 2.1, 2.2, 4.1): a profile is visible only while it is
// published and executable. `service-image` names the published image profile. A request takes
// the frozen profile snapshot it resolved here and keeps it (rule 6).
import type { RuntimeLookup } from '../adapters/runtimes.js';
import { IMAGE_ALIAS, type Category, type ProfileView, type StoredProfile } from '../store/profile.schema.js';
import type { ProfileStore } from '../store/profiles.js';
import { profileBlockers } from './blockers.js';

export class Catalog {
  constructor(
    readonly profiles: ProfileStore,
    readonly lookup: RuntimeLookup,
  ) {}

  async view(profile: StoredProfile): Promise<ProfileView> {
    const blockers = await profileBlockers(profile, this.lookup);
    return { ...profile, published: this.profiles.isPublished(profile.id), executable: blockers.length === 0, blockers };
  }

  async views(): Promise<ProfileView[]> {
    return Promise.all(this.profiles.list().map((p) => this.view(p)));
  }

  /** Published and executable profiles of a category, in publication order. */
  async listed(category: Category): Promise<StoredProfile[]> {
    const candidates = this.profiles.published.flatMap((id) => {
      const profile = this.profiles.get(id);
      return profile?.category === category ? [profile] : [];
    });
    const blockers = await Promise.all(candidates.map((p) => profileBlockers(p, this.lookup)));
    return candidates.filter((_, i) => blockers[i]?.length === 0);
  }

  /**
   * The snapshot a request works on: the published, executable profile of this category named
   * `model` (or, for images, the alias `service-image`). Undefined means `model_not_found`.
   */
  async resolve(category: Category, model: string): Promise<StoredProfile | undefined> {
    const listed = await this.listed(category);
    if (category === 'image' && model === IMAGE_ALIAS) return listed[0];
    return listed.find((p) => p.name === model);
  }
}
