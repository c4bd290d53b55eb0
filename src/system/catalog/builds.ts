// Build changes (spec 3.5 "loaded | a new build | unloaded", spec 9 "build changes apply after the
// next unload"): which program each worker start runs, and a watch for a new build of it on disk.
// The program of a start is looked up as the worker adapter looks it up (environment variable,
// the project's cache, PATH) when its grant is given, just before the process is spawned. Every
// `pollMs` the lookup runs again for each worker that is loaded; when it gives another file, or the
// same file rewritten, the supervisor hears `worker.buildChanged`: an idle worker is unloaded at
// once, a busy one after its jobs, and the next job starts the new build. Profiles are never
// changed. An image worker runs one process per image, so the next image takes a new build anyway.
import type { WorkerKind } from '../../../machines/supervisor/index.js';
import { buildOf, type Build, type RuntimeLookup } from '../../adapters/runtimes.js';
import type { StoredProfile } from '../../store/profile.schema.js';
import { programOf } from './blockers.js';
import type { Logger } from '../observe/log.js';
import type { SupervisorActor } from '../scheduler.js';
import type { BuildStatus } from '../observe/console.types.js';

interface Started {
  generation: number;
  profile: StoredProfile;
  runtime: string;
  build: Build | undefined;
  replacedBy: Build | null;
}

const WATCHED: readonly WorkerKind[] = ['chat', 'tts', 'stt'];

export class BuildWatcher {
  readonly #starts = new Map<WorkerKind, Started>();
  #timer: NodeJS.Timeout | undefined;
  #checking = false;

  constructor(
    private readonly deps: { supervisor: SupervisorActor; lookup: RuntimeLookup; log: Logger; pollMs: number },
  ) {}

  start(): void {
    this.deps.supervisor.on('gpu.granted', (event) => {
      if (!event.start) return;
      const profile = this.deps.supervisor.getSnapshot().context.jobs[event.jobId]?.spec.profile as StoredProfile | undefined;
      if (profile) void this.#record(event.worker, event.generation, profile);
    });
    this.#timer = setInterval(() => void this.check(), this.deps.pollMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  async #record(kind: WorkerKind, generation: number, profile: StoredProfile): Promise<void> {
    const started: Started = { generation, profile, runtime: '', build: undefined, replacedBy: null };
    this.#starts.set(kind, started);
    const program = await programOf(profile, this.deps.lookup);
    started.runtime = program.runtime;
    started.build = program.path === undefined ? undefined : await buildOf(program.path);
  }

  /** The build of the start `generation` of a worker, for the status. */
  status(kind: WorkerKind, generation: number): BuildStatus | null {
    const started = this.#starts.get(kind);
    if (!started?.build || started.generation !== generation) return null;
    const { runtime, build, replacedBy } = started;
    return { runtime, path: build.path, fingerprint: build.fingerprint, replaced_by: replacedBy && { path: replacedBy.path, fingerprint: replacedBy.fingerprint } };
  }

  /** One look at every loaded worker's program (the timer calls it; tests may too). */
  async check(): Promise<void> {
    if (this.#checking) return;
    this.#checking = true;
    try {
      const workers = this.deps.supervisor.getSnapshot().context.workers;
      for (const kind of WATCHED) {
        const started = this.#starts.get(kind);
        const worker = workers[kind];
        if (!started?.build || started.replacedBy || worker.generation !== started.generation || worker.state !== 'loaded') continue;
        const program = await programOf(started.profile, this.deps.lookup);
        const now = program.path === undefined ? undefined : await buildOf(program.path);
        if (now && now.real === started.build.real && now.stamp === started.build.stamp) continue;
        started.replacedBy = now ?? { path: program.path ?? '(not installed)', real: '', stamp: '', fingerprint: '' };
        const reason = now
          ? `a new build of ${started.runtime}: ${now.path} (${now.fingerprint}) replaces ${started.build.fingerprint}`
          : `${started.runtime} is no longer installed at ${started.build.path}`;
        this.deps.log.info({ worker: kind, generation: started.generation, runtime: started.runtime, from: started.build.fingerprint, to: now?.fingerprint ?? null }, 'new build: the worker goes when idle');
        this.deps.supervisor.send({ type: 'worker.buildChanged', kind, generation: started.generation, reason });
      }
    } finally {
      this.#checking = false;
    }
  }
}
