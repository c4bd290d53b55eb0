// What the inference API can see (spec 2.1, 2.2, 4.1): a profile is visible only while it is
// published and executable. `service-image` names the published image profile. A request takes
// the frozen profile snapshot it resolved here and keeps it (rule 6).
//
// Blockers are computed when asked, never stored: a model file that appears or a runtime that
// goes makes the profile come or go at once (rule 4). So a request's look-up checks only the one
// profile it names, found through the store's indexes: its cost does not grow with the number of
// profiles (issue 15). Concurrent checks of one profile snapshot share one computation; a new
// revision is a new snapshot and never joins an older check.
import path from 'node:path';
import { FIT_TOOL_MISSING_NOTE } from '../../machines/supervisor/index.js';
import { probeGpus } from '../adapters/gpus.js';
import { resolveRuntime, type RuntimeLookup } from '../adapters/runtimes.js';
import type { Config } from '../config.js';
import { IMAGE_ALIAS, type Category, type ProfileView, type StoredProfile } from '../store/profile.schema.js';
import type { ProfileStore } from '../store/profiles.js';
import { profileBlockers } from './blockers.js';

export type BlockersOf = (profile: StoredProfile, lookup: RuntimeLookup) => Promise<string[]>;

export class Catalog {
  /**
   * @param gpusPresent whether the GPU inventory (real or simulated) has a GPU now; asked only
   * when a notice depends on it.
   */
  constructor(
    readonly profiles: ProfileStore,
    readonly lookup: RuntimeLookup,
    readonly gpusPresent: () => Promise<boolean> = async () => false,
    readonly blockersOf: BlockersOf = profileBlockers,
  ) {}

  /** Checks running now, by profile snapshot. */
  readonly #checking = new Map<StoredProfile, Promise<string[]>>();

  /** The profile's blockers now; a check of the same snapshot already running is joined. */
  blockers(profile: StoredProfile): Promise<string[]> {
    let check = this.#checking.get(profile);
    if (!check) {
      check = this.blockersOf(profile, this.lookup).finally(() => this.#checking.delete(profile));
      this.#checking.set(profile, check);
    }
    return check;
  }

  async view(profile: StoredProfile, gpus?: () => Promise<boolean>): Promise<ProfileView> {
    const [blockers, notices] = await Promise.all([this.blockers(profile), this.notices(profile, gpus ?? this.gpusPresent)]);
    return { ...profile, published: this.profiles.isPublished(profile.id), executable: blockers.length === 0, blockers, notices };
  }

  /** Every profile's view; `gpusPresent` when the caller has just probed the GPUs itself. */
  async views(gpusPresent?: boolean): Promise<ProfileView[]> {
    // One GPU probe for all profiles, and only when a notice needs it.
    let probe: Promise<boolean> | undefined = gpusPresent === undefined ? undefined : Promise.resolve(gpusPresent);
    const gpus = () => (probe ??= this.gpusPresent());
    return Promise.all(this.profiles.list().map((p) => this.view(p, gpus)));
  }

  /**
   * What does not block a profile but changes how it runs: a chat profile without a fixed split,
   * on a host with GPUs, whose build has no llama-fit-params runs with our own layer estimate.
   */
  private async notices(profile: StoredProfile, gpus: () => Promise<boolean>): Promise<string[]> {
    if (profile.category !== 'chat' || profile.params.gpuSplit !== null) return [];
    if (await resolveRuntime('llama-fit-params', this.lookup)) return [];
    return (await gpus()) ? [FIT_TOOL_MISSING_NOTE] : [];
  }

  /** Published and executable profiles of a category, in publication order. */
  async listed(category: Category): Promise<StoredProfile[]> {
    const candidates = this.profiles.published.flatMap((id) => {
      const profile = this.profiles.get(id);
      return profile?.category === category ? [profile] : [];
    });
    const blockers = await Promise.all(candidates.map((p) => this.blockers(p)));
    return candidates.filter((_, i) => blockers[i]?.length === 0);
  }

  /**
   * The snapshot a request works on: the published, executable profile of this category named
   * `model` (or, for images, the alias `service-image`). Undefined means `model_not_found`.
   * Names are unique, so the index finds the one profile there can be, and only it is checked.
   */
  async resolve(category: Category, model: string): Promise<StoredProfile | undefined> {
    const profile = category === 'image' && model === IMAGE_ALIAS ? this.profiles.publishedImage() : this.profiles.byName(model);
    if (!profile || profile.category !== category || !this.profiles.isPublished(profile.id)) return undefined;
    return (await this.blockers(profile)).length === 0 ? profile : undefined;
  }
}

/** Where the runtimes of a state directory's profiles are found (CONTRACT section 1). */
export function runtimeLookup(config: Pick<Config, 'env' | 'cacheDir' | 'stateDir'>): RuntimeLookup {
  return { env: config.env, cacheDir: config.cacheDir, enhancersDir: path.join(config.stateDir, 'enhancers') };
}

/**
 * The catalog of a state directory's profiles, as the running service and the `service-deck`
 * command for a stopped one both compute it. The profile view notes a missing fit tool only where
 * GPUs are present (real or simulated).
 */
export function catalogOf(config: Pick<Config, 'env' | 'cacheDir' | 'stateDir'>, profiles: ProfileStore): Catalog {
  const gpusPresent = () => probeGpus(config.env, new Set()).then((inventory) => inventory.gpus.length > 0, () => false);
  return new Catalog(profiles, runtimeLookup(config), gpusPresent);
}
