// `audio-policy.json` (spec 2.4, CONTRACT section 2): the two audio policy records, one per speech
// worker kind, `{ "settings": [{ "kind", "mode", "profile_id" }, …] }`, mode 0600, written
// atomically. A kind without a record is `auto` with no profile (spec 3.6: the default).
import path from 'node:path';
import { z } from 'zod';
import type { AudioKind, AudioPolicyRecord } from './audioPolicy.record.js';
import { readJsonFile, StateFileError, WriteQueue, writeJsonAtomic } from './files.js';

export const AUDIO_KINDS: readonly AudioKind[] = ['tts', 'stt'];

/** One record as the API and the file spell it. */
export const audioPolicyRecordSchema = z.strictObject({
  kind: z.enum(['tts', 'stt']),
  mode: z.enum(['auto', 'warm', 'per_request']),
  profile_id: z.string().min(1).max(100).nullable(),
});
export type AudioPolicyJson = z.output<typeof audioPolicyRecordSchema>;

const fileSchema = z.looseObject({ settings: z.array(audioPolicyRecordSchema).max(2) }).refine(
  (f) => new Set(f.settings.map((s) => s.kind)).size === f.settings.length,
  'one record per kind',
);

export const toJson = (r: AudioPolicyRecord): AudioPolicyJson => ({ kind: r.kind, mode: r.mode, profile_id: r.profileId });

export class AudioPolicyStore {
  readonly file: string;
  #records: Record<AudioKind, AudioPolicyRecord>;
  readonly #writes = new WriteQueue();

  private constructor(file: string, records: Record<AudioKind, AudioPolicyRecord>) {
    this.file = file;
    this.#records = records;
  }

  static async open(dir: string): Promise<AudioPolicyStore> {
    const file = path.join(dir, 'audio-policy.json');
    const records: Record<AudioKind, AudioPolicyRecord> = {
      tts: { kind: 'tts', mode: 'auto', profileId: null },
      stt: { kind: 'stt', mode: 'auto', profileId: null },
    };
    const raw = await readJsonFile(file);
    if (raw !== undefined) {
      const parsed = fileSchema.safeParse(raw);
      if (!parsed.success) throw new StateFileError(file, `has unexpected content: ${z.prettifyError(parsed.error)}`);
      for (const s of parsed.data.settings) records[s.kind] = { kind: s.kind, mode: s.mode, profileId: s.profile_id };
    }
    return new AudioPolicyStore(file, records);
  }

  get(kind: AudioKind): Readonly<AudioPolicyRecord> {
    return this.#records[kind];
  }

  /** Both records, TTS first. */
  list(): AudioPolicyRecord[] {
    return AUDIO_KINDS.map((kind) => ({ ...this.#records[kind] }));
  }

  /** Writes the file with this record replaced; the in-memory copy changes only after the write succeeded. */
  set(record: AudioPolicyRecord): Promise<void> {
    return this.#writes.run(async () => {
      const next = { ...this.#records, [record.kind]: { ...record } };
      await writeJsonAtomic(this.file, { settings: AUDIO_KINDS.map((kind) => toJson(next[kind])) });
      this.#records = next;
    });
  }
}
