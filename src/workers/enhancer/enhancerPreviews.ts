// The prompt enhancer's preview (spec 4.7): "In the image test, a preview shows original and
// suggestion; accepting, or keeping the original, skips the re-enhancement for exactly that test
// job." One preview runs at a time, under the image reservation (a busy one is a conflict at once,
// as for the image test); the last one stays in RAM only (never a file or a log line) for GET and
// for the image test that follows it. Every change emits `change`.
import { EventEmitter } from 'eventemitter3';
import { errors } from '../../errors.js';
import type { ImageProfile } from '../image/image.js';
import { enhancerTask, runEnhancerPreview, type ImageInput, type ImageJobParts } from '../image/imageJob.js';
import type { EnhancerPreview } from '../../system/observe/console.types.js';

/** What the operator does with a preview in the image test: take the suggestion, or keep the original. */
export type PreviewChoice = 'accept' | 'keep';

export class EnhancerPreviews extends EventEmitter<{ change: [] }> {
  #last: EnhancerPreview | null = null;
  #running = false;

  constructor(private readonly service: ImageJobParts) {
    super();
  }

  last(): EnhancerPreview | null {
    return this.#last ? { ...this.#last } : null;
  }

  running(): boolean {
    return this.#running;
  }

  /** Runs the enhancer for `profile` and the prompt (and reference images, which make it i2i). */
  async run(profile: ImageProfile, input: ImageInput, signal: AbortSignal): Promise<EnhancerPreview> {
    if (this.#running) throw errors.conflict('image_busy', 'A preview is running: the image reservation is busy.');
    this.#running = true;
    const images = input.references?.references.length ?? 0;
    try {
      const answer = await runEnhancerPreview(this.service, profile, input, signal);
      this.#last = {
        profile_id: profile.id,
        revision: profile.revision,
        task: enhancerTask(images),
        images,
        original: input.prompt,
        suggestion: answer.prompt,
        wh_ratio: answer.whRatio,
        created_at: new Date().toISOString(),
      };
      this.emit('change');
      return { ...this.#last };
    } finally {
      this.#running = false;
    }
  }

  /**
   * The prompt an image test uses after the operator's choice on the last preview: it must be the
   * preview of this profile and revision, for this very prompt, made without reference images
   * (the image test has none).
   */
  choose(profile: ImageProfile, prompt: string, choice: PreviewChoice): string {
    const preview = this.#last;
    if (!preview || preview.profile_id !== profile.id) throw errors.conflict('preview_mismatch', `There is no preview for profile ${profile.name}: run the preview first.`);
    if (preview.revision !== profile.revision) throw errors.conflict('preview_mismatch', `The preview was made for revision ${preview.revision} of ${profile.name}; it is at ${profile.revision} now: preview again.`);
    if (preview.original !== prompt) throw errors.conflict('preview_mismatch', 'The prompt differs from the one the preview was made for: preview again, or send the previewed prompt.');
    if (preview.task !== 't2i') throw errors.conflict('preview_mismatch', 'The last preview read reference images: the image test makes images from text only.');
    return choice === 'accept' ? preview.suggestion : preview.original;
  }
}
