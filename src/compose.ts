// The composition root's entry: the service (src/system/service.ts) with its two listeners, the
// Fastify apps of src/app.ts. The system layer knows no HTTP; this is where the two meet.
import { buildAdminApp, buildInferenceApp } from './app.js';
import type { Config } from './config.js';
import { openService, type StartOptions, type Started } from './system/service.js';

export type { Service } from './system/service.js';

export function startService(config: Config, options: Omit<StartOptions, 'listeners'>): Promise<Started> {
  return openService(config, { ...options, listeners: { inference: buildInferenceApp, admin: buildAdminApp } });
}
