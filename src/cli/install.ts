// `service-deck install` and `service-deck update` (one command, spec 8): the installation step a
// container installation runs on its state directory at the first install and at every update,
// while the service is stopped. `--api-ports <first>-<last>` saves the inference port range in
// `endpoint.json`; every later start uses it (`serve --api-ports` outweighs it for one run, and it
// outweighs SERVICE_DECK_API_PORTS, the image's default). `--api-port P` saves the inference port.
// The saved port is then checked against the range in force: one outside it is said with the fix,
// and the service would keep its listener stopped until it is corrected.
import path from 'node:path';
import { savedPortProblem } from '../../machines/listener/index.js';
import { withSavedPortRange, type Config, type PortRange } from '../config.js';
import { DEFAULT_INFERENCE_PORT, EndpointStore, type EndpointRecord } from '../store/endpoint.js';
import { ensurePrivateDir } from '../store/files.js';
import { locateService } from './admin.js';
import { CliError, UsageError } from './errors.js';

export interface InstallOptions {
  /** `--api-ports`: the range to save. */
  apiPorts?: PortRange;
  /** `--api-port`: the inference port to save. */
  apiPort?: number;
}

const SOURCES = {
  saved: 'saved in endpoint.json by `service-deck update --api-ports`',
  env: 'SERVICE_DECK_API_PORTS',
  native: 'no range saved: any port from 1024 to 65535',
  option: '--api-ports',
} as const;

/**
 * Saves what the options give and checks the saved port against the range in force. `config` is
 * loaded without `--api-ports` and `--api-port`, which this command takes as its own.
 */
export async function installCommand(config: Config, options: InstallOptions): Promise<number> {
  const { stateDir } = config;
  const located = await locateService(stateDir);
  if (located.running) {
    throw new CliError(
      `the service of ${stateDir} runs (process ${located.record.pid}): stop it first, then run this command again; a port range applies from the service's start`,
    );
  }
  await ensurePrivateDir(stateDir);
  const endpoint = await EndpointStore.open(stateDir);
  const saved = options.apiPorts ?? endpoint.record.api_ports;
  const inForce = withSavedPortRange(config, saved);
  const range = inForce.apiPorts;
  if (options.apiPort !== undefined && savedPortProblem(options.apiPort, range)) {
    throw new UsageError(`--api-port: ${options.apiPort} is outside the allowed ports ${range.first}-${range.last}`);
  }
  const patch: Partial<EndpointRecord> = {};
  if (options.apiPorts) patch.api_ports = options.apiPorts;
  if (options.apiPort !== undefined) patch.port = options.apiPort;
  else if (!endpoint.existed) {
    // A first install: the port the first start would take, or the range's first one.
    const port = config.firstApiPort ?? DEFAULT_INFERENCE_PORT;
    patch.port = savedPortProblem(port, range) ? range.first : port;
  }
  if (!endpoint.existed || Object.keys(patch).length > 0) await endpoint.update(patch);
  const { port } = endpoint.record;

  const file = path.join(stateDir, 'endpoint.json');
  const out = [
    `service-deck: state directory ${stateDir}`,
    `service-deck: inference ports ${range.first}-${range.last} (${SOURCES[inForce.apiPortsFrom]})${options.apiPorts ? `, saved in ${file}: every later start uses them` : ''}`,
  ];
  const env = config.env.SERVICE_DECK_API_PORTS;
  if (inForce.apiPortsFrom === 'saved' && env) out.push(`service-deck: SERVICE_DECK_API_PORTS=${env} is not used while endpoint.json keeps a range`);
  out.push(`service-deck: inference port ${port}${patch.port === undefined ? '' : ' (saved)'}`);
  process.stdout.write(`${out.join('\n')}\n`);
  if (savedPortProblem(port, range)) {
    process.stderr.write(
      `service-deck: warning: the saved port ${port} is outside the allowed ports ${range.first}-${range.last}: the inference listener stays stopped at the next start until it is corrected. ` +
        `Correct it now with \`service-deck update --api-port <port>\` (a port from ${range.first} to ${range.last}), or after the start with POST /api/v1/endpoint/config\n`,
    );
  }
  return 0;
}
