// `service-deck demo` (CONTRACT section 7): sets up the embedded default and serves it. The chat
// part is a tiny GGUF model that the project generates itself (weights cannot be downloaded) in
// the state directory, served by the llama-server that scripts/build-llama.sh built from the
// llama.cpp source node-llama-cpp ships; its profile `tiny-chat` is created and published once.
// The speech profiles `speaker` (espeak-ng) and `listener` (pocketsphinx, en-us) are made and
// published once too; the image profile arrives with its worker (issue 6).
import path from 'node:path';
import { access } from 'node:fs/promises';
import type { Config } from './config.js';
import { writeTinyModel } from './adapters/tinyModel.js';
import { EndpointStore } from './store/endpoint.js';
import { ensurePrivateDir } from './store/files.js';
import { ProfileStore } from './store/profiles.js';
import { randomPassword, SecretStore } from './store/secrets.js';
import type { Service } from './system/service.js';

export interface Demo {
  banner: (service: Service) => string[];
}

export const DEMO_CHAT = { id: 'demo-chat', name: 'tiny-chat' } as const;
/** espeak-ng speech and pocketsphinx transcription (Debian's packages; the set-up installs them as root). */
export const DEMO_SPEECH = [
  { id: 'demo-tts', name: 'speaker', category: 'tts' },
  { id: 'demo-stt', name: 'listener', category: 'stt' },
] as const;

const exists = (file: string) => access(file).then(() => true, () => false);

export async function setUpDemo(config: Config): Promise<Demo> {
  await ensurePrivateDir(config.stateDir);
  const lines: string[] = [];
  const { store } = await SecretStore.open(config.stateDir, { password: config.firstPassword });
  if (!store.hasPassword) {
    const password = randomPassword();
    await store.setPassword(password);
    lines.push(`service-deck demo: operator password (shown once): ${password}`);
  }

  // The embedded chat model and its published profile (made once; an operator's edits stay).
  const model = path.join(config.stateDir, 'models', 'service-deck-tiny.gguf');
  if (!(await exists(model))) {
    await ensurePrivateDir(path.dirname(model));
    await writeTinyModel(model, { name: 'service-deck tiny demo model' });
    lines.push(`service-deck demo: generated the tiny chat model ${model} (random weights: its answers are noise, its timings are real)`);
  }
  const endpoint = await EndpointStore.open(config.stateDir);
  const profiles = await ProfileStore.open(config.stateDir, endpoint);
  if (!profiles.get(DEMO_CHAT.id) && !profiles.byName(DEMO_CHAT.name)) {
    await profiles.create({ name: DEMO_CHAT.name, category: 'chat', params: { model, context: 4096, slots: 2, gpuSplit: null, gpuLayers: null, sampling: {} } }, DEMO_CHAT.id);
    await profiles.setPublished(DEMO_CHAT.id, true);
  }
  for (const speech of DEMO_SPEECH) {
    if (profiles.get(speech.id) || profiles.byName(speech.name)) continue;
    const params = speech.category === 'tts' ? { backend: 'espeak-ng' as const, speed: 1, device: 'cpu', memoryMiB: 0 } : { backend: 'pocketsphinx' as const, threads: 2 };
    await profiles.create({ name: speech.name, category: speech.category, params } as Parameters<typeof profiles.create>[0], speech.id);
    await profiles.setPublished(speech.id, true);
  }
  await endpoint.flushed();

  return {
    banner: (service) => {
      const listed = service.profiles.list();
      return [
        ...lines,
        `service-deck demo: state in ${config.stateDir}`,
        `service-deck demo: ${listed.length} profile(s): ${listed.map((p) => `${p.name} (${p.category}${service.profiles.isPublished(p.id) ? ', published' : ''})`).join(', ')}`,
        `service-deck demo: try  curl -s http://127.0.0.1:${service.inferenceAddress()?.port ?? 8120}/v1/chat/completions -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' -d '{"model":"${DEMO_CHAT.name}","messages":[{"role":"user","content":"Hello"}],"max_tokens":32}'`,
        'service-deck demo: the image profile arrives with its worker; Ctrl-C stops the service',
      ];
    },
  };
}
