// scripts/lib/progress.sh, the native builds' progress: a captured
// `cmake --build` of llama-server and llama-fit-params goes through the filter. The captures
// (test/fixtures/cmake-build/) are of the llama.cpp source and flags of scripts/build-llama.sh,
// once with make and once with Ninja, their output as it was; the compiler and linker were a
// stand-in launcher that only wrote the outputs, so the lines are make's and Ninja's own over the
// real build graph, made in seconds. On a terminal it is one line, rewritten in place; in a log it is a line per
// tenth instead of the ~100 lines, one per percent, the builds printed before; and a build that
// moves slowly still shows a line every SERVICE_DECK_PROGRESS_SECONDS.
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';

const root = path.resolve(import.meta.dirname, '../..');
const FILTER = path.join(root, 'scripts', 'lib', 'progress.sh');
const fixture = (name: string) => path.join(root, 'test', 'fixtures', 'cmake-build', name);
const TENTHS = ['10%', '20%', '30%', '40%', '50%', '60%', '70%', '80%', '90%', '100%'];

/** The percentages a captured build reaches, in order and without repeats (one line each before). */
function percentages(text: string): number[] {
  const seen: number[] = [];
  for (const line of text.split('\n')) {
    const make = /^\[ *(\d+)%\]/.exec(line);
    const ninja = /^\[(\d+)\/(\d+)\]/.exec(line);
    const pct = make ? Number(make[1]) : ninja ? Math.floor((Number(ninja[1]) * 100) / Number(ninja[2])) : undefined;
    if (pct !== undefined && pct > (seen.at(-1) ?? -1)) seen.push(pct);
  }
  return seen;
}

const env = (extra: NodeJS.ProcessEnv = {}) => ({ PATH: process.env.PATH, SHELL: '/bin/sh', ...extra });

for (const [name, first, tenths] of [
  // make's figures jump past 30 and 60 (to 31 and 61): the tenth is reached, not hit exactly.
  ['llama-make.txt', '1%', ['10%', '20%', '31%', '40%', '50%', '61%', '70%', '80%', '90%', '100%']],
  ['llama-ninja.txt', '0%', TENTHS],
] as const) {
  t.test(`${name}: in a log, a line per tenth`, async (t) => {
    const input = readFileSync(fixture(name), 'utf8');
    const reached = percentages(input);
    t.ok(reached.length > 70, `the capture moves through ${reached.length} percentages (a line each before)`);
    const out = execFileSync('sh', [FILTER, 'llama-build: '], { input, env: env(), encoding: 'utf8' });
    t.same(
      out.split('\n').filter(Boolean),
      [first, ...tenths].map((pct) => `llama-build: ${pct}`),
      'the first figure, then one line per tenth: 11 lines, ending at 100%',
    );
  });

  t.test(`${name}: on a terminal, one line that updates`, async (t) => {
    const input = fixture(name);
    const reached = percentages(readFileSync(input, 'utf8'));
    // script(1) gives the filter a terminal as its stdout, as a build run by hand has.
    const out = execFileSync('script', ['-qec', `sh '${FILTER}' 'llama-build: ' < '${input}'`, '/dev/null'], { env: env(), encoding: 'utf8' });
    t.equal(out.split('\n').length - 1, 1, 'one line: only the end of the build ends it');
    const updates = out.split('\r').map((part) => part.trim()).filter(Boolean);
    t.equal(updates.length, reached.length, 'rewritten in place at each new percentage');
    t.equal(updates.at(-1), 'llama-build: 100%', 'ending at 100%');
    t.match(updates[0], /^llama-build: +[01]%$/, 'the figure is padded, so a shorter one leaves nothing of a longer one behind');
  });
}

t.test('in a log, a build that moves slowly shows a line every SERVICE_DECK_PROGRESS_SECONDS', async (t) => {
  /** Feeds 1% .. 9% (no tenth reached), one every 400 ms, and collects what the filter prints. */
  async function slowBuild(seconds: string | undefined) {
    const child = spawn('sh', [FILTER, 'whisper-build: '], { env: env(seconds === undefined ? {} : { SERVICE_DECK_PROGRESS_SECONDS: seconds }) });
    let out = '';
    let linesBeforeEnd = 0;
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
    const closed = new Promise((resolve) => child.once('close', resolve));
    for (let pct = 1; pct <= 9; pct++) {
      child.stdin.write(`[  ${pct}%] Building CXX object ggml/src/CMakeFiles/ggml-base.dir/step${pct}.cpp.o\nsome compiler warning\n`);
      await sleep(400);
    }
    linesBeforeEnd = out.split('\n').length - 1;
    child.stdin.end();
    await closed;
    return { lines: out.split('\n').filter(Boolean), linesBeforeEnd };
  }
  const quick = await slowBuild('1');
  t.ok(quick.linesBeforeEnd >= 3, `lines come while the build runs, not at its end (${quick.linesBeforeEnd} before the end: 1% and one per second)`);
  t.ok(quick.lines.length < 9, `still fewer lines than percentages (${quick.lines.join(', ')})`);
  t.equal(quick.lines.at(-1), 'whisper-build: 9%', 'the last figure reached ends the output');
  const usual = await slowBuild(undefined);
  t.same(usual.lines, ['whisper-build: 1%', 'whisper-build: 9%'], 'with the default 30 s: the first figure, and the last one when the input ends');
});
