// `service-deck demo` (CONTRACT section 7): sets up the embedded default and serves it. The chat
// part is a tiny GGUF model that the project generates itself (weights cannot be downloaded) in
// the state directory, served by the llama-server that scripts/build-llama.sh built from the
// llama.cpp source node-llama-cpp ships; its profile `tiny-chat` is created and published once.
// The speech profiles `speaker` (espeak-ng) and `listener` (pocketsphinx, en-us) are made and
// published once too. The image profile `painter` is made and published with the model path
// <state>/models/sd-model.gguf: it shows the blockers `runtime missing: sd-cli` and `model file
// missing` until stable-diffusion.cpp's sd-cli is installed and a model is put there (no image
// weights can be generated or downloaded here).
import path from 'node:path';
import { access } from 'node:fs/promises';
import type { Config } from './config.js';
import { writeTinyModel } from './adapters/tinyModel.js';
import { EndpointStore } from './store/endpoint.js';
import { ensurePrivateDir } from './store/files.js';
import { ProfileStore } from './store/profiles.js';
import { SecretStore } from './store/secrets.js';
import type { Service } from './service.js';

export interface Demo {
  banner: (service: Pick<Service, 'profiles' | 'inferenceAddress'>) => string[];
}

export const DEMO_CHAT = { id: 'demo-chat', name: 'tiny-chat' } as const;
/** espeak-ng speech and pocketsphinx transcription (Debian's packages; the set-up installs them as root). */
export const DEMO_SPEECH = [
  { id: 'demo-tts', name: 'speaker', category: 'tts' },
  { id: 'demo-stt', name: 'listener', category: 'stt' },
] as const;

export const DEMO_IMAGE = { id: 'demo-image', name: 'painter' } as const;

const exists = (file: string) => access(file).then(() => true, () => false);

export async function setUpDemo(config: Config): Promise<Demo> {
  await ensurePrivateDir(config.stateDir);
  const lines: string[] = [];
  // The operator password (SERVICE_DECK_ADMIN_PASSWORD at the first start) is stored here; one to
  // generate is made only once the service has started, and shown then (src/firstSecrets.ts).
  await SecretStore.open(config.stateDir, { password: config.firstPassword });

  // The embedded chat model and its published profile (made once; an operator's edits stay).
  const model = path.join(config.stateDir, 'models', 'service-deck-tiny.gguf');
  if (!(await exists(model))) {
    await ensurePrivateDir(path.dirname(model));
    await writeTinyModel(model, { name: 'service-deck tiny demo model' });
    lines.push(`service-deck demo: generated the tiny chat model ${model} (random weights: its answers are noise, its timings are real)`);
  }
  const endpoint = await EndpointStore.open(config.stateDir, config.firstApiPort);
  const profiles = await ProfileStore.open(config.stateDir, endpoint);
  if (!profiles.get(DEMO_CHAT.id) && !profiles.byName(DEMO_CHAT.name)) {
    await profiles.create({ name: DEMO_CHAT.name, category: 'chat', params: { model, context: 4096, slots: 2, gpuSplit: null, gpuLayers: null, sampling: {} } }, DEMO_CHAT.id);
    await profiles.setPublished(DEMO_CHAT.id, true);
  }
  for (const speech of DEMO_SPEECH) {
    if (profiles.get(speech.id) || profiles.byName(speech.name)) continue;
    const params = speech.category === 'tts' ? { backend: 'espeak-ng' as const, speed: 1, device: 'cpu', memoryMiB: 0 } : { backend: 'pocketsphinx' as const, threads: 2, defaultLanguage: 'en' as const };
    await profiles.create({ name: speech.name, category: speech.category, params } as Parameters<typeof profiles.create>[0], speech.id);
    await profiles.setPublished(speech.id, true);
  }
  // A listener made by an earlier demo has the spec's default language de, which pocketsphinx
  // cannot transcribe (a blocker): it takes English, as a new demo's does.
  const listener = profiles.get(DEMO_SPEECH[1].id);
  if (listener?.category === 'stt' && listener.params.backend === 'pocketsphinx' && listener.params.defaultLanguage === 'de') {
    await profiles.update(listener.id, listener.revision, { name: listener.name, category: 'stt', params: { ...listener.params, defaultLanguage: 'en' } });
    lines.push(`service-deck demo: the listener profile transcribes English by default now (pocketsphinx has no German model)`);
  }
  if (!profiles.get(DEMO_IMAGE.id) && !profiles.byName(DEMO_IMAGE.name)) {
    const imageModel = path.join(config.stateDir, 'models', 'sd-model.gguf');
    await profiles.create(
      {
        name: DEMO_IMAGE.name,
        category: 'image',
        params: { backend: 'sd-cli', model: imageModel, files: {}, width: 1024, height: 1024, steps: 20, guidance: 3.5, cfgScale: 1, seed: 42, referenceImages: 0 },
      },
      DEMO_IMAGE.id,
    );
    await profiles.setPublished(DEMO_IMAGE.id, true);
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
        `service-deck demo: images need stable-diffusion.cpp's sd-cli (on PATH or SERVICE_DECK_SD_CLI) and a model at the path of the profile ${DEMO_IMAGE.name}`,
      ];
    },
  };
}
