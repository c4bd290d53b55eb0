// `service-deck enhancers install` follows the download by polling until the install ends: each
// wait between two polls listens for Ctrl-C, and takes its listener away again when it ends, so
// a long install (hundreds of polls) leaves none behind and Node warns of no leak.
import { getEventListeners } from 'node:events';
import t from 'tap';
import { follow } from '../../src/cli/enhancers.js';
import type { InstallView } from '../../src/system/observe/console.types.js';

const view = (state: InstallView['state'], bytesDone: number): InstallView =>
  ({ repo: 'org/tiny', state, file: 'tiny.gguf', bytes_done: bytesDone, bytes_total: 100, error: null }) as InstallView;

t.test('a follow of many polls leaves no abort listener behind', async (t) => {
  const stop = new AbortController();
  let polls = 0;
  const most: number[] = [];
  const end = await follow(
    async () => {
      polls++;
      most.push(getEventListeners(stop.signal, 'abort').length);
      return polls < 30 ? view('installing', polls) : view('installed', 100);
    },
    () => undefined,
    't2i',
    stop.signal,
    1,
  );
  t.equal(end?.state, 'installed');
  t.equal(polls, 30, 'it polled until the install ended');
  t.equal(Math.max(...most), 0, 'no listener stays from one wait to the next');
  t.equal(getEventListeners(stop.signal, 'abort').length, 0, 'none after the end');
});

t.test('Ctrl-C during a wait ends the following at once', async (t) => {
  const stop = new AbortController();
  let polls = 0;
  const following = follow(
    async () => {
      polls++;
      if (polls === 2) setImmediate(() => stop.abort());
      return view('installing', polls);
    },
    () => undefined,
    't2i',
    stop.signal,
    60_000,
  );
  t.equal(await following, null, 'stopped following');
  t.equal(polls, 2, 'during the second wait, which would have lasted a minute');
});
