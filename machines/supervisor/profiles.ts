// What the operator saved that changes what a worker may keep, as pure steps (effects.ts):
//
// - A profile got a new revision, was deleted, or lost or gained its publication
//   (`profile.changed`, spec 2.1 rule 6, 3.2, 3.7): the queue rejects its waiting requests (the
//   queue child decides which); a worker loaded with it turns stale and goes as soon as no job
//   uses it (plan()); the latest revision is kept, so that an older snapshot is refused.
// - A worker's program has a new build (`worker.buildChanged`, spec 3.5, 9): the same, for that
//   start.
// - The audio memory policy of a speech worker kind changed (`audio.mode`, 3.6).
import { Draft, unchanged, type StepResult } from './effects.js';
import type { SupervisorContext, SupervisorEvent } from './supervisor.types.js';
import { WORKER_KINDS } from './supervisor.types.js';

type Of<T extends SupervisorEvent['type']> = Extract<SupervisorEvent, { type: T }>;

export function profileChanged(context: SupervisorContext, event: Of<'profile.changed'>): StepResult {
  const draft = new Draft(context);
  draft.do({ type: 'toQueue', event });
  for (const kind of WORKER_KINDS) {
    const w = context.workers[kind];
    if (w.profileId === event.profileId && w.state !== 'unloaded' && (event.revision === null || w.revision !== event.revision)) {
      const reason = event.revision === null ? 'its profile was deleted' : `its profile has a new revision (${event.revision})`;
      draft.setWorker(kind, { ...w, stale: { code: 'profile_changed', reason } });
    }
  }
  draft.set({ revisions: { ...context.revisions, [event.profileId]: event.revision } });
  return draft.result();
}

export function buildChanged(context: SupervisorContext, event: Of<'worker.buildChanged'>): StepResult {
  const w = context.workers[event.kind];
  if (w.generation !== event.generation || w.state === 'unloaded' || w.state === 'unloading' || w.state === 'lost') return unchanged(context);
  return { context: { ...context, workers: { ...context.workers, [event.kind]: { ...w, stale: { code: 'new_build', reason: event.reason } } } }, effects: [] };
}

export function audioMode(context: SupervisorContext, event: Of<'audio.mode'>): StepResult {
  return { context: { ...context, audio: { ...context.audio, [event.kind]: event.mode } }, effects: [] };
}
