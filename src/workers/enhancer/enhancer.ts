// The prompt enhancer adapter (spec 4.7): runs the enhancer worker machine (machines/enhancerWorker)
// with the same llama-server runtime as chat, on the start the supervisor sent with the image job's
// grant, and asks it one question: the prompt (and for i2i the reference images) in, `{ prompt, wh_ratio }` out
// through a JSON schema, so the grammar makes any model, even one with random weights, answer in
// that shape. Anything else (a start that fails, an HTTP error, an answer cut at its token limit, a
// JSON that is not that shape) is an EnhancerFailure: the job ends with 502 enhancer_failed and the
// original prompt is never used in its place.
//
// The prompt and its rewrite live only in this request and its answer: never in a machine's
// context, a log line or a file (the reference images are read from the job's private folder).
// An error answer's message is logged as the chat worker's is, without the request's text.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Actor } from 'xstate';
import { z } from 'zod';
import { enhancerArgs, enhancerWorkerMachine, type EnhancerLaunch } from '../../../machines/enhancerWorker/index.js';
import { WORKER_IDS } from '../../../machines/ids.js';
import type { EnhancerStep } from '../../../machines/supervisor/index.js';
import { imageKind } from '../../adapters/png.js';
import { connectionOf, LifecycleWorker } from '../lifecycle.js';
import type { ChatWorkerDeps } from '../chat/chat.js';
import { readWorkerError, type StatusLog } from '../chat/chatRequest.js';
import { llamaServerActor, type ServerRole } from '../chat/llamaServer.js';

type EnhancerActor = Actor<typeof enhancerWorkerMachine>;

export interface Enhancement {
  prompt: string;
  /** The width-to-height ratio the enhancer suggests; null when it gave none in a sensible range. Only a suggestion. */
  whRatio: number | null;
}

export class EnhancerFailure extends Error {
  override name = 'EnhancerFailure';
}

/** The longest rewrite accepted; the schema's limit, so the grammar ends the string in time. */
export const ENHANCED_PROMPT_MAX = 1000;
/** Tokens for the answer: a string character may take up to six (a \uXXXX escape), plus the JSON around it. */
export const ENHANCER_MAX_TOKENS = ENHANCED_PROMPT_MAX * 6 + 128;
/** How long the answer may take once the enhancer is loaded. */
const ANSWER_LIMIT_MS = 300_000;
/** The sampling seed of every enhancement. */
export const ENHANCER_SEED = 47;
/** A ratio outside this range is no sensible picture shape: it is dropped, not passed on. */
const RATIO_RANGE = [0.1, 10] as const;

/** The JSON schema llama-server turns into a grammar: the answer cannot be anything else. */
export const ENHANCER_SCHEMA = {
  type: 'object',
  properties: {
    prompt: { type: 'string', minLength: 1, maxLength: ENHANCED_PROMPT_MAX },
    wh_ratio: { type: 'number' },
  },
  required: ['prompt', 'wh_ratio'],
  additionalProperties: false,
} as const;

const answerSchema = z.object({ prompt: z.string().trim().min(1), wh_ratio: z.number() });

const INSTRUCTIONS: Record<EnhancerStep['task'], string> = {
  t2i: [
    'You rewrite prompts for a text-to-image model.',
    "Keep the user's subject, intent and any text to be drawn; add concrete visual detail: composition, subject details, setting, lighting, colours, style, camera or medium.",
    'Write one paragraph of at most 150 words, no preamble.',
    'Answer only with JSON: {"prompt": the rewritten prompt, "wh_ratio": the width-to-height ratio the scene suits, e.g. 1.5 for a landscape, 0.75 for a portrait}.',
  ].join(' '),
  i2i: [
    'You rewrite instructions for an image-editing model that receives the attached reference images.',
    'Say precisely what to change and what must stay as it is (identity, pose, layout, text), naming the images by their order where there are several.',
    'Write one paragraph of at most 150 words, no preamble.',
    'Answer only with JSON: {"prompt": the rewritten instruction, "wh_ratio": the width-to-height ratio the result suits}.',
  ].join(' '),
};

const MEDIA_TYPES = { png: 'image/png', jpeg: 'image/jpeg', webp: 'image/webp' } as const;

/** The chat completion request that asks the enhancer for its rewrite. */
export async function enhancerRequest(task: EnhancerStep['task'], prompt: string, references: string[]): Promise<Record<string, unknown>> {
  const images = await Promise.all(
    references.map(async (file) => {
      const bytes = await readFile(file);
      const kind = imageKind(bytes);
      if (!kind) throw new EnhancerFailure(`reference image ${path.basename(file)} is not PNG, JPEG or WebP`);
      return { type: 'image_url', image_url: { url: `data:${MEDIA_TYPES[kind]};base64,${bytes.toString('base64')}` } };
    }),
  );
  const user = images.length > 0 ? [...images, { type: 'text', text: prompt }] : prompt;
  return {
    messages: [
      { role: 'system', content: INSTRUCTIONS[task] },
      { role: 'user', content: user },
    ],
    max_tokens: ENHANCER_MAX_TOKENS,
    // A fixed seed: the same prompt gets the same rewrite, so a preview shows what the job would get.
    seed: ENHANCER_SEED,
    stream: false,
    response_format: { type: 'json_schema', json_schema: { name: 'enhanced_prompt', schema: ENHANCER_SCHEMA } },
  };
}

/** The enhancer's answer as the job uses it, or why it cannot be used. */
export function readEnhancerAnswer(body: unknown): Enhancement {
  const choice = (body as { choices?: Array<{ finish_reason?: string; message?: { content?: unknown } }> } | null)?.choices?.[0];
  if (!choice || typeof choice.message?.content !== 'string') throw new EnhancerFailure('the enhancer answered without a message');
  if (choice.finish_reason === 'length') throw new EnhancerFailure(`the enhancer's answer was cut at ${ENHANCER_MAX_TOKENS} tokens`);
  let json: unknown;
  try {
    json = JSON.parse(choice.message.content);
  } catch {
    throw new EnhancerFailure('the enhancer did not answer with JSON');
  }
  const parsed = answerSchema.safeParse(json);
  if (!parsed.success) throw new EnhancerFailure('the enhancer answered JSON without a non-empty "prompt" and a numeric "wh_ratio"');
  const ratio = parsed.data.wh_ratio;
  const sensible = Number.isFinite(ratio) && ratio >= RATIO_RANGE[0] && ratio <= RATIO_RANGE[1];
  return { prompt: parsed.data.prompt, whRatio: sensible ? Math.round(ratio * 1000) / 1000 : null };
}

const ENHANCER_SERVER: ServerRole<EnhancerLaunch> = { kind: 'enhancer', name: 'prompt enhancer', args: enhancerArgs };
const ENHANCER_WORKER = { component: 'enhancer', name: 'prompt enhancer' } as const;

export class EnhancerWorker extends LifecycleWorker<ReturnType<EnhancerActor['getSnapshot']>> {
  readonly #keys: Map<number, string>;
  readonly #log: StatusLog;

  constructor(deps: ChatWorkerDeps) {
    const keys = new Map<number, string>();
    const engine = llamaServerActor({ lookup: deps.lookup, runtimeDir: deps.runtimeDir, env: deps.env, log: deps.log, keys, stderr: deps.workers.stderr.of('enhancer') }, ENHANCER_SERVER);
    super(enhancerWorkerMachine.provide({ actors: { engine } }), 'enhancer', connectionOf(deps, 'prompt enhancer', WORKER_IDS.enhancer), (reason) => new EnhancerFailure(reason));
    this.#keys = keys;
    this.#log = deps.log;
  }

  protected override gpus(): string[] {
    return this.actor.getSnapshot().context.launch?.gpus ?? [];
  }

  /**
   * Waits until the enhancer start `generation` (sent by the supervisor with the job's grant) is
   * loaded and asks it for the rewrite of `prompt` (with the reference image files for i2i).
   * Rejects with an EnhancerFailure when anything fails, or with the abort reason when `signal`
   * aborts. The caller ends the start.
   */
  async enhance(generation: number, task: EnhancerStep['task'], input: { prompt: string; references: string[] }, signal: AbortSignal): Promise<Enhancement> {
    await this.ready(generation, signal);
    const { context } = this.actor.getSnapshot();
    const key = this.#keys.get(generation);
    if (context.launch?.generation !== generation || context.port === null || key === undefined) throw new EnhancerFailure('the enhancer is loaded but its connection is gone');
    const body = await enhancerRequest(task, input.prompt, task === 'i2i' ? input.references : []);
    let response: Response;
    try {
      response = await fetch(`http://127.0.0.1:${context.port}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: JSON.stringify(body),
        signal: AbortSignal.any([signal, AbortSignal.timeout(ANSWER_LIMIT_MS)]),
      });
    } catch (error) {
      if (signal.aborted) throw signal.reason;
      // The prompt is in the request: only the failure's kind is passed on.
      throw new EnhancerFailure(`the enhancer did not answer (${(error as Error).name === 'TimeoutError' ? `no answer within ${ANSWER_LIMIT_MS / 1000} s` : 'the connection failed'})`);
    }
    const text = await response.text().catch(() => '');
    if (!response.ok) {
      // llama-server's own words go to the log (without the prompt it may quote); the job's answer keeps to the status.
      readWorkerError(response.status, text, this.#log, ENHANCER_WORKER);
      throw new EnhancerFailure(`the enhancer answered HTTP ${response.status}`);
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw new EnhancerFailure('the enhancer answered something that is not a chat completion');
    }
    return readEnhancerAnswer(json);
  }
}
