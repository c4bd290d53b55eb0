// Whether a chat request's prompt can fit its profile's context at all, decided before it is
// queued. The worker finds out only after tokenizing it, with the request holding a slot all the
// while (a 1 MB prompt took 48 to 84 s to come back as context_length_exceeded). No token stands for
// more bytes of text than the vocabulary's longest token (longestToken, src/adapters/gguf.ts), so
// more bytes than the context's tokens of that length can never fit, whatever the template adds.
import { ApiError } from '../../errors.js';
import { longestTokenOf } from '../../adapters/gguf.js';
import type { ChatParams } from '../../store/profile.schema.js';

/** A profile as the context's note names it. */
export type ContextProfile = { name: string; params: Pick<ChatParams, 'context' | 'slots'> };

/**
 * What the context a request did not fit is: the profile's params.context (shared by its slots:
 * the worker's KV cache is unified), which only the operator changes. llama-server's own words
 * ("try increasing it") do not say that the client cannot.
 */
export function contextNote(profile: ContextProfile | undefined): string {
  if (!profile) return '';
  const { context, slots } = profile.params;
  return ` (The context is the chat profile ${profile.name}'s params.context, ${context} tokens shared by its ${slots} slot(s): send fewer or shorter messages or a smaller max_tokens, or ask the operator to raise params.context.)`;
}

/** The roles whose text every chat template puts into the prompt (an assistant's may lose its reasoning there). */
const KEPT_ROLES: ReadonlySet<unknown> = new Set(['system', 'developer', 'user', 'tool']);

/** The bytes of text the worker's prompt holds at least: the messages of the roles every template keeps. */
export function promptBytes(messages: unknown): number {
  if (!Array.isArray(messages)) return 0;
  let bytes = 0;
  for (const message of messages as Array<{ role?: unknown; content?: unknown }>) {
    if (!KEPT_ROLES.has(message.role)) continue;
    const { content } = message;
    if (typeof content === 'string') bytes += Buffer.byteLength(content);
    else if (Array.isArray(content)) for (const part of content as Array<{ text?: unknown }>) if (typeof part.text === 'string') bytes += Buffer.byteLength(part.text);
  }
  return bytes;
}

/**
 * Refuses, with 400 context_length_exceeded naming `field` and the profile's params.context, a
 * worker body whose messages hold more bytes than the context could hold at the model's longest
 * token. A prompt of no more bytes than the context has tokens is never looked at further.
 */
export async function refuseUnfitPrompt(profile: ContextProfile & { params: Pick<ChatParams, 'model'> }, body: Record<string, unknown>, field: string): Promise<void> {
  const bytes = promptBytes(body.messages);
  const { context } = profile.params;
  if (bytes <= context) return;
  const longest = await longestTokenOf(profile.params.model);
  if (longest === undefined || longest === 0 || bytes <= context * longest) return;
  throw new ApiError(
    400,
    'invalid_request_error',
    'context_length_exceeded',
    `The request's text is ${bytes} bytes: more than ${context} tokens can hold, since no token of this model stands for more than ${longest} bytes (at most ${context * longest} bytes).${contextNote(profile)}`,
    field,
  );
}
