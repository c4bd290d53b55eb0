// Runs the service in the foreground: starts it, prints what the operator needs once, and closes
// with grace on SIGTERM/SIGINT (stop accepting, let running answers finish, unload workers, exit 0).
import { waitFor } from 'xstate';
import type { Config } from './config.js';
import { createLogger, type Logger } from './system/observe/log.js';
import { LogTail } from './system/observe/logTail.js';
import { startService, type Service } from './compose.js';

export interface ServeOptions {
  /** Start the inference listener now, whatever was remembered (the demo does). */
  startEndpoint?: boolean;
  /** Lines printed once the service listens (the demo's summary). */
  banner?: (service: Service) => string[];
  log?: Logger;
}

export async function serve(config: Config, options: ServeOptions = {}): Promise<Service> {
  // The console's log tail reads what this logger writes; a logger given from outside has none.
  const tail = options.log ? undefined : new LogTail();
  const log = options.log ?? createLogger({ level: config.logLevel, ...(tail ? { tail } : {}) });
  const { service, generatedToken } = await startService(config, { log, ...(tail ? { tail } : {}) });
  const out: string[] = [`service-deck: state directory ${config.stateDir}`];
  const saved = service.endpoint.record.port;
  if (config.firstApiPort !== undefined && service.endpoint.existed && config.firstApiPort !== saved) {
    out.push(
      `service-deck: --api-port ${config.firstApiPort} applies only at the first start: ${service.endpoint.file} keeps port ${saved} (change it with POST /api/v1/endpoint/config while the listener is stopped)`,
    );
  }
  const admin = service.adminAddress();
  const adminUrl = `http://${config.uiHost}:${admin?.port ?? config.uiPort}`;
  out.push(`service-deck: operator console on ${adminUrl}/ (admin API on ${adminUrl}/api/v1)`);
  if (generatedToken) out.push(`service-deck: new API token (shown once, only its hash is stored): ${generatedToken}`);
  if (!service.secrets.hasPassword) out.push('service-deck: no operator password yet: run `service-deck set-password` to log in.');
  if (options.startEndpoint && !service.accepting()) {
    service.listener.send({ type: 'endpoint.start' });
    await waitFor(service.listener, (s) => !s.matches('starting'), { timeout: 30_000 });
  }
  const status = await service.status();
  if (status.error) out.push(`service-deck: inference listener: ${status.error.message}`);
  out.push(
    status.status === 'running'
      ? `service-deck: inference API on http://${status.host}:${status.port}/v1`
      : 'service-deck: inference listener is stopped (POST /api/v1/endpoint/start)',
  );
  out.push(...(options.banner?.(service) ?? []));
  process.stdout.write(`${out.join('\n')}\n`);

  let stopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      log.warn({ signal }, 'second signal: exiting at once');
      process.exit(1);
    }
    stopping = true;
    log.info({ signal }, 'stopping: letting running answers finish');
    service.shutdown().then(
      () => {
        log.flush();
        process.exit(0);
      },
      (error: unknown) => {
        log.error({ err: error }, 'shutdown failed');
        log.flush();
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  return service;
}
