// Disk room for uploads: before a request's upload is accepted, the filesystem that
// holds the job folders must have room for the most it may write, beside what the uploads already
// accepted may still write, plus a margin that keeps the state writes (profiles, tokens, records)
// working. Each accepted upload reserves its most until its job folder is removed. Free space is
// read by statfs each time (cheap; the host facts' df would be too slow per request).
import { errors } from '../errors.js';

/** Room kept free beside every upload: what the state directory still has to write. */
export const UPLOAD_MARGIN_BYTES = 512 * 1024 * 1024;

const mib = (bytes: number) => `${Math.round(bytes / 2 ** 20)} MiB`;

export class UploadRoom {
  #reserved = 0;

  constructor(
    /** Where the job folders live (`<state>/jobs`). */
    readonly dir: string,
    /** Free bytes on the filesystem holding a folder; null when unknown (then nothing is refused). */
    readonly free: (dir: string) => Promise<number | null>,
    readonly marginBytes = UPLOAD_MARGIN_BYTES,
  ) {}

  /** Bytes the accepted uploads may still write. */
  get reserved(): number {
    return this.#reserved;
  }

  /**
   * Reserves `bytes` for one upload, or refuses it with 507 `insufficient_storage` naming the
   * numbers. The returned release gives the reservation back (safe to call more than once).
   */
  async reserve(bytes: number): Promise<() => void> {
    const free = await this.free(this.dir);
    if (free !== null && free - this.#reserved < bytes + this.marginBytes) {
      throw errors.insufficientStorage(
        `Not enough free disk space for this upload: it may need ${mib(bytes)}, uploads under way may still need ${mib(this.#reserved)}, and ${mib(this.marginBytes)} are kept free; ${mib(free)} are free. Retry later.`,
      );
    }
    this.#reserved += bytes;
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      this.#reserved -= bytes;
    };
  }
}
