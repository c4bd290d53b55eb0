// What the inference listener tells the recent-requests view (src/system/observe/recentRequests.ts)
// of each answered request: its route, the profile it named (only a stored profile's name, never a
// client's free text), its status and error code, its duration, and for a chat answer the measures
// the metrics' taps noted (queue wait, first byte, usage and speed). No prompt, no answer.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ProfileStore } from '../store/profiles.js';
import { NO_MODEL } from '../system/observe/metrics.js';
import type { RecentRequests } from '../system/observe/recentRequests.js';
import { modelLabel } from './metrics.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The error code the answer carried (sendError notes it). */
    errorCode?: string | null;
  }
}

const rounded = (value: number | undefined) => (value === undefined ? null : Math.round(value * 10) / 10);

/** The access hook's part for the recent-requests view. */
export function recentRequestRecorder(recent: RecentRequests, profiles: ProfileStore) {
  return (route: string, status: number, request: FastifyRequest, reply: FastifyReply): void => {
    const model = modelLabel(request, profiles);
    const facts = request.answerFacts;
    recent.record({
      id: request.id,
      at: new Date().toISOString(),
      method: request.method,
      route,
      profile: model === NO_MODEL ? null : model,
      status,
      code: request.errorCode ?? null,
      duration_ms: rounded(reply.elapsedTime) ?? 0,
      queue_ms: rounded(facts?.queueMs),
      ttft_ms: rounded(facts?.ttftMs),
      prompt_tokens: facts?.usage?.promptTokens ?? null,
      completion_tokens: facts?.usage?.completionTokens ?? null,
      tokens_per_second: rounded(facts?.usage?.perSecond),
      stream: facts?.stream ?? null,
    });
  };
}
