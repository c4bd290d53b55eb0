// Following work that the running service does (an enhancer install, a model pull): the command
// asks where it stands every FOLLOW_INTERVAL_MS until it ends. Ctrl-C stops only the following,
// never the work: the service goes on, and the command says how to see or stop it. Each wait
// between two polls listens for Ctrl-C and takes its listener away again, so a long download
// (hundreds of polls) leaves none behind.

/** How often a follower asks where the work stands. */
export const FOLLOW_INTERVAL_MS = 500;

/**
 * Reads the view, shows it, and reads again after `intervalMs` until `ended` says so (that view)
 * or `stop` aborts (null).
 */
export async function pollUntil<V>(read: () => Promise<V>, show: (view: V) => void, ended: (view: V) => boolean, stop: AbortSignal, intervalMs = FOLLOW_INTERVAL_MS): Promise<V | null> {
  for (;;) {
    const view = await read();
    show(view);
    if (ended(view)) return view;
    if (stop.aborted) return null;
    await new Promise<void>((resolve) => {
      const onAbort = () => (clearTimeout(timer), resolve());
      const timer = setTimeout(() => {
        stop.removeEventListener('abort', onAbort);
        resolve();
      }, intervalMs);
      stop.addEventListener('abort', onAbort, { once: true });
    });
    if (stop.aborted) return null;
  }
}

/** Runs `work` with a signal that Ctrl-C (SIGINT) aborts, for as long as it runs. */
export async function untilCtrlC<T>(work: (stop: AbortSignal) => Promise<T>): Promise<T> {
  const stop = new AbortController();
  const onSigint = () => stop.abort();
  process.once('SIGINT', onSigint);
  try {
    return await work(stop.signal);
  } finally {
    process.off('SIGINT', onSigint);
  }
}
