// The prompt enhancers (spec 4.7, CONTRACT section 8): each task's install with its progress as
// the event stream pushes it, install, cancel; and per image profile the two switches (t2i, i2i),
// saved with the profile's revision; the last preview (made on the image test page), original
// beside suggestion.
import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api, message } from '../api.js';
import { enhancers, notify, status } from '../state.js';
import type { EnhancerPreview, InstallPlan, InstallView, ProfileView } from '../types.js';
import { Alert, ActionButton, Badge, Facts, Section, Table, attempt, bytes, clock, since } from '../ui.js';
import { PreviewPrompts } from './enhancerPreview.js';

const TASKS = [
  ['t2i', 'Text to image'],
  ['i2i', 'Editing with reference images'],
] as const;

const tone = (state: InstallView['state']) => (state === 'installed' ? 'ok' : state === 'failed' ? 'bad' : state === 'installing' ? 'warn' : 'idle');

/** A download's size as hubs state it (decimal units: the official recipe is "19.9 GB"). */
export const gb = (value: number | null | undefined): string =>
  value == null ? '—' : value >= 1e9 ? `${(value / 1e9).toFixed(1)} GB` : value >= 1e6 ? `${(value / 1e6).toFixed(1)} MB` : `${Math.max(1, Math.round(value / 1e3))} kB`;

/** What an install would download and whether it fits (GET /api/v1/prompt-enhancers/plan), asked of the hub when the page shows a task not installed. */
function useInstallPlan(task: 't2i' | 'i2i', wanted: boolean) {
  const [plan, setPlan] = useState<InstallPlan | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    if (!wanted) return undefined;
    const controller = new AbortController();
    api<InstallPlan>('GET', `/api/v1/prompt-enhancers/plan?task=${task}`, undefined, { signal: controller.signal }).then(
      (answer) => {
        setPlan(answer);
        setError(null);
      },
      (failure: unknown) => {
        if (!controller.signal.aborted) setError(message(failure));
      },
    );
    return () => controller.abort();
  }, [task, wanted]);
  return { plan, error, setPlan };
}

/** The Install button's own words: what it will download and what the disk has free. */
function sizeText(plan: InstallPlan | null): string {
  if (!plan) return '';
  const download = plan.hub_error !== null ? 'hub unreachable' : plan.bytes_to_download === null ? 'size unknown' : gb(plan.bytes_to_download);
  return ` (${download}, ${plan.free_bytes === null ? 'free disk unknown' : `${gb(plan.free_bytes)} free`})`;
}

/**
 * Asks the hub again right before the install, then asks the operator: a download that does not
 * fit is refused with the numbers; one that fits is confirmed with its size and the free disk.
 */
async function confirmInstall(task: 't2i' | 'i2i', setPlan: (plan: InstallPlan) => void): Promise<void> {
  const plan = await attempt('Install', () => api<InstallPlan>('GET', `/api/v1/prompt-enhancers/plan?task=${task}`));
  if (!plan) return;
  setPlan(plan);
  if (plan.hub_error !== null) {
    notify('error', `Install: ${plan.reason}.`);
    return;
  }
  if (plan.fits === false) {
    notify('error', `Install: ${plan.reason ?? 'the download does not fit the free disk'}.`);
    return;
  }
  const question =
    plan.bytes_to_download === null
      ? `The hub states no size for this download (${plan.reason ?? 'size unknown'}). Install ${plan.repo} anyway?`
      : `Download ${gb(plan.bytes_to_download)} from ${plan.repo}` +
        (plan.bytes_on_disk > 0 ? ` (${gb(plan.bytes_total)} in all, ${gb(plan.bytes_on_disk)} already here)` : '') +
        `?\n\nFree disk: ${plan.free_bytes === null ? 'unknown' : gb(plan.free_bytes)}` +
        (plan.free_bytes === null ? '' : `, ${gb(plan.free_bytes - plan.bytes_to_download)} left afterwards`) +
        '.';
  if (!window.confirm(question)) return;
  await attempt('Install', () => api('POST', '/api/v1/prompt-enhancers/install', { task }));
}

function Install({ task, title, view, busy }: { task: 't2i' | 'i2i'; title: string; view: InstallView; busy: boolean }) {
  const installing = view.state === 'installing';
  const { plan, error, setPlan } = useInstallPlan(task, view.state !== 'installed' && !installing);
  const wontFit = plan?.fits === false;
  return (
    <Section title={title} id={`enhancer-${task}`}>
      <Facts
        items={[
          ['Repository', <code>{view.repo}</code>],
          ['State', <Badge tone={tone(view.state)}>{view.state.replace('_', ' ')}</Badge>],
          ['Downloaded', view.bytes_total ? `${bytes(view.bytes_done)} of ${bytes(view.bytes_total)}` : bytes(view.bytes_done)],
          ...(view.file ? ([['File', <code>{view.file}</code>]] as Array<[string, ComponentChildren]>) : []),
        ]}
      />
      {view.bytes_total ? (
        <progress max={view.bytes_total} value={view.bytes_done} aria-label={`${title}: downloaded`} />
      ) : null}
      <Alert text={view.error} />
      {view.state !== 'installed' && !installing ? (
        <p class="hint" data-testid={`plan-${task}`}>
          {plan
            ? `Download: ${plan.bytes_to_download === null ? 'size unknown' : gb(plan.bytes_to_download)}${plan.bytes_on_disk > 0 ? ` of ${gb(plan.bytes_total)} (${gb(plan.bytes_on_disk)} already here)` : ''}; free disk: ${plan.free_bytes === null ? 'unknown' : gb(plan.free_bytes)}.`
            : error
              ? `The download's size could not be asked of the hub: ${error}`
              : 'Asking the hub for the download size…'}
          {wontFit ? <span class="error"> It does not fit: {plan.reason}.</span> : null}
        </p>
      ) : null}
      <div class="form-actions">
        <ActionButton
          kind="primary"
          disabled={installing || busy || view.state === 'installed'}
          title={wontFit ? (plan.reason ?? undefined) : undefined}
          onClick={() => confirmInstall(task, setPlan)}
        >
          {view.state === 'failed' && view.bytes_done > 0 ? 'Resume install' : 'Install'}
          {view.state === 'installed' || installing ? '' : sizeText(plan)}
        </ActionButton>
        <ActionButton kind="danger" disabled={!installing} onClick={() => attempt('Cancel', () => api('POST', '/api/v1/prompt-enhancers/cancel', {}))}>
          Cancel
        </ActionButton>
      </div>
    </Section>
  );
}

/** Where the enhancer may run (CONTRACT 8): every GPU, the CPU alone, or one GPU of the inventory. */
function deviceChoices(device: string): Array<[string, string]> {
  const gpus = status.value?.gpus ?? [];
  const choices: Array<[string, string]> = [
    ['auto', 'every GPU (rest in RAM)'],
    ['cpu', 'CPU only (chat and TTS stay loaded)'],
    ...gpus.map((g): [string, string] => [g.uuid, `${g.name} ${g.uuid}`]),
  ];
  // A GPU no longer in the inventory stays shown: the job is refused until it is back or changed.
  if (!choices.some(([value]) => value === device)) choices.push([device, `${device} (not present)`]);
  return choices;
}

/**
 * Each profile's answer to the last choice saved here: until the live feed brings that revision, a
 * second choice builds on it (its revision and the other choices), not on the older view, which
 * would be refused as stale or undo the first.
 */
const savedHere = new Map<string, ProfileView>();

type Chosen = { t2i: string | null; i2i: string | null; device: string } | undefined;
const choiceOf = (profile: ProfileView): Chosen => (profile as { prompt_enhancer?: Chosen }).prompt_enhancer;

/** The newer of the shown view and the answer to the last choice saved here. */
function latest(shown: ProfileView): ProfileView {
  const saved = savedHere.get(shown.id);
  return saved && saved.revision > shown.revision ? saved : shown;
}

function Switches({ profile: shown }: { profile: ProfileView }) {
  const profile = latest(shown);
  const chosen = choiceOf(profile);
  const device = chosen?.device ?? 'auto';
  // Read when the choice is made, not when the row was drawn: the row is drawn again only once
  // the live feed brings the saved revision.
  const post = (change: Record<string, unknown>, done: string) =>
    attempt('Enhancer choice', async () => {
      const base = latest(shown);
      const now = choiceOf(base);
      const next = { t2i: now?.t2i ? now.t2i : false, i2i: now?.i2i ? now.i2i : false, device: now?.device ?? 'auto', ...change };
      savedHere.set(base.id, await api<ProfileView>('POST', '/api/v1/profiles/prompt-enhancer', { id: base.id, revision: base.revision, prompt_enhancer: next }));
      notify('info', `${base.name}: ${done}.`);
    });
  const save = (task: 't2i' | 'i2i', on: boolean) => post({ [task]: on ? null : false }, `${task} enhancer ${on ? 'on' : 'off'}`);
  return (
    <tr data-profile={profile.name}>
      <th scope="row">{profile.name}</th>
      {TASKS.map(([task]) => (
        <td key={task}>
          <label class="choice">
            <input type="checkbox" checked={Boolean(chosen?.[task])} onChange={(e) => void save(task, e.currentTarget.checked)} /> {task} {chosen?.[task] ? <code>{chosen[task]}</code> : 'off'}
          </label>
        </td>
      ))}
      <td>
        <select aria-label={`Enhancer device of ${profile.name}`} value={device} onChange={(e) => void post({ device: e.currentTarget.value }, `enhancer device ${e.currentTarget.value}`)}>
          {deviceChoices(device).map(([value, label]) => (
            <option key={value} value={value}>
              {label}
            </option>
          ))}
        </select>
      </td>
      <td>{profile.blockers.filter((b) => b.startsWith('prompt enhancer')).join('; ') || '—'}</td>
    </tr>
  );
}

/** The last preview: which profile and task, when, and the original beside the suggestion (RAM only). */
function LastPreview({ preview, profiles }: { preview: EnhancerPreview | null; profiles: ProfileView[] }) {
  return (
    <Section title="Last preview" id="enhancer-preview">
      {preview ? (
        <>
          <Facts
            items={[
              ['Profile', `${profiles.find((p) => p.id === preview.profile_id)?.name ?? preview.profile_id} (revision ${preview.revision})`],
              ['Task', preview.images > 0 ? `${preview.task}, ${preview.images} reference image${preview.images === 1 ? '' : 's'}` : preview.task],
              ['When', `${clock(preview.created_at)} (${since(preview.created_at)})`],
            ]}
          />
          <PreviewPrompts preview={preview} />
        </>
      ) : (
        <p class="empty">No preview since the service started: run one from the image test.</p>
      )}
    </Section>
  );
}

export function Enhancers() {
  const view = enhancers.value;
  const profiles = (status.value?.profiles ?? []).filter((p) => p.category === 'image');
  if (!view) return <p class="loading">Waiting for the enhancers' state…</p>;
  const busy = view.t2i.state === 'installing' || view.i2i.state === 'installing';
  return (
    <div class="grid two">
      {TASKS.map(([task, title]) => (
        <Install key={task} task={task} title={title} view={view[task]} busy={busy} />
      ))}
      <Section title="Per image profile" id="enhancer-profiles">
        <p class="hint">A task switched on runs its enhancer before the image worker; until its recipe is installed the profile carries a blocker.</p>
        {profiles.length === 0 ? (
          <p class="empty">No image profile.</p>
        ) : (
          <Table head={['Profile', 't2i', 'i2i', 'Runs on', 'Enhancer blockers']}>
            {profiles.map((p) => (
              <Switches key={`${p.id}-${p.revision}`} profile={p} />
            ))}
          </Table>
        )}
      </Section>
      <LastPreview preview={view.preview} profiles={profiles} />
    </div>
  );
}
