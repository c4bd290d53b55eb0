// The supervisor's start orders (`worker.start`) for the worker machine tests, which play the
// supervisor: for each kind, the order whose launch is the given one (the job's profile snapshot
// and the memory check's plan that the machine reads it from), so that a test that sends it and
// finds that launch in the engine's input also checks the machine's launch maker.
import type { ChatLaunch } from '../../machines/chatWorker/index.js';
import type { EnhancerLaunch } from '../../machines/enhancerWorker/index.js';
import type { ImageLaunch } from '../../machines/imageWorker/index.js';
import type { StartPlan, WorkerStart } from '../../machines/supervisor/index.js';
import type { SttLaunch } from '../../machines/sttWorker/index.js';
import type { TtsLaunch } from '../../machines/ttsWorker/index.js';
import type { LaunchBase } from '../../machines/worker/lifecycle.js';

/** A memory check's plan for a start on the CPU (`over`: the GPU part of a plan). */
export function cpuPlan(over: Partial<StartPlan> = {}): StartPlan {
  return {
    gpus: [],
    gpuLayers: null,
    gpuLayerLimit: null,
    tensorSplit: null,
    overrides: [],
    forecast: { ramMiB: 100, gpuMiB: {}, basis: 'test' },
    gpuBudget: [],
    ramBudget: { availableMiB: 16_384, reserveMiB: 1024, forecastMiB: 100, limitedBy: 'host' },
    foreignAtStart: [],
    fit: 'CPU only',
    fitTool: null,
    ...over,
  };
}

/** An order that names only the start (the test machines made of the lifecycle alone). */
export function baseStart(launch: LaunchBase, profile: unknown = null): WorkerStart {
  return { generation: launch.generation, profileId: launch.profileId, revision: launch.revision, profile, plan: cpuPlan(), gpus: [], enhancer: null };
}

/** The lifecycle machines' launch made of the order alone (for the test machines). */
export const baseLaunch = (start: WorkerStart): LaunchBase => ({ generation: start.generation, profileId: start.profileId, revision: start.revision });

export function chatStart(launch: ChatLaunch): WorkerStart {
  const profile = { name: launch.name, params: { model: launch.model, context: launch.context, slots: launch.slots } };
  const plan = cpuPlan({ gpus: launch.gpus, gpuLayers: launch.gpuLayers, tensorSplit: launch.tensorSplit, overrides: launch.overrides });
  return { ...baseStart(launch, profile), plan, gpus: launch.gpus };
}

export function enhancerStart(launch: EnhancerLaunch): WorkerStart {
  const plan = cpuPlan({ gpus: launch.gpus, gpuLayers: launch.gpuLayers, tensorSplit: launch.tensorSplit, overrides: launch.overrides });
  const step = { task: launch.task, model: launch.model, mmproj: launch.mmproj, context: launch.context, image: true, device: 'auto' };
  return { ...baseStart(launch), plan, gpus: launch.gpus, enhancer: step };
}

export function imageStart(launch: ImageLaunch): WorkerStart {
  const { model, files, width, height, steps, guidance, cfgScale, seed } = launch;
  return { ...baseStart(launch, { params: { model, files, width, height, steps, guidance, cfgScale, seed } }), gpus: launch.gpus };
}

export const ttsStart = (launch: TtsLaunch): WorkerStart => baseStart(launch, { params: { backend: launch.backend, device: launch.device, command: launch.command } });

export const sttStart = (launch: SttLaunch): WorkerStart => baseStart(launch, { params: { backend: launch.backend, model: launch.model, threads: launch.threads } });
