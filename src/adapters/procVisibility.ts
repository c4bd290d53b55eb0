// Whether other local users can read this service's process list. sd-cli takes
// the image prompt as its `-p` argument (it has no prompt file or stdin), and /proc/<pid>/cmdline
// is readable by every user unless /proc is mounted with `hidepid` (1/noaccess, 2/invisible or
// 4/ptraceable: a user then sees only their own processes' details). A private PID namespace would
// not help: processes in it stay visible, command line and all, in the namespace above. So the
// service only reads the mount option and says at its start what a local user can see.
import { readFile } from 'node:fs/promises';

/** The `hidepid` value of the /proc mount in a /proc/self/mountinfo text ('0' when none). */
export function procHidepid(mountinfo: string): string {
  for (const line of mountinfo.split('\n')) {
    // `id parent major:minor root mountpoint options [optional fields] - type source super-options`
    const [before, after] = line.split(' - ');
    if (before?.split(' ')[4] !== '/proc' || !after?.startsWith('proc ')) continue;
    const options = `${before.split(' ')[5] ?? ''},${after.split(' ')[2] ?? ''}`.split(',');
    return options.find((option) => option.startsWith('hidepid='))?.slice('hidepid='.length) ?? '0';
  }
  return '0';
}

/** Whether another user's processes' command lines are hidden from a local user by /proc's `hidepid`. */
export function commandLinesHidden(mountinfo: string): boolean {
  return !['0', 'off'].includes(procHidepid(mountinfo));
}

/** The same for this machine's /proc (false when it cannot be read). */
export async function localCommandLinesHidden(): Promise<boolean> {
  return commandLinesHidden(await readFile('/proc/self/mountinfo', 'utf8').catch(() => ''));
}
