// Disk room for uploads: before a request's upload is accepted, the filesystem that holds the job
// folders must have room for what it declares (its Content-Length, at most the most it may write),
// beside what the uploads already accepted may still write, plus a margin that keeps the state
// writes (profiles, tokens, records) working. Free space is read by statfs each time (cheap; the
// host facts' df would be too slow per request).
//
// What an upload has written is on the disk already, and statfs counts it: a reservation counts
// only what its upload may still write (what it holds, less what it wrote), and nothing once the
// upload is whole (settle(): its job may wait in the queue with its file on disk). An upload that
// declares no length holds nothing at first and grows as its bytes come, each step checked like a
// new upload. The reservation goes with its folder (release()).
import { errors } from '../errors.js';

/** Room kept free beside every upload: what the state directory still has to write. */
export const UPLOAD_MARGIN_BYTES = 512 * 1024 * 1024;

/** How much a reservation grows at least when its upload writes past what it holds. */
export const UPLOAD_GROWTH_BYTES = 1024 * 1024;

/** A size for the refusal: KiB below a MiB (an upload may declare a few hundred bytes), else MiB. */
const size = (bytes: number) => (bytes < 2 ** 20 ? `${Math.ceil(bytes / 2 ** 10)} KiB` : `${Math.round(bytes / 2 ** 20)} MiB`);

export class UploadRoom {
  readonly #held = new Set<UploadReservation>();

  constructor(
    /** Where the job folders live (`<state>/jobs`). */
    readonly dir: string,
    /** Free bytes on the filesystem holding a folder; null when unknown (then nothing is refused). */
    readonly free: (dir: string) => Promise<number | null>,
    readonly marginBytes = UPLOAD_MARGIN_BYTES,
  ) {}

  /** Reservations not released yet: accepted uploads whose folders are still there. */
  get count(): number {
    return this.#held.size;
  }

  /** Bytes the accepted uploads may still write (what they wrote is in the free space already). */
  get reserved(): number {
    let bytes = 0;
    for (const reservation of this.#held) bytes += reservation.outstanding;
    return bytes;
  }

  /**
   * Reserves room for one upload that may write `maxBytes` at most: its `declared` length when it
   * has one (never more than `maxBytes`), else nothing yet. Refuses with 507
   * `insufficient_storage`, naming the numbers, when the disk has no room for it.
   */
  async reserve(maxBytes: number, declared?: number): Promise<UploadReservation> {
    const bytes = declared === undefined ? 0 : Math.min(maxBytes, declared);
    await this.fit(bytes);
    const reservation = new UploadReservation(this, this.#held, maxBytes, bytes);
    this.#held.add(reservation);
    return reservation;
  }

  /** Whether `bytes` more fit beside what the uploads may still write and the margin; else the 507. */
  async fit(bytes: number): Promise<void> {
    const free = await this.free(this.dir);
    const reserved = this.reserved;
    if (free !== null && free - reserved < bytes + this.marginBytes) {
      throw errors.insufficientStorage(
        `Not enough free disk space for this upload: it may need ${size(bytes)}, uploads under way may still need ${size(reserved)}, and ${size(this.marginBytes)} are kept free; ${size(free)} are free. Retry later.`,
      );
    }
  }
}

/** One upload's share of the room, from its folder's creation to its removal. */
export class UploadReservation {
  #held: number;
  #written = 0;

  constructor(
    private readonly room: UploadRoom,
    private readonly all: Set<UploadReservation>,
    /** The most the upload may write. */
    readonly maxBytes: number,
    held: number,
  ) {
    this.#held = held;
  }

  /** What the upload may still write within its reservation. */
  get outstanding(): number {
    return Math.max(0, this.#held - this.#written);
  }

  /**
   * Counts `bytes` the upload is about to write. Past what it holds, the reservation first grows
   * (by UPLOAD_GROWTH_BYTES at least, never past its most), or the upload is refused with 507.
   */
  async take(bytes: number): Promise<void> {
    const needed = this.#written + bytes;
    if (needed > this.#held && this.#held < this.maxBytes) {
      const held = Math.min(this.maxBytes, Math.max(needed, this.#held + UPLOAD_GROWTH_BYTES));
      await this.room.fit(held - this.#held);
      this.#held = held;
    }
    this.#written = needed;
  }

  /** The upload is whole: it writes no more, and its bytes on disk count through the free space alone. */
  settle(): void {
    this.#held = this.#written;
  }

  /** Gives the reservation back (safe to call more than once). */
  release(): void {
    this.all.delete(this);
  }
}
