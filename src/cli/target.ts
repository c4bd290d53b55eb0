// What a `service-deck` admin command acts on: the running service of the state directory, through
// its admin API on loopback, or, while it is stopped, the state directory's files, read and never
// written. Blockers of a stopped service's profiles are computed by the same catalog the service
// uses (src/system/catalog/catalog.ts).
import { stat } from 'node:fs/promises';
import type { Config } from '../config.js';
import type { EndpointRecord } from '../store/endpoint.js';
import type { ProfileView } from '../store/profile.schema.js';
import { locateService, withAdminSession, type AdminSession } from './admin.js';
import { CliError } from './errors.js';
import { operatorPassword, type CredentialSource } from './password.js';

/** The service process of the state directory, as the commands report it. */
export interface ServiceFacts {
  running: boolean;
  pid: number | null;
  admin_url: string | null;
  /** Why an `admin.json` that is there does not count, or null. */
  note: string | null;
}

export type Target =
  | { running: true; stateDir: string; service: ServiceFacts; session: AdminSession }
  | { running: false; stateDir: string; service: ServiceFacts; endpoint: Readonly<EndpointRecord>; profiles: () => Promise<ProfileView[]> };

async function readStopped(config: Config) {
  const found = await stat(config.stateDir).catch(() => undefined);
  if (!found?.isDirectory()) throw new CliError(`no state directory at ${config.stateDir} (the service has not run with it; give --state-dir or SERVICE_DECK_STATE_DIR)`);
  // The stores and the catalog load only here: a command on the running service needs none of them.
  const [{ EndpointStore }, { ProfileStore }, { catalogOf }] = await Promise.all([
    import('../store/endpoint.js'),
    import('../store/profiles.js'),
    import('../system/catalog/catalog.js'),
  ]);
  const endpoint = await EndpointStore.open(config.stateDir);
  const profiles = await ProfileStore.open(config.stateDir, endpoint);
  return { endpoint: endpoint.record, profiles: () => catalogOf(config, profiles).views() };
}

/**
 * Runs `work` on the state directory's service: logged in to it while it runs (the password from
 * `credential`; logged out afterwards), else on its files. `command` names the command in the
 * message that asks for a password.
 */
export async function onTarget<T>(config: Config, credential: CredentialSource, command: string, work: (target: Target) => Promise<T>): Promise<T> {
  const stateDir = config.stateDir;
  const located = await locateService(stateDir);
  if (!located.running) {
    const service: ServiceFacts = { running: false, pid: null, admin_url: null, note: located.note };
    return work({ running: false, stateDir, service, ...(await readStopped(config)) });
  }
  const { url, record } = located;
  const service: ServiceFacts = { running: true, pid: record.pid, admin_url: url, note: null };
  const password = await operatorPassword(credential, `${command} logs in to the running service of ${stateDir} (process ${record.pid}, admin API ${url})`);
  return withAdminSession(url, password, (session) => work({ running: true, stateDir, service, session }));
}

/** The one line that says which state directory a command acted on, and how. */
export function targetLine(target: Target): string {
  const how = target.running
    ? `service running, process ${target.service.pid}, admin API ${target.service.admin_url}`
    : `service not running: read from its files${target.service.note ? `; ${target.service.note}` : ''}`;
  return `service-deck: state directory ${target.stateDir} (${how})`;
}
