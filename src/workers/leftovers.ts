// Worker processes that a killed service could not end (SIGKILL, an OOM kill of the service):
// llama-server (chat, prompt enhancer), the STT engine (pocketsphinx, whisper-server), a speech
// server of the openai-server backend and sd-cli. Each is recorded while it runs in
// `runtime/<kind>-<generation>-<service pid>.pid` (src/workers/engine.ts writes it) and carries
// that file's path in its environment (DECK_WORKER_TAG). At the next start, a recorded pid is
// ended only while its /proc/<pid>/environ still carries that tag, so a reused pid of some other
// process is never signalled. A speech server is ended with its whole process group. The key files
// of llama-server starts (`<kind>-<generation>-<service pid>.key`) go too.
import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { WorkerKind } from '../system/diagnose.js';
import type { Logger } from '../system/observe/log.js';

export const TAG_VARIABLE = 'DECK_WORKER_TAG';
const RECORD = /^(chat|enhancer|stt|tts|image)-\d+-\d+\.pid$/;
const KEY = /^(chat|enhancer)-\d+-\d+\.key$/;

/** The record of one worker process. */
export class ProcessRecord {
  readonly file: string;

  constructor(runtimeDir: string, kind: WorkerKind, generation: number) {
    this.file = path.join(runtimeDir, `${kind}-${generation}-${process.pid}.pid`);
  }

  /** What the process's environment must carry for the sweep to know it as ours. */
  env(): Record<string, string> {
    return { [TAG_VARIABLE]: this.file };
  }

  write(pid: number, group: boolean): Promise<void> {
    return writeFile(this.file, `${pid}${group ? ' group' : ''}\n`, { mode: 0o600 }).catch(() => undefined);
  }

  remove(): Promise<void> {
    return rm(this.file, { force: true }).catch(() => undefined);
  }
}

/** Ends the recorded worker processes an earlier run left behind; returns how many were ended. */
export async function sweepWorkerProcesses(runtimeDir: string, log: Logger): Promise<number> {
  let ended = 0;
  const all = await readdir(runtimeDir).catch(() => [] as string[]);
  await Promise.all(all.filter((name) => KEY.test(name)).map((name) => rm(path.join(runtimeDir, name), { force: true })));
  for (const name of all.filter((n) => RECORD.test(n))) {
    const file = path.join(runtimeDir, name);
    const [pidText, mode] = (await readFile(file, 'utf8').catch(() => '')).trim().split(' ');
    const pid = Number(pidText);
    if (Number.isInteger(pid) && pid > 1) {
      const environ = await readFile(`/proc/${pid}/environ`, 'utf8').catch(() => '');
      if (environ.split('\0').includes(`${TAG_VARIABLE}=${file}`)) {
        try {
          process.kill(mode === 'group' ? -pid : pid, 'SIGKILL');
          ended += 1;
        } catch {
          // Gone meanwhile.
        }
      }
    }
    await rm(file, { force: true });
  }
  if (ended > 0) log.warn({ count: ended }, 'ended worker processes left behind by an earlier run of the service');
  return ended;
}
