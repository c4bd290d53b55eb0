// The TTS worker adapter (spec 3.4): runs the TTS worker machine (machines/ttsWorker) with the
// real engine, forwards its reports to the supervisor, carries the supervisor's unload commands to
// it, and synthesises one text at a time on a loaded start.
//
// The espeak-ng backend (Debian, the embedded default, CPU) has no model to keep in memory: its
// start checks that the program runs and speaks, and each request is one short espeak-ng run that
// reads the text from stdin (never from its command line, where other users could see it) and
// writes a WAV to stdout. The openai-server backend (a GPU engine a user installs) is a server
// process kept running while the worker is loaded, proxied to (src/workers/speech/speechServer.ts).
import { execa, type ResultPromise } from 'execa';
import type { Actor } from 'xstate';
import { WORKER_IDS } from '../../../machines/ids.js';
import { ttsWorkerMachine, type TtsLaunch, type TtsWorkerEvent } from '../../../machines/ttsWorker/index.js';
import { fixStreamedWav } from '../../adapters/wav.js';
import { diesWithService, startWorker } from '../../adapters/parentDeath.js';
import { resolveRuntime, runtimeMissingMessage } from '../../adapters/runtimes.js';
import type { EspeakVoice, StoredProfile } from '../../store/profile.schema.js';
import { errors } from '../../errors.js';
import type { SpeechBody } from './speech.schema.js';
import { connectionOf, LifecycleWorker, type WorkerDeps } from '../lifecycle.js';
import { engineActor, type StartHooks } from '../engine.js';
import { workerEnv } from '../process.js';
import { speechServerHooks, speakTo, type ServerRequest } from './speechServer.js';

export type TtsProfile = Extract<StoredProfile, { category: 'tts' }>;

// Maps, not plain objects: a request's name is looked up as an own entry, so `constructor` or
// `__proto__` finds nothing on a prototype and is refused like any unknown name.

/** Spec 4.5 `language` (a name, default German) → espeak-ng's voice for it. */
export const ESPEAK_LANGUAGES: ReadonlyMap<string, string> = new Map([
  ['German', 'de'],
  ['English', 'en-us'],
  ['French', 'fr'],
  ['Spanish', 'es'],
  ['Italian', 'it'],
  ['Portuguese', 'pt'],
  ['Dutch', 'nl'],
  ['Polish', 'pl'],
  ['Russian', 'ru'],
  ['Swedish', 'sv'],
  ['Japanese', 'ja'],
  ['Chinese', 'cmn'],
]);

/** OpenAI's preset voice names (the voices a profile may save) → espeak-ng voice variants. */
const ESPEAK_VARIANTS: Record<EspeakVoice, string> = {
  alloy: 'm3',
  ash: 'm1',
  ballad: 'm5',
  coral: 'f2',
  echo: 'm2',
  fable: 'm7',
  nova: 'f3',
  onyx: 'm6',
  sage: 'f4',
  shimmer: 'f1',
  verse: 'm4',
};
export const ESPEAK_VOICES: ReadonlyMap<string, string> = new Map(Object.entries(ESPEAK_VARIANTS));
/** The default preset. */
export const DEFAULT_VOICE: EspeakVoice = 'alloy';

/** espeak-ng's words per minute at speed 1, and the range it can speak. */
const ESPEAK_WPM = { base: 175, min: 80, max: 450 } as const;

export class SpeechFailure extends Error {
  override name = 'SpeechFailure';
}

export type SpeechRequest =
  | {
      backend: 'espeak-ng';
      text: string;
      /** espeak-ng language voice, e.g. `de`. */
      language: string;
      /** espeak-ng variant, e.g. `m3`. */
      variant: string;
      speed: number;
    }
  | ({ backend: 'openai-server' } & ServerRequest);

/** Spec 4.5: `language` defaults to German. */
const DEFAULT_LANGUAGE = 'German';

/**
 * A language name the backend does not speak, or a voice it does not have: a 400 naming what it
 * has, and the profile setting that says so when the operator set the list (`setting`).
 */
function unsupported(param: 'language' | 'voice', name: string, supported: readonly string[], setting?: string) {
  const what = param === 'language' ? `The language ${JSON.stringify(name)} is not supported` : `The voice ${JSON.stringify(name)} is not one of the presets`;
  return errors.invalidValue(param, `${what}; supported: ${supported.join(', ')}${setting ? ` (${setting}, set by the operator)` : ''}.`);
}

/** The request for the profile's backend: language names map to its voices (spec 4.5). */
export function speechJob(profile: TtsProfile, body: SpeechBody, speed: number): SpeechRequest {
  const languageName = body.language ?? DEFAULT_LANGUAGE;
  const voice = body.voice ?? profile.params.voice ?? DEFAULT_VOICE;
  if (profile.params.backend === 'openai-server') {
    // The server's own languages, when the profile lists them; else the name is passed on as it is.
    const languages = profile.params.languages;
    if (languages && !languages.includes(languageName)) throw unsupported('language', languageName, languages, `the params.languages of ${profile.name}`);
    return { backend: 'openai-server', model: profile.params.model ?? 'tts-1', input: body.input, voice, speed, language: languageName };
  }
  const language = ESPEAK_LANGUAGES.get(languageName);
  if (!language) throw unsupported('language', languageName, [...ESPEAK_LANGUAGES.keys()]);
  const variant = ESPEAK_VOICES.get(voice);
  if (!variant) throw unsupported('voice', voice, [...ESPEAK_VOICES.keys()]);
  return { backend: 'espeak-ng', text: body.input, language, variant, speed };
}

/** espeak-ng's -s for a speed factor, within the range it can speak. */
export function espeakRate(speed: number): number {
  return Math.round(Math.min(ESPEAK_WPM.max, Math.max(ESPEAK_WPM.min, ESPEAK_WPM.base * speed)));
}

export type TtsWorkerDeps = Omit<WorkerDeps, 'loadTimeLimitMs' | 'terminationGraceMs'>;


type TtsActor = Actor<typeof ttsWorkerMachine>;

export class TtsWorker extends LifecycleWorker<ReturnType<TtsActor['getSnapshot']>> {
  readonly #binaries: Map<number, string>;
  readonly #ports: Map<number, number>;

  constructor(readonly deps: TtsWorkerDeps) {
    const binaries = new Map<number, string>();
    const ports = new Map<number, number>();
    const info = { worker: 'tts', name: 'text-to-speech worker', log: deps.log, runtimeDir: deps.runtimeDir, stderr: deps.workers.stderr.of('tts') } as const;
    const engine = engineActor<TtsLaunch, TtsWorkerEvent>(info, (launch): StartHooks => {
      if (launch.backend === 'openai-server') return speechServerHooks(launch, { env: deps.env, log: deps.log, ports });
      return {
        // espeak-ng keeps no process between requests: the start proves that it runs.
        prepare: async () => {
          const binary = await resolveRuntime('espeak-ng', deps.lookup);
          if (!binary) return { unable: { cause: 'runtime_missing', message: runtimeMissingMessage('text-to-speech worker', ['espeak-ng'], deps.lookup.env, 'espeak-ng is not installed (apt-get install espeak-ng)') } };
          const probe = await execa(binary, ['--version'], { env: workerEnv(deps.env), extendEnv: false, reject: false, timeout: 10_000 });
          if (probe.exitCode !== 0) return { unable: { cause: 'model_error', message: `espeak-ng does not run: ${String(probe.stderr).split('\n')[0] ?? ''}` } };
          binaries.set(launch.generation, binary);
          return { ready: true };
        },
        cleanup: () => binaries.delete(launch.generation),
      };
    });
    super(ttsWorkerMachine.provide({ actors: { engine } }), 'tts', connectionOf(deps, 'TTS worker', WORKER_IDS.tts), (reason) => new SpeechFailure(reason));
    this.#binaries = binaries;
    this.#ports = ports;
  }

  protected override gpus(): string[] {
    const device = this.actor.getSnapshot().context.launch?.device;
    return device && device !== 'cpu' ? [device] : [];
  }

  /** Speaks one text on the loaded start `generation`; resolves with a WAV file. */
  async synthesize(generation: number, request: SpeechRequest, signal?: AbortSignal): Promise<Buffer> {
    if (request.backend === 'openai-server') {
      const port = this.#ports.get(generation);
      if (port === undefined) throw new SpeechFailure('the text-to-speech worker is not running');
      const { backend: _backend, ...body } = request;
      return speakTo(port, body, signal);
    }
    const binary = this.#binaries.get(generation);
    if (!binary) throw new SpeechFailure('the text-to-speech worker is not running');
    const command = await diesWithService(binary, ['-v', `${request.language}+${request.variant}`, '-s', String(espeakRate(request.speed)), '--stdin', '--stdout'], this.deps.env);
    const child: ResultPromise = startWorker(command, {
      env: workerEnv(this.deps.env),
      extendEnv: false,
      input: request.text,
      encoding: 'buffer',
      stripFinalNewline: false,
      reject: false,
      timeout: 120_000,
      ...(signal ? { cancelSignal: signal } : {}),
      forceKillAfterDelay: 1_000,
    });
    const result = await child;
    if (result.isCanceled) throw new SpeechFailure('the request was cancelled');
    if (result.exitCode !== 0 || !(result.stdout instanceof Uint8Array)) {
      throw new SpeechFailure(`espeak-ng failed${result.timedOut ? ' (timeout)' : ''}: exit ${String(result.exitCode ?? result.signal)}`);
    }
    return fixStreamedWav(Buffer.from(result.stdout));
  }
}
