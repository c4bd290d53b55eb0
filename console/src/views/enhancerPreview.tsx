// What the image test and the enhancers page both show of the prompt enhancer (spec 4.7): a
// preview's original beside its suggestion with the suggested shape, and what the enhancer worker
// is doing now, as the status on the event stream says (it loads a model first, which takes a while).
import { useRef } from 'preact/hooks';
import { status } from '../state.js';
import type { EnhancerPreview } from '../types.js';
import { since } from '../ui.js';

/** The enhancer's wh_ratio as the operator reads it: a suggestion that never changes the resolution. */
export function shapeText(whRatio: number | null): string {
  return whRatio === null
    ? 'no shape suggested'
    : `suggested shape W:H ≈ ${whRatio.toFixed(2)} (only a suggestion: the profile's resolution stays)`;
}

/** A prompt in a box that scrolls when long (a rewrite has up to 1000 characters); focusable, so a keyboard scrolls it too. */
export function PromptText({ caption, text, testId }: { caption: string; text: string; testId: string }) {
  return (
    <figure>
      <figcaption>{caption}</figcaption>
      <blockquote tabIndex={0} aria-label={caption} data-testid={testId}>
        {text}
      </blockquote>
    </figure>
  );
}

/** The original prompt beside the enhancer's suggestion (stacked on a narrow window), then the shape. */
export function PreviewPrompts({ preview }: { preview: Pick<EnhancerPreview, 'original' | 'suggestion' | 'wh_ratio'> }) {
  return (
    <>
      <div class="prompts">
        <PromptText caption="Original" text={preview.original} testId="preview-original" />
        <PromptText caption="Suggestion" text={preview.suggestion} testId="preview-suggestion" />
      </div>
      <p class="hint" data-testid="preview-shape">
        {shapeText(preview.wh_ratio)}
      </p>
    </>
  );
}

/**
 * One line on the enhancer worker of a profile while it loads, answers and ends; `before` until it
 * has appeared in the status, `after` once it has gone again (the image model loads, or the
 * reservation is freed).
 */
export function EnhancerActivity({ profileId, before, after }: { profileId: string; before: string; after: string }) {
  const worker = status.value?.workers.find((w) => w.kind === 'enhancer' && w.profile_id === profileId);
  const seen = useRef(false);
  if (worker) seen.current = true;
  return (
    <p role="status" data-testid="enhancer-activity">
      {worker
        ? `Enhancer worker ${worker.state}${worker.pid === null ? '' : ` (pid ${worker.pid})`}${worker.since ? `, started ${since(worker.since)}` : ''}.`
        : seen.current
          ? after
          : before}
    </p>
  );
}
