// Profiles and their publication (spec 2.1, 2.2; CONTRACT section 4). Each profile is one file
// `profiles/<id>.json`; the published ids live in `endpoint.json`. Every stored profile object is
// frozen and replaced, never mutated, so a request that took a profile when it was accepted keeps a
// consistent snapshot (rule 6) whatever the operator saves afterwards.
import { randomBytes } from 'node:crypto';
import { readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { EventEmitter } from 'eventemitter3';
import { z } from 'zod';
import type { EndpointStore } from './endpoint.js';
import { ensurePrivateDir, readJsonFile, StateFileError, WriteQueue, writeJsonAtomic } from './files.js';
import type { Category, ProfileInput, StoredProfile } from './profile.schema.js';
import { storedProfileSchema } from './profile.schema.js';

export type ProfileEvents = {
  /** A profile was created (the list changed; nothing can wait on it yet). */
  'profile.created': (created: { id: string }) => void;
  /** A profile got a new revision or was deleted: waiting requests of it must be rejected. */
  'profile.changed': (change: { id: string; revision: number | null }) => void;
  /** The set of published profile ids changed (`removed` lost their publication). */
  'publication.changed': (change: { published: readonly string[]; removed: readonly string[] }) => void;
};

/**
 * The most profiles a state directory holds (10 000 make the profile list take 1.1 s and hold up
 * the model lists). A start with more on disk keeps them all; only new ones are refused.
 */
export const MAX_PROFILES = 1000;

export class ProfileError extends Error {
  constructor(
    readonly code: 'not_found' | 'stale_revision' | 'name_taken' | 'category_change' | 'profile_limit',
    message: string,
  ) {
    super(message);
    this.name = 'ProfileError';
  }
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) deepFreeze(inner);
  }
  return value;
}

/**
 * Publication rules 2 and 3 on a saved list: unknown ids leave, and of several image ids only the
 * first saved one stays.
 */
export function normalisePublished(published: readonly string[], categoryOf: (id: string) => Category | undefined): string[] {
  const result: string[] = [];
  let imageSeen = false;
  for (const id of published) {
    const category = categoryOf(id);
    if (category === undefined || result.includes(id)) continue;
    if (category === 'image') {
      if (imageSeen) continue;
      imageSeen = true;
    }
    result.push(id);
  }
  return result;
}

export class ProfileStore extends EventEmitter<ProfileEvents> {
  readonly dir: string;
  readonly #endpoint: EndpointStore;
  #profiles: Map<string, StoredProfile>;
  // Indexes kept beside the profiles, so that a request's look-up by name and its publication
  // check cost the same with one profile or a thousand.
  /** API profile name → id. */
  readonly #names = new Map<string, string>();
  #published: readonly string[] = [];
  #publishedIds: ReadonlySet<string> = new Set();
  #publishedImageId: string | undefined;
  /** The list in creation order, made again after a change. */
  #sorted: StoredProfile[] | undefined;
  readonly #writes = new WriteQueue();
  readonly #now: () => Date;

  private constructor(dir: string, endpoint: EndpointStore, profiles: Map<string, StoredProfile>, now: () => Date) {
    super();
    this.dir = dir;
    this.#endpoint = endpoint;
    this.#profiles = profiles;
    this.#now = now;
    for (const profile of profiles.values()) this.#names.set(profile.name, profile.id);
    this.#setPublished(normalisePublished(endpoint.record.published, (id) => profiles.get(id)?.category));
  }

  static async open(stateDir: string, endpoint: EndpointStore, now: () => Date = () => new Date()): Promise<ProfileStore> {
    const dir = path.join(stateDir, 'profiles');
    await ensurePrivateDir(dir);
    const profiles = new Map<string, StoredProfile>();
    const names = (await readdir(dir)).filter((n) => n.endsWith('.json') && !n.startsWith('.')).sort();
    for (const name of names) {
      const file = path.join(dir, name);
      const parsed = storedProfileSchema.safeParse(await readJsonFile(file));
      if (!parsed.success) throw new StateFileError(file, `is not a valid profile: ${z.prettifyError(parsed.error)}`);
      if (`${parsed.data.id}.json` !== name) throw new StateFileError(file, `holds profile id "${parsed.data.id}", which does not match its file name`);
      profiles.set(parsed.data.id, deepFreeze(parsed.data));
    }
    return new ProfileStore(dir, endpoint, profiles, now);
  }

  #file(id: string): string {
    return path.join(this.dir, `${id}.json`);
  }

  list(): StoredProfile[] {
    this.#sorted ??= [...this.#profiles.values()].sort((a, b) => a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id));
    return [...this.#sorted];
  }

  /** Keeps the profile and its indexes in step (undefined: it was deleted). */
  #put(id: string, profile: StoredProfile | undefined): void {
    const before = this.#profiles.get(id);
    if (before) this.#names.delete(before.name);
    if (profile) {
      this.#profiles.set(id, profile);
      this.#names.set(profile.name, id);
    } else {
      this.#profiles.delete(id);
    }
    this.#sorted = undefined;
  }

  /** The current frozen snapshot of a profile (rule 6: a request keeps the one it took). */
  get(id: string): StoredProfile | undefined {
    return this.#profiles.get(id);
  }

  byName(name: string): StoredProfile | undefined {
    const id = this.#names.get(name);
    return id === undefined ? undefined : this.#profiles.get(id);
  }

  get published(): readonly string[] {
    return this.#published;
  }

  isPublished(id: string): boolean {
    return this.#publishedIds.has(id);
  }

  /** The published image profile, if any (what `service-image` names). */
  publishedImage(): StoredProfile | undefined {
    return this.#publishedImageId === undefined ? undefined : this.#profiles.get(this.#publishedImageId);
  }

  #setPublished(next: readonly string[]): void {
    this.#published = Object.freeze([...next]);
    this.#publishedIds = new Set(next);
    // Rule 2: at most one image profile is published (a category never changes).
    this.#publishedImageId = next.find((id) => this.#profiles.get(id)?.category === 'image');
  }

  #assertNameFree(name: string, exceptId?: string): void {
    const other = this.byName(name);
    if (other && other.id !== exceptId) throw new ProfileError('name_taken', `the API profile name "${name}" is already used by profile ${other.id}`);
  }

  create(input: ProfileInput, id?: string): Promise<StoredProfile> {
    return this.#writes.run(async () => {
      if (this.#profiles.size >= MAX_PROFILES) {
        throw new ProfileError('profile_limit', `there are ${this.#profiles.size} profiles, the most a service keeps is ${MAX_PROFILES}: delete one first`);
      }
      this.#assertNameFree(input.name);
      const profileId = id ?? `p-${randomBytes(6).toString('hex')}`;
      if (this.#profiles.has(profileId)) throw new ProfileError('name_taken', `profile id ${profileId} exists`);
      const now = this.#now().toISOString();
      const profile = deepFreeze(storedProfileSchema.parse({ ...input, id: profileId, revision: 1, created_at: now, updated_at: now }));
      await writeJsonAtomic(this.#file(profileId), profile);
      this.#put(profileId, profile);
      this.emit('profile.created', { id: profileId });
      return profile;
    });
  }

  /** Optimistic update: `revision` must be the one the caller read, else ProfileError stale_revision. */
  update(id: string, revision: number, input: ProfileInput): Promise<StoredProfile> {
    return this.#writes.run(async () => {
      const current = this.#profiles.get(id);
      if (!current) throw new ProfileError('not_found', `no profile with id ${id}`);
      if (current.revision !== revision) {
        throw new ProfileError('stale_revision', `profile ${id} is at revision ${current.revision}, not ${revision}: read it again and reapply the change`);
      }
      if (current.category !== input.category) {
        throw new ProfileError('category_change', `the category of a profile cannot change (${current.category} → ${input.category})`);
      }
      this.#assertNameFree(input.name, id);
      const profile = deepFreeze(
        storedProfileSchema.parse({ ...input, id, revision: revision + 1, created_at: current.created_at, updated_at: this.#now().toISOString() }),
      );
      await writeJsonAtomic(this.#file(id), profile);
      this.#put(id, profile);
      this.emit('profile.changed', { id, revision: profile.revision });
      return profile;
    });
  }

  delete(id: string): Promise<void> {
    return this.#writes.run(async () => {
      if (!this.#profiles.has(id)) throw new ProfileError('not_found', `no profile with id ${id}`);
      if (this.#publishedIds.has(id)) await this.#writePublished(this.#published.filter((p) => p !== id));
      await rm(this.#file(id), { force: true });
      this.#put(id, undefined);
      this.emit('profile.changed', { id, revision: null });
    });
  }

  /**
   * Publishes or unpublishes a profile (rules 1-2). Publishing an image profile removes every other
   * image publication in the same atomic write of `endpoint.json`.
   */
  setPublished(id: string, enabled: boolean): Promise<readonly string[]> {
    return this.#writes.run(async () => {
      const profile = this.#profiles.get(id);
      if (!profile) throw new ProfileError('not_found', `no profile with id ${id}`);
      let next: string[];
      if (!enabled) next = this.#published.filter((p) => p !== id);
      else if (this.#publishedIds.has(id)) next = [...this.#published];
      else if (profile.category === 'image') next = [...this.#published.filter((p) => this.#profiles.get(p)?.category !== 'image'), id];
      else next = [...this.#published, id];
      await this.#writePublished(next);
      return this.#published;
    });
  }

  async #writePublished(next: string[]): Promise<void> {
    const nextIds = new Set(next);
    const removed = this.#published.filter((id) => !nextIds.has(id));
    const changed = removed.length > 0 || next.length !== this.#published.length;
    await this.#endpoint.update({ published: next });
    this.#setPublished(next);
    if (changed) this.emit('publication.changed', { published: this.#published, removed });
  }
}
