// CONTRACT section 10, the hub before a download: a repository's files with their sizes, and a
// remote GGUF's facts and forecast from its header, read with HTTP range requests up to a bound of
// a few MiB (the range grows only as far as the header needs; the weights are never asked for).
// A split GGUF is read part by part, each part's header under the bound. The hub's token goes to
// its own origin only (src/adapters/hubRead.ts).
import { GgufError, mergeSplit, readGgufHeader, splitName, splitPart, type GgufInfo } from '../../adapters/gguf.js';
import { listHubTree, openHubRange, resolveUrl, type HubAccess } from '../../adapters/hubRead.js';
import type { ResolveHost } from '../../adapters/hubDownload.js';
import type { ForecastRoom } from '../../../machines/supervisor/index.js';
import { formatOf, ggufRead } from './modelFiles.js';
import { forecastContext, forecastView } from './modelForecast.js';
import type { HubFileView, HubFilesView, HubForecastView } from '../observe/console.types.js';

export type { HubFileView, HubFilesView, HubForecastView };

/** The most header bytes read of a remote GGUF (of each part of a split one): real headers, tokenizer included, take up to about 10 MiB. */
export const REMOTE_HEADER_BYTES = 16 * 1024 * 1024;




/** A header the service cannot read (not GGUF, over the bound, damaged): the file's fault, not the hub's. */
export class RemoteModelError extends Error {
  override name = 'RemoteModelError';
}

export interface ModelHubDeps {
  hub: string;
  token: string | undefined;
  room: () => Promise<ForecastRoom>;
  /** Default REMOTE_HEADER_BYTES. */
  headerBytes?: number;
  /** Tests give a stand-in for DNS. */
  resolveHost?: ResolveHost;
}

export class ModelHub {
  constructor(private readonly deps: ModelHubDeps) {}

  #access(signal?: AbortSignal): HubAccess {
    return { hub: this.deps.hub, token: this.deps.token, signal, resolveHost: this.deps.resolveHost };
  }

  async files(repo: string, revision: string, signal?: AbortSignal): Promise<HubFilesView> {
    const tree = await listHubTree(this.#access(signal), repo, revision);
    const files = tree.flatMap((file) => {
      const name = file.path.split('/').pop() ?? file.path;
      const format = formatOf(name) ?? 'unknown';
      return [{ path: file.path, bytes: file.size, sha256: file.sha256, format }];
    });
    return { repo, revision, files };
  }

  async forecast(repo: string, revision: string, file: string, signal?: AbortSignal): Promise<HubForecastView> {
    const bound = this.deps.headerBytes ?? REMOTE_HEADER_BYTES;
    const split = splitPart(file);
    const paths = split ? Array.from({ length: split.count }, (_, i) => splitName(split.prefix, i + 1, split.count)) : [file];
    const infos: GgufInfo[] = [];
    let received = 0;
    for (const part of paths) {
      const url = resolveUrl(this.deps.hub, repo, revision, part);
      const remote = await openHubRange(this.#access(signal), url);
      try {
        infos.push(await readGgufHeader(`${repo}/${part}`, remote, remote.size, bound));
      } catch (error) {
        if (error instanceof GgufError) throw new RemoteModelError(error.message);
        throw error;
      } finally {
        received += remote.received();
        await remote.close();
      }
    }
    let merged: GgufInfo;
    try {
      merged = mergeSplit(infos);
    } catch (error) {
      throw new RemoteModelError((error as Error).message);
    }
    const read = ggufRead(merged);
    const facts = read.facts!;
    const forecast = read.shape ? forecastView(await this.deps.room(), read.shape, forecastContext(facts)) : null;
    return { facts, forecast, error: read.error, header_bytes: received };
  }
}
