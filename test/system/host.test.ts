// Host facts: read through systeminformation (a stand-in here), the state directory's disk is the
// longest mount that holds it, a part that fails is null (graphics: empty) without failing the
// rest, and the facts are read at most once a minute.
import t from 'tap';
import { HOST_CACHE_MS, HostFacts, mountOf, type HostReader } from '../../src/system/host.js';
import { tempDir } from '../helpers/build.js';

const GiB = 1024 ** 3;

function stub(dir: string, fail: Partial<Record<keyof HostReader, 'throw' | 'reject'>> = {}) {
  const calls: Record<string, number> = {};
  const part = <T>(name: keyof HostReader, value: T) => () => {
    calls[name] = (calls[name] ?? 0) + 1;
    if (fail[name] === 'throw') throw new Error(`${name} exploded`);
    if (fail[name] === 'reject') return Promise.reject(new Error(`${name} failed`));
    return Promise.resolve(value);
  };
  const reader = {
    osInfo: part('osInfo', { platform: 'linux', distro: 'Debian GNU/Linux', release: '12', kernel: '6.1.0', arch: 'x64', hostname: 'deck', codename: 'x' }),
    cpu: part('cpu', { manufacturer: 'AMD', brand: 'Ryzen 9 7950X', cores: 32, physicalCores: 16, speed: 4.5, vendor: 'x' }),
    mem: part('mem', { total: 64 * GiB, available: 40 * GiB, free: 1 }),
    graphics: part('graphics', {
      controllers: [
        { vendor: 'NVIDIA', model: 'GeForce RTX 4090', driverVersion: '550.54', vram: 24564 },
        { vendor: 'AMD', model: 'Raphael', driverVersion: '', vram: null },
      ],
      displays: [],
    }),
    fsSize: part('fsSize', [
      { fs: '/dev/a', mount: '/', size: 500 * GiB, available: 100 * GiB },
      { fs: '/dev/b', mount: dir.slice(0, -2), size: 9 * GiB, available: 1 * GiB },
      { fs: '/dev/c', mount: dir, size: 2000 * GiB, available: 1500 * GiB },
      { fs: '/dev/d', mount: `${dir}/jobs`, size: 1 * GiB, available: 1 * GiB },
    ]),
  } as unknown as HostReader;
  return { reader, calls };
}

t.test('mountOf picks the longest mount that holds the directory', async (t) => {
  const mounts = [{ mount: '/' }, { mount: '/var' }, { mount: '/var/lib' }, { mount: '/var/lib/deck-other' }, { mount: '' }];
  t.equal(mountOf(mounts, '/var/lib/deck')?.mount, '/var/lib');
  t.equal(mountOf(mounts, '/var/lib')?.mount, '/var/lib');
  t.equal(mountOf(mounts, '/home/x')?.mount, '/');
  t.equal(mountOf([{ mount: '/data' }], '/home/x'), undefined);
});

t.test('every part read, the state directory on its own mount', async (t) => {
  const dir = await tempDir(t);
  const { reader } = stub(dir);
  const view = await new HostFacts(dir, reader).read();
  t.same(view.os, { platform: 'linux', distro: 'Debian GNU/Linux', release: '12', kernel: '6.1.0', arch: 'x64', hostname: 'deck' });
  t.same(view.cpu, { manufacturer: 'AMD', brand: 'Ryzen 9 7950X', cores: 32, physicalCores: 16, speedGHz: 4.5 });
  t.same(view.memory, { totalBytes: 64 * GiB, availableBytes: 40 * GiB });
  t.same(view.graphics, [
    { vendor: 'NVIDIA', model: 'GeForce RTX 4090', driverVersion: '550.54', vramMiB: 24564 },
    { vendor: 'AMD', model: 'Raphael', driverVersion: null, vramMiB: null },
  ]);
  t.same(view.disk, { mount: dir, sizeBytes: 2000 * GiB, availableBytes: 1500 * GiB }, 'the longest mount holding the state dir, not a deeper one');
  t.equal(view.node, process.version);
  t.same(view.unavailable, []);
});

t.test('a part that fails is null, the others are shown', async (t) => {
  const dir = await tempDir(t);
  const { reader } = stub(dir, { fsSize: 'reject', graphics: 'throw', cpu: 'reject' });
  const view = await new HostFacts(dir, reader).read();
  t.equal(view.disk, null);
  t.same(view.graphics, []);
  t.equal(view.cpu, null);
  t.equal(view.os?.hostname, 'deck');
  t.equal(view.memory?.totalBytes, 64 * GiB);
  t.same(view.unavailable.sort(), ['cpu', 'disk', 'graphics']);
});

t.test('read at most once a minute', async (t) => {
  const dir = await tempDir(t);
  const { reader, calls } = stub(dir);
  let now = 1_000_000;
  const host = new HostFacts(dir, reader, () => now);
  const [a, b] = await Promise.all([host.read(), host.read()]);
  t.equal(a, b, 'callers at the same time share one read');
  now += HOST_CACHE_MS - 1;
  await host.read();
  t.same(calls, { osInfo: 1, cpu: 1, mem: 1, graphics: 1, fsSize: 1 });
  now += 1;
  const later = await host.read();
  t.equal(calls.osInfo, 2, 'read again after a minute');
  t.equal(later.read_at, new Date(now).toISOString());
});
