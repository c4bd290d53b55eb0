// `admin.json`: where the running service's admin listener is. The service writes it (0600,
// atomically) once the admin listener listens and removes it at its end, so that the
// `service-deck` command finds the service of a state directory on loopback whatever `--ui-port` it
// was started with. A file left by a killed service names a process that is gone: it counts as
// stopped, and the next start writes it again.
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { readJsonFile, StateFileError, writeJsonAtomic } from './files.js';

export const adminRecordSchema = z.looseObject({
  host: z.string().min(1),
  port: z.number().int().min(1).max(65535),
  pid: z.number().int().positive(),
  started_at: z.string(),
});
export type AdminRecord = z.output<typeof adminRecordSchema>;

export const adminRecordFile = (stateDir: string) => path.join(stateDir, 'admin.json');

export async function writeAdminRecord(stateDir: string, record: AdminRecord): Promise<void> {
  await writeJsonAtomic(adminRecordFile(stateDir), record);
}

/** The record, or undefined when there is none; a damaged file is a StateFileError naming it. */
export async function readAdminRecord(stateDir: string): Promise<AdminRecord | undefined> {
  const file = adminRecordFile(stateDir);
  const raw = await readJsonFile(file);
  if (raw === undefined) return undefined;
  const parsed = adminRecordSchema.safeParse(raw);
  if (!parsed.success) throw new StateFileError(file, `has unexpected content: ${z.prettifyError(parsed.error)}`);
  return parsed.data;
}

/** Removes the record if it is this process's own (a second service on the directory may have written its own since). */
export async function removeAdminRecord(stateDir: string, pid: number): Promise<void> {
  const record = await readAdminRecord(stateDir).catch(() => undefined);
  if (record?.pid === pid) await rm(adminRecordFile(stateDir), { force: true });
}
