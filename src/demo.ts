// `service-deck demo` (CONTRACT section 7): sets up the embedded default and serves it. This build
// has no worker yet, so the embedded profiles (a generated GGUF chat model, espeak-ng speech,
// pocketsphinx transcription, an sd-cli image profile) are not created; the demo serves the
// endpoint with whatever profiles exist and says so.
import type { Config } from './config.js';
import { ensurePrivateDir } from './store/files.js';
import { randomPassword, SecretStore } from './store/secrets.js';
import type { Service } from './system/service.js';

export interface Demo {
  banner: (service: Service) => string[];
}

export async function setUpDemo(config: Config): Promise<Demo> {
  await ensurePrivateDir(config.stateDir);
  const lines: string[] = [];
  const { store } = await SecretStore.open(config.stateDir, { password: config.firstPassword });
  if (!store.hasPassword) {
    const password = randomPassword();
    await store.setPassword(password);
    lines.push(`service-deck demo: operator password (shown once): ${password}`);
  }
  return {
    banner: (service) => {
      const profiles = service.profiles.list();
      return [
        ...lines,
        `service-deck demo: state in ${config.stateDir}`,
        profiles.length === 0
          ? 'service-deck demo: no model profiles yet: the embedded chat, speech, transcription and image profiles are not part of this build; /v1/models lists nothing until a profile is created and published'
          : `service-deck demo: ${profiles.length} profile(s): ${profiles.map((p) => `${p.name} (${p.category})`).join(', ')}`,
        'service-deck demo: Ctrl-C stops the service',
      ];
    },
  };
}
