// The sd-cli command line of one image (stable-diffusion.cpp): the profile's model files and
// settings, the prompt, the output in the job folder, no metadata in the image, and one `-r` per
// reference image in the client's order. A profile with separate component files (VAE, text
// encoders) names its model with `--diffusion-model`; a single-file model with `-m`.
import type { ImageLaunch, ImagePrompt } from './imageWorker.types.js';

export const IMAGE_OUTPUT = 'output.png';

export function sdArgs(launch: ImageLaunch, job: ImagePrompt, output: string): string[] {
  const { files } = launch;
  const split = Boolean(files.vae || files.llm || files.clip_l || files.t5xxl);
  const args = [split ? '--diffusion-model' : '-m', launch.model];
  if (files.vae) args.push('--vae', files.vae);
  if (files.llm) args.push('--llm', files.llm);
  if (files.clip_l) args.push('--clip_l', files.clip_l);
  if (files.t5xxl) args.push('--t5xxl', files.t5xxl);
  args.push(
    '-p',
    job.prompt,
    '-W',
    String(launch.width),
    '-H',
    String(launch.height),
    '--steps',
    String(launch.steps),
    '--cfg-scale',
    String(launch.cfgScale),
    '--guidance',
    String(launch.guidance),
    '-s',
    String(launch.seed),
    '-o',
    output,
    '--disable-image-metadata',
  );
  for (const reference of job.references) args.push('-r', reference);
  return args;
}

/** The last `step/steps` progress mark in sd-cli's output (`|===>   | 3/20 - 0.02s/it`). */
export function lastProgress(text: string): { step: number; steps: number } | undefined {
  let found: { step: number; steps: number } | undefined;
  for (const match of text.matchAll(/\|\s*(\d+)\/(\d+)\s*-/g)) found = { step: Number(match[1]), steps: Number(match[2]) };
  return found;
}
