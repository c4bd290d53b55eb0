// The llama-server command line of one enhancer start: the chat worker's (the same runtime, the
// same fixed backend defaults the memory check forecast with) plus the projector for i2i.
import { serverArgs, type ServerPlace } from '../chatWorker/args.js';
import type { EnhancerLaunch } from './enhancerWorker.types.js';

export function enhancerArgs(launch: EnhancerLaunch, place: ServerPlace): string[] {
  const args = serverArgs(launch, place);
  if (launch.mmproj) args.push('--mmproj', launch.mmproj);
  return args;
}
