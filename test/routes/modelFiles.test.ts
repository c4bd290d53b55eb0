// CONTRACT section 10, `GET /api/v1/model-files`: every model file in SERVICE_DECK_MODEL_DIRS with
// its GGUF facts and the memory check's forecast on the simulated GPU inventory; a whisper.cpp
// `ggml-*.bin` as whisper; a hostile GGUF header shows its error while the others list; a split
// GGUF is one model; an unchanged file's header is read once.
import { mkdir, stat, utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { encodeGguf, type GgufModel, type GgufValue } from '../../src/adapters/gguf.js';
import { tinyModel, writeTinyModel } from '../../src/adapters/tinyModel.js';
import type { ModelFileView, ModelFilesView } from '../../src/system/models/modelFiles.js';
import { build, tempDir } from '../helpers/build.js';
import { hostileGguf } from '../helpers/hostileGguf.js';
import { writeTinyWhisper } from '../helpers/tinyWhisper.js';

const GPUS = JSON.stringify([{ uuid: 'GPU-a', name: 'sim', memoryTotalMiB: 24576 }]);

/** The tiny model cut into two gguf-split parts: the metadata and the first half of the tensors, then the rest. */
function splitModel(model: GgufModel): [Uint8Array, Uint8Array] {
  const half = Math.ceil(model.tensors.length / 2);
  const u16 = (value: number): GgufValue => ({ type: 'uint16', value });
  const split = (no: number): Array<readonly [string, GgufValue]> => [
    ['split.no', u16(no)],
    ['split.count', u16(2)],
    ['split.tensors.count', { type: 'int32', value: model.tensors.length }],
  ];
  return [
    encodeGguf({ metadata: [...model.metadata, ...split(0)], tensors: model.tensors.slice(0, half) }),
    encodeGguf({ metadata: [['general.architecture', { type: 'string', value: 'llama' }], ...split(1)], tensors: model.tensors.slice(half) }),
  ];
}

t.test('the model folders: facts and forecast, whisper, a hostile header, a split model, the cache', async (t) => {
  const dir = await tempDir(t);
  const second = await tempDir(t);
  await mkdir(path.join(dir, 'org', 'tiny'), { recursive: true });
  const whole = await writeTinyModel(path.join(dir, 'org', 'tiny', 'tiny.gguf'));
  const whisper = await writeTinyWhisper(path.join(second, 'ggml-tiny.bin'));
  const hostile = path.join(second, 'hostile.gguf');
  await writeFile(hostile, hostileGguf());
  const [part1, part2] = splitModel(tinyModel());
  const first = path.join(second, 'tiny-00001-of-00002.gguf');
  await writeFile(first, part1);
  await writeFile(path.join(second, 'tiny-00002-of-00002.gguf'), part2);
  await writeFile(path.join(second, 'notes.txt'), 'not a model');

  const b = await build(t, { env: { SERVICE_DECK_MODEL_DIRS: `${dir}:${second}`, SERVICE_DECK_GPUS: GPUS } });
  const res = await b.admin('GET', '/api/v1/model-files');
  t.equal(res.status, 200);
  const { files, problems } = (await res.json()) as ModelFilesView;
  t.same(problems, []);
  const byPath = new Map(files.map((file) => [file.path, file]));
  t.same([...byPath.keys()].sort(), [whole, whisper, hostile, first].sort(), 'four models: the split parts are one, the text file is none');

  const tiny = byPath.get(whole) as ModelFileView;
  t.equal(tiny.format, 'gguf');
  t.equal(tiny.bytes, (await stat(whole)).size);
  t.equal(tiny.error, null);
  t.match(tiny.facts, { architecture: 'llama', quantization: 'F32', context_length: 32768, chat_template: true });
  t.ok((tiny.facts?.parameters ?? 0) > 0, 'a parameter count');
  t.match(tiny.forecast, { fits: true, gpu_layers: 3, layer_count: 3, context: 8192, reason: null }, 'every layer of the two blocks and the output on the GPU at the default context');
  t.equal(tiny.forecast?.gpus.length, 1);
  t.equal(tiny.forecast?.summary, 'fits on GPU 0 with every layer at 8192 tokens');
  t.equal(tiny.forecast?.gpus[0]?.uuid, 'GPU-a');
  t.ok((tiny.forecast?.gpus[0]?.bytes ?? 0) > 512 * 1024 * 1024, 'the GPU holds the layers and the CUDA overhead');
  t.ok((tiny.forecast?.ram_bytes ?? 0) > 0);

  t.match(byPath.get(whisper), { format: 'whisper', facts: { architecture: 'whisper', chat_template: false }, forecast: null, error: null });

  const bad = byPath.get(hostile) as ModelFileView;
  t.match(bad, { format: 'gguf', facts: null, forecast: null });
  t.match(bad.error, `${hostile}: absurd tensor count`, 'the hostile header shows its error, naming the file');

  const split = byPath.get(first) as ModelFileView;
  t.equal(split.bytes, part1.length + part2.length, 'the parts counted together');
  t.equal(split.error, null);
  t.same(split.facts, tiny.facts, 'the same facts as the whole model');
  t.same(split.forecast, tiny.forecast, 'and the same forecast: every part\'s tensors counted');

  // The cache: an unchanged file is not read again; a changed mtime is.
  const reads = b.service.models.headerReads;
  t.equal(reads, 4, 'one read per model');
  await b.admin('GET', '/api/v1/model-files');
  t.equal(b.service.models.headerReads, reads, 'nothing unchanged was read again');
  const later = new Date(Date.now() + 60_000);
  await utimes(whole, later, later);
  const again = (await (await b.admin('GET', '/api/v1/model-files')).json()) as ModelFilesView;
  t.equal(b.service.models.headerReads, reads + 1, 'the touched file alone was read again');
  t.same(again.files.find((f) => f.path === whole)?.facts, tiny.facts);
});

t.test('a split model with a part missing, a folder that is not there', async (t) => {
  const dir = await tempDir(t);
  const [part1] = splitModel(tinyModel());
  const first = path.join(dir, 'tiny-00001-of-00002.gguf');
  await writeFile(first, part1);
  const missing = path.join(dir, 'nowhere');
  const b = await build(t, { env: { SERVICE_DECK_MODEL_DIRS: `${dir}:${missing}`, SERVICE_DECK_GPUS: 'none' } });
  const { files, problems } = (await (await b.admin('GET', '/api/v1/model-files')).json()) as ModelFilesView;
  t.same(files.map((f) => [f.path, f.error]), [[first, 'a split model with parts missing: tiny-00002-of-00002.gguf']]);
  t.same(problems, [`${missing}: no such folder`]);
});

t.test('the default folder is <state>/models, made 0700; the route needs the admin session', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_GPUS: 'none' } });
  const models = path.join(b.stateDir, 'models');
  t.equal((await stat(models)).mode & 0o777, 0o700);
  const tiny = await writeTinyModel(path.join(models, 'tiny.gguf'));
  const { files } = (await (await b.admin('GET', '/api/v1/model-files')).json()) as ModelFilesView;
  t.same(files.map((f) => f.path), [tiny]);
  t.match(files[0]?.forecast, { fits: true, gpu_layers: 0, gpus: [], reason: null }, 'no GPU: on the CPU');
  t.match(files[0]?.forecast?.summary, /^runs on the CPU at 8192 tokens, \d+\.\d GiB of RAM$/);
  const anonymous = await fetch(`${b.adminUrl}/api/v1/model-files`, { headers: { 'x-service-deck': '1' } });
  t.equal(anonymous.status, 401);
});
