// Runs the service in the foreground: starts it, prints what the operator needs once, and closes
// with grace on SIGTERM/SIGINT (stop accepting, let running answers finish, unload workers, exit 0).
import { waitFor } from 'xstate';
import type { Config } from './config.js';
import { issueFirstSecrets, secretsBlock } from './firstSecrets.js';
import { createLogger, resolveLogFormat, type Logger } from './system/observe/log.js';
import { LogTail } from './system/observe/logTail.js';
import { startService, type Service } from './compose.js';

export interface ServeOptions {
  /** Start the inference listener now, whatever was remembered (the demo does). */
  startEndpoint?: boolean;
  /** Make and show an operator password when none is stored (the demo does). */
  generatePassword?: boolean;
  /** Lines printed once the service listens (the demo's summary). */
  banner?: (service: Pick<Service, 'profiles' | 'inferenceAddress'>) => string[];
  log?: Logger;
}

/** Resolves once every log line written so far has reached stdout. */
const flushed = (log: Logger) => new Promise<void>((resolve) => log.flush(() => resolve()));

export async function serve(config: Config, options: ServeOptions = {}): Promise<Service> {
  // The console's log tail reads what this logger writes; a logger given from outside has none.
  const tail = options.log ? undefined : new LogTail();
  const terminal = process.stdout.isTTY === true;
  const log =
    options.log ??
    createLogger({
      level: config.logLevel,
      format: resolveLogFormat(config.logFormat, terminal),
      colorize: terminal && !config.env.NO_COLOR,
      ...(tail ? { tail } : {}),
    });
  const { service } = await startService(config, { log, ...(tail ? { tail } : {}) });
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
  if (options.startEndpoint && !service.accepting()) {
    service.listener().send({ type: 'endpoint.start' });
    await waitFor(service.listener(), (s) => !s.matches('starting'), { timeout: 30_000 });
  }
  const status = await service.status();
  if (status.error) out.push(`service-deck: inference listener: ${status.error.message}`);
  out.push(
    status.status === 'running'
      ? `service-deck: inference API on http://${status.host}:${status.port}/v1`
      : 'service-deck: inference listener is stopped (POST /api/v1/endpoint/start)',
  );
  out.push(...(options.banner?.(service) ?? []));
  // The start has succeeded: only now are the secrets made that are shown once (src/firstSecrets.ts).
  const issued = await issueFirstSecrets(service.secrets, { password: options.generatePassword ?? false });
  if (!service.secrets.hasPassword) out.push('service-deck: no operator password yet: run `service-deck set-password` to log in.');
  // The summary and the secrets come after every start-up log line, the secrets last: nothing
  // written during the start pushes them out of sight.
  await flushed(log);
  // Its last line says the start is over: whoever waits for it has the whole summary.
  const last = 'service-deck: running; Ctrl-C stops the service';
  process.stdout.write(`${[...out, ...secretsBlock(issued, config.stateDir), last].join('\n')}\n`);

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
