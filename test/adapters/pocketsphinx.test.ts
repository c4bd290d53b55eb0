// The STT engine program (native/pocketsphinx-worker.c, built by scripts/build-pocketsphinx.sh):
// it loads the en-us model once and transcribes recording after recording in the same process.
// The recordings are English speech made here with espeak-ng, resampled to 16 kHz mono.
import { access, constants } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { engineClient, speech, wordAccuracy } from '../helpers/speech.js';

const cache = process.env.SERVICE_DECK_CACHE_DIR ?? path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache'), 'service-deck');
const ENGINE = path.join(cache, 'bin', 'pocketsphinx-worker');



t.test('one engine process transcribes recording after recording', async (t) => {
  await access(ENGINE, constants.X_OK).catch(() => {
    throw new Error(`${ENGINE} is not built: run sh scripts/build-pocketsphinx.sh (npm test does it during set-up, as root with Debian's packages)`);
  });
  const dir = t.testdir();
  const { child: engine, next, transcribe } = engineClient(ENGINE);
  t.teardown(() => engine.kill('SIGKILL'));

  t.same(JSON.parse(await next()), { ready: true }, 'the model is loaded once, at the start');
  const sentences = ['hello world this is a test of speech recognition', 'open the door and turn on the light', 'good morning how are you'];
  const accuracies: number[] = [];
  for (const sentence of sentences) {
    const heard = await transcribe(await speech(dir, sentence));
    t.type(heard.text, 'string', `an answer for "${sentence}"`);
    accuracies.push(wordAccuracy(sentence, heard.text ?? ''));
    t.comment(`"${sentence}" → "${heard.text}" (word accuracy ${(accuracies.at(-1)! * 100).toFixed(0)}%)`);
  }
  const mean = accuracies.reduce((a, b) => a + b, 0) / accuracies.length;
  t.ok(mean >= 0.3, `the engine recognises English speech (mean word accuracy ${(mean * 100).toFixed(0)}%)`);
  t.same(await transcribe(Buffer.alloc(0)), { text: '' }, 'an empty recording gives empty text');
  t.equal(engine.exitCode, null, 'the same process is still running after three jobs');

  engine.stdin.write('not a number\n');
  t.match(JSON.parse(await next()), { error: /bad request/ }, 'a malformed request is refused');
  const code = await new Promise<number | null>((resolve) => engine.once('exit', resolve));
  t.equal(code, 2, 'and the engine stops (the service restarts it)');
});
