// A model and rooms for the forecast's tests: 36 blocks of 200 MiB with grouped-query attention
// (about 7 GiB of weights), GPUs by their free memory, and a room with 512 MiB kept on each GPU.
import type { ForecastRoom, ModelShape } from '../../machines/supervisor/index.js';

export const MIB = 2 ** 20;

export const SEVEN_GIB_MODEL: ModelShape = {
  layerCount: 36,
  headCountKv: Array(36).fill(8),
  keyLength: 128,
  valueLength: 128,
  layerBytes: Array(36).fill(200 * MIB),
  inputBytes: 300 * MIB,
  outputBytes: 300 * MIB,
};

export const gpu = (uuid: string, freeMiB: number) => ({ uuid, memoryTotalMiB: freeMiB, memoryFreeMiB: freeMiB, processes: [] });

export const room = (gpus: ForecastRoom['gpus'], ramMiB = 64 * 1024): ForecastRoom => ({
  gpus,
  gpuReserveMiB: Object.fromEntries(gpus.map((g) => [g.uuid, 512])),
  ram: { availableMiB: ramMiB, reserveMiB: 1024, limitedBy: 'test' },
});
