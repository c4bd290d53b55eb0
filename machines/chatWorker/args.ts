// The llama-server command line of one chat worker start (spec 5 rule 3, spec 8): the
// stored parameters as they are (total context, slots), the fixed backend defaults, and what the
// memory check decided (GPU layers, split, overrides). Pure, so tests check it directly.
import type { ChatLaunch } from './chatWorker.types.js';

/**
 * Spec 8: "Chat worker backend defaults are fixed: shared KV cache, K/V cache type q4_0, flash
 * attention on, load mode none; total context and slots stay as stored."
 */
export const SERVER_DEFAULTS = ['--kv-unified', '-ctk', 'q4_0', '-ctv', 'q4_0', '-fa', 'on', '-lm', 'none'] as const;

export interface ServerPlace {
  /** The free loopback port the adapter picked. */
  port: number;
  /** The 0600 file holding this start's short-lived internal key (spec 5 rule 3). */
  keyFile: string;
}

export function serverArgs(launch: ChatLaunch, place: ServerPlace): string[] {
  const args = ['-m', launch.model, '-c', String(launch.context), '-np', String(launch.slots), ...SERVER_DEFAULTS];
  // On the CPU no layer goes to a GPU; with GPUs, the fit's layer count and split.
  args.push('-ngl', String(launch.gpus.length === 0 ? 0 : (launch.gpuLayers ?? 0)));
  if (launch.gpus.length > 0 && launch.tensorSplit) args.push('-ts', launch.tensorSplit.join(','));
  for (const override of launch.overrides) args.push('-ot', override);
  // --slots: GET /slots, which the worker's main loop answers, is the stall watch's probe.
  args.push('--alias', launch.name, '--host', '127.0.0.1', '--port', String(place.port), '--no-webui', '--slots', '--api-key-file', place.keyFile);
  return args;
}
