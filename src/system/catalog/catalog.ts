// What the inference API can see (spec 2.1, 2.2, 4.1): a profile is visible only while it is
// published and executable. `service-image` names the published image profile. A request takes
// the frozen profile snapshot it resolved here and keeps it (rule 6).
//
// Blockers are computed when asked, never stored: a model file that appears or a runtime that
// goes makes the profile come or go at once (rule 4). So a request's look-up checks only the one
// profile it names, found through the store's indexes: its cost does not grow with the number of
// profiles. Concurrent checks of one profile snapshot share one computation; a new
// revision is a new snapshot and never joins an older check.
import path from 'node:path';
import { FIT_TOOL_MISSING_NOTE } from '../../../machines/supervisor/index.js';
import { probeGpus } from '../../adapters/gpus.js';
import { errors, type ApiError } from '../../errors.js';
import { resolveRuntime, type RuntimeLookup } from '../../adapters/runtimes.js';
import type { Config } from '../../config.js';
import { IMAGE_ALIAS, type Category, type ProfileView, type StoredProfile } from '../../store/profile.schema.js';
import type { ProfileStore } from '../../store/profiles.js';
import { chatReadyNow, profileBlockers } from './blockers.js';

/** What each category is, and the route and list that take it, for a model_not_found that says where to go. */
const CATEGORY_WORDS: Record<Category, { what: string; where: string }> = {
  chat: { what: 'a chat profile', where: 'POST /v1/chat/completions (GET /v1/models lists them)' },
  image: { what: 'an image profile', where: `POST /v1/images/generations and /v1/images/edits, as '${IMAGE_ALIAS}'` },
  tts: { what: 'a speech (TTS) profile', where: 'POST /v1/audio/speech (GET /v1/audio/speech/models lists them)' },
  stt: { what: 'a transcription (STT) profile', where: 'POST /v1/audio/transcriptions (GET /v1/audio/transcriptions/models lists them)' },
};

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

  /**
   * The snapshot a chat request works on, when it is known without a promise that it is published
   * and executable (chatReadyNow: nothing it needs changed since it was last checked); undefined
   * otherwise, and then `require` decides. The hot path of every chat request.
   */
  readyNow(category: Category, model: string): StoredProfile | undefined {
    if (category !== 'chat' || this.blockersOf !== profileBlockers) return undefined;
    const profile = this.profiles.byName(model);
    if (!profile || profile.category !== category || !this.profiles.isPublished(profile.id)) return undefined;
    return chatReadyNow(profile, this.lookup) ? profile : undefined;
  }

  /** The snapshot a request works on (see resolve), or the model_not_found that says why there is none. */
  async require(category: Category, model: string): Promise<StoredProfile> {
    const profile = await this.resolve(category, model);
    if (profile) return profile;
    throw this.notFound(category, model);
  }

  /**
   * Why `model` names no profile for this category, in words for an API client: a published
   * profile of another category says where it belongs; a published one that cannot run says where
   * the operator sees why (its blockers name server paths, so they stay on the admin side). An
   * unpublished profile is not told apart from one that does not exist.
   */
  private notFound(category: Category, model: string): ApiError {
    const alias = category === 'image' && model === IMAGE_ALIAS;
    const profile = alias ? this.profiles.publishedImage() : this.profiles.byName(model);
    if (alias && !profile) {
      return errors.modelNotFound(model, `No image profile is published: '${IMAGE_ALIAS}' names the published one; the operator publishes one in the console (Endpoint, or POST /api/v1/endpoint/profile).`);
    }
    if (!profile || !this.profiles.isPublished(profile.id)) return errors.modelNotFound(model);
    if (profile.category !== category) {
      const theirs = CATEGORY_WORDS[profile.category];
      return errors.modelNotFound(model, `The model '${model}' is ${theirs.what}, not ${CATEGORY_WORDS[category].what}: send it to ${theirs.where}.`);
    }
    return errors.modelNotFound(
      model,
      `The model '${model}' is published but not executable now (something it needs is missing): the operator sees why in the console's profile list, or at GET /api/v1/profiles/${profile.id} of the admin API (its blockers).`,
    );
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
