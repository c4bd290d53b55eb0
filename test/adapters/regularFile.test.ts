// Opening files an operator named: only a regular file is opened; a FIFO, a socket, a
// device or a directory is refused by its kind without being opened; and file probes hold at most
// PROBE_LANES of libuv's threads at once, in the order they came.
import { execFileSync } from 'node:child_process';
import { closeSync, constants, openSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { NotRegularFile, onProbeLane, openRegular, PROBE_LANES } from '../../src/adapters/regularFile.js';
import { tempDir } from '../helpers/build.js';

async function refusal(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  return undefined;
}

t.test('openRegular opens a regular file and refuses every other kind by name, at once', async (t) => {
  const dir = await tempDir(t);
  const file = path.join(dir, 'model.bin');
  await writeFile(file, 'GGUF');
  const opened = await openRegular(file);
  t.equal(opened.stats.size, 4, 'a regular file is opened, with its stats');
  const buffer = Buffer.alloc(4);
  await opened.handle.read(buffer, 0, 4, 0);
  await opened.handle.close();
  t.equal(buffer.toString(), 'GGUF', 'and read');

  const fifo = path.join(dir, 'model.fifo');
  execFileSync('mkfifo', [fifo]);
  // An open of the FIFO would wait for a writer: this one lets it go, so a failure still ends.
  const writer = setTimeout(() => closeSync(openSync(fifo, constants.O_RDWR | constants.O_NONBLOCK)), 2_000);
  t.teardown(() => clearTimeout(writer));
  const started = Date.now();
  const cases: Array<[string, string]> = [
    [fifo, 'FIFO'],
    ['/dev/null', 'character device'],
    [dir, 'directory'],
  ];
  for (const [target, kind] of cases) {
    const error = await refusal(openRegular(target));
    t.ok(error instanceof NotRegularFile, `${kind}: refused as not a regular file`);
    t.match(error, { kind, message: `${target} is a ${kind}, not a regular file` });
  }
  t.ok(Date.now() - started < 1_000, 'the FIFO was not opened: nothing waited for a writer');
  t.match(await refusal(openRegular(path.join(dir, 'absent'))), { code: 'ENOENT' }, 'a missing file is the fs error');
});

t.test(`file probes run at most ${PROBE_LANES} at once, in the order they came`, async (t) => {
  let running = 0;
  let most = 0;
  const started: number[] = [];
  const releases: Array<() => void> = [];
  const probes = Array.from({ length: 6 }, (_, i) =>
    onProbeLane(async () => {
      started.push(i);
      most = Math.max(most, ++running);
      await new Promise<void>((resolve) => releases.push(resolve));
      running--;
      return i;
    }),
  );
  await new Promise((resolve) => setImmediate(resolve));
  t.same(started, [0, 1], `only ${PROBE_LANES} probes started while those hang`);
  while (releases.length > 0) {
    releases.shift()?.();
    await new Promise((resolve) => setImmediate(resolve));
  }
  t.same(await Promise.all(probes), [0, 1, 2, 3, 4, 5], 'every probe answers');
  t.same(started, [0, 1, 2, 3, 4, 5], 'in order');
  t.equal(most, PROBE_LANES, `never more than ${PROBE_LANES} at once`);
  const failed = await refusal(onProbeLane(() => Promise.reject(new Error('gone'))));
  t.match(failed, { message: 'gone' }, 'a failing probe passes its error on');
  t.equal(await onProbeLane(async () => 'free'), 'free', 'and gives its lane back');
});
