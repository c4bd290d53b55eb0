import { readFileSync } from 'node:fs';

// Polls `probe` every 25 ms until it returns a value (not undefined), or fails after `timeoutMs`.
export async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** Whether a process with this pid exists (signal 0 checks without signalling). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Whether a process has ended: gone, or a zombie that its new parent has not reaped yet. */
export function ended(pid: number): boolean {
  if (!alive(pid)) return true;
  try {
    // The state follows the command name in parentheses: `pid (comm) S ...`.
    return readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '').startsWith('Z');
  } catch {
    return true;
  }
}

/**
 * Stops a process with SIGSTOP and waits until the kernel shows it stopped (state T). Until the
 * process has run to take the signal, a later SIGTERM (a lower number) would be taken first and
 * end it: on a busy machine that window can last long enough for a test to send one.
 */
export async function stopProcess(pid: number): Promise<void> {
  process.kill(pid, 'SIGSTOP');
  await until(`process ${pid} to be stopped`, async () => {
    try {
      return readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '').startsWith('T') ? true : undefined;
    } catch {
      throw new Error(`process ${pid} is gone`);
    }
  });
}
