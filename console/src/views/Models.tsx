// Models (CONTRACT section 10): the model files in the operator's folders with their facts and the
// memory check's forecast; a hub repository's files, with a GGUF's forecast read from its header
// before any download; the pulls into the model folder with their progress, cancel and errors; and
// a profile made from a file in one step, unpublished until it is published on the Profiles page.
// The pulls come with their progress on the live feed; the files are listed again when a pull is
// done.
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, message } from '../api.js';
import { pulls } from '../state.js';
import type { HubFileView, HubFilesView, HubForecastView, ModelFacts, ModelFileView, ModelFilesView, ModelForecast, ProfileView, PullView } from '../types.js';
import { ActionButton, Alert, Badge, Facts, Section, Table, bytes, failureText, useSubmit } from '../ui.js';

/** The forecast's verdict at a glance: every layer placed (or the CPU alone), layers left in RAM, or no start. */
function verdict(forecast: ModelForecast): { tone: 'ok' | 'warn' | 'bad'; text: string } {
  if (!forecast.fits) return { tone: 'bad', text: 'does not fit' };
  if (forecast.reason === null) return { tone: 'ok', text: 'fits' };
  return { tone: 'warn', text: forecast.gpu_layers > 0 ? 'partly on GPU' : 'in RAM' };
}

/** A parameter count as model cards write it: 1.5 B, 494 M. */
function parameters(count: number): string {
  if (count >= 1e9) return `${(count / 1e9).toFixed(1)} B`;
  if (count >= 1e6) return `${Math.round(count / 1e6)} M`;
  return `${Math.max(1, Math.round(count / 1e3))} K`;
}

/** What the header says, in one line: architecture, parameters, quantization, trained context, template. */
function factsText(facts: ModelFacts | null): string {
  if (!facts) return '—';
  const parts = [
    facts.architecture ?? 'architecture unknown',
    facts.parameters === null ? null : `${parameters(facts.parameters)} parameters`,
    facts.quantization,
    facts.context_length === null ? null : `context ${facts.context_length}`,
    facts.chat_template ? 'chat template' : null,
  ];
  return parts.filter((part) => part !== null).join(' · ');
}

/** The forecast's marker and sentence; the reason there is none. */
function ForecastText(props: { forecast: ModelForecast | null; error: string | null }) {
  if (props.forecast) {
    const { tone, text } = verdict(props.forecast);
    return (
      <span class="forecast">
        <Badge tone={tone}>{text}</Badge> {props.forecast.summary}
      </span>
    );
  }
  return props.error ? <span class="error">{props.error}</span> : <span class="hint">no chat forecast</span>;
}

/** A profile name proposed from the file's name: its base name without the extension (and a split model's part number), in the names' letters. */
function suggestedName(file: string): string {
  const base = file
    .slice(file.lastIndexOf('/') + 1)
    .replace(/\.(gguf|bin)$/i, '')
    .replace(/-\d{5}-of-\d{5}$/, '');
  return base.replace(/[^A-Za-z0-9._:-]+/g, '-').replace(/^-+|-+$/g, '');
}

/** The file a profile is to be made from: its path, and the context its forecast was made for. */
interface Source {
  path: string;
  context: number | null;
  gguf: boolean;
}

/** A file that makes a profile: a GGUF or whisper model whose header was read without an error (the service refuses the others). */
const profileable = (file: ModelFileView) => file.format !== 'unknown' && file.error === null;

function sourceOf(file: ModelFileView): Source {
  return { path: file.path, context: file.forecast?.context ?? null, gguf: file.format === 'gguf' };
}

function CreateProfile(props: { source: Source; onClose: () => void }) {
  const { source } = props;
  const [name, setName] = useState(suggestedName(source.path));
  const [context, setContext] = useState(source.context === null ? '' : String(source.context));
  const [created, setCreated] = useState<ProfileView | null>(null);
  const submit = useSubmit();
  const nameField = useRef<HTMLInputElement>(null);
  useEffect(() => nameField.current?.focus(), [source.path]);
  return (
    <Section title="Create a profile" id="model-profile">
      <form
        aria-label="Create a profile from a model file"
        onSubmit={(event) => {
          event.preventDefault();
          void submit.run(async () => {
            const body = { path: source.path, name: name.trim(), ...(source.gguf && context.trim() !== '' ? { context: Number(context) } : {}) };
            setCreated(await api<ProfileView>('POST', '/api/v1/model-files/profile', body));
          });
        }}
      >
        <p>
          From <code>{source.path}</code>
        </p>
        <div class="field">
          <label for="model-profile-name">Profile name (the API's model name)</label>
          <input id="model-profile-name" ref={nameField} required value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </div>
        {source.gguf ? (
          <div class="field">
            <label for="model-profile-context">Context (tokens)</label>
            <input id="model-profile-context" type="number" min={1} step={1} value={context} onInput={(e) => setContext(e.currentTarget.value)} />
            <small class="hint">
              {source.context === null ? '' : `The forecast was made for ${source.context} tokens. `}Empty: the service chooses the largest context that keeps every layer on the GPUs.
            </small>
          </div>
        ) : null}
        <Alert text={submit.error} />
        {created ? (
          <p role="status" data-testid="created-profile">
            Created the {created.category} profile <a href={`#/profiles/${encodeURIComponent(created.name)}`}>{created.name}</a>. It is not published: clients cannot use it until
            it is published on the Profiles page.
          </p>
        ) : null}
        <div class="form-actions">
          <button class="btn primary" type="submit" disabled={submit.busy || created !== null}>
            Create
          </button>
          <button class="btn" type="button" onClick={props.onClose}>
            {created ? 'Close' : 'Cancel'}
          </button>
        </div>
      </form>
    </Section>
  );
}

function LocalFiles(props: { view: ModelFilesView | null; error: string | null; onRefresh: () => void; onCreate: (source: Source) => void }) {
  const { view } = props;
  return (
    <Section
      title="Model files"
      id="model-files"
      actions={
        <button type="button" class="btn" onClick={props.onRefresh}>
          Look again
        </button>
      }
    >
      <p class="hint">Every model file in the model folders, with what the memory check forecasts for a chat worker of it on this machine now.</p>
      <Alert text={props.error} />
      {view && view.problems.length > 0 ? (
        <ul class="plain problems" role="alert" aria-label="Problems of the model folders">
          {view.problems.map((problem) => (
            <li key={problem}>{problem}</li>
          ))}
        </ul>
      ) : null}
      {!view ? (
        props.error ? null : <p class="loading">Reading the model folders…</p>
      ) : view.files.length === 0 ? (
        <p class="empty">No model file in the model folders: pull one from the hub below.</p>
      ) : (
        <Table head={['File', 'Size', 'Format', 'Facts', 'Forecast', 'Actions']} label="Model files">
          {view.files.map((file) => (
            <tr key={file.path} data-file={file.path}>
              <th scope="row">
                <code>{file.path}</code>
              </th>
              <td>{bytes(file.bytes)}</td>
              <td>{file.format}</td>
              <td>{factsText(file.facts)}</td>
              <td>
                <ForecastText forecast={file.forecast} error={file.error} />
              </td>
              <td>
                {profileable(file) ? (
                  <button type="button" class="btn" aria-label={`Create a profile from ${file.path}`} onClick={() => props.onCreate(sourceOf(file))}>
                    Create profile
                  </button>
                ) : null}
              </td>
            </tr>
          ))}
        </Table>
      )}
    </Section>
  );
}

/** A hub file's forecast: being asked, the answer, or why there is none. */
type Asked = { view: HubForecastView } | { error: string };

function HubFileRows(props: { file: HubFileView; asked: Asked | undefined; onForecast: () => Promise<void>; onPull: () => Promise<void> }) {
  const { file, asked } = props;
  return (
    <>
      <tr data-hub-file={file.path}>
        <th scope="row">
          <code>{file.path}</code>
        </th>
        <td>{bytes(file.bytes)}</td>
        <td>{file.format}</td>
        <td>
          <div class="row-actions">
            {file.format === 'gguf' ? (
              <ActionButton label={`Forecast ${file.path}`} onClick={props.onForecast}>
                Forecast
              </ActionButton>
            ) : null}
            {file.format === 'unknown' ? null : (
              <ActionButton kind="primary" label={`Pull ${file.path}`} onClick={props.onPull}>
                Pull
              </ActionButton>
            )}
          </div>
        </td>
      </tr>
      {asked ? (
        <tr class="detail" data-forecast={file.path}>
          <td colSpan={4}>
            {'error' in asked ? (
              <Alert text={asked.error} />
            ) : (
              <>
                <Facts
                  items={[
                    ['Facts', factsText(asked.view.facts)],
                    ['Forecast', <ForecastText forecast={asked.view.forecast} error={asked.view.error} />],
                  ]}
                />
                <small class="hint">Read from the file's header ({bytes(asked.view.header_bytes)} of {bytes(file.bytes)}): nothing is downloaded until you pull it.</small>
              </>
            )}
          </td>
        </tr>
      ) : null}
    </>
  );
}

function HubBox(props: { onPulled: (pull: PullView) => void }) {
  const [repo, setRepo] = useState('');
  const [revision, setRevision] = useState('main');
  const [listed, setListed] = useState<HubFilesView | null>(null);
  const [forecasts, setForecasts] = useState<Record<string, Asked>>({});
  const [pullError, setPullError] = useState<string | null>(null);
  const listing = useSubmit();
  const forecast = async (file: HubFileView, from: HubFilesView) => {
    const query = new URLSearchParams({ repo: from.repo, revision: from.revision, path: file.path });
    const asked: Asked = await api<HubForecastView>('GET', `/api/v1/model-hub/forecast?${query}`).then(
      (view) => ({ view }),
      (error: unknown) => ({ error: `No forecast for ${file.path}: ${failureText(error)}` }),
    );
    setForecasts((now) => ({ ...now, [file.path]: asked }));
  };
  const pull = async (file: HubFileView, from: HubFilesView) => {
    setPullError(null);
    try {
      props.onPulled(await api<PullView>('POST', '/api/v1/model-pulls', { repo: from.repo, revision: from.revision, path: file.path }));
    } catch (error) {
      setPullError(`Pull of ${file.path}: ${failureText(error)}`);
    }
  };
  return (
    <Section title="From the hub" id="model-hub">
      <form
        class="hub-form"
        aria-label="List a hub repository"
        onSubmit={(event) => {
          event.preventDefault();
          void listing.run(async () => {
            setListed(null);
            setForecasts({});
            setPullError(null);
            const query = new URLSearchParams({ repo: repo.trim(), revision: revision.trim() || 'main' });
            setListed(await api<HubFilesView>('GET', `/api/v1/model-hub/files?${query}`));
          });
        }}
      >
        <div class="field">
          <label for="hub-repo">Repository</label>
          <input id="hub-repo" required placeholder="owner/name" value={repo} onInput={(e) => setRepo(e.currentTarget.value)} />
        </div>
        <div class="field">
          <label for="hub-revision">Revision</label>
          <input id="hub-revision" required value={revision} onInput={(e) => setRevision(e.currentTarget.value)} />
        </div>
        <div class="form-actions">
          <button class="btn primary" type="submit" disabled={listing.busy}>
            List files
          </button>
        </div>
      </form>
      <Alert text={listing.error} testId="hub-error" />
      <Alert text={pullError} testId="pull-error" />
      {listed ? (
        listed.files.length === 0 ? (
          <p class="empty">
            {listed.repo} has no file at {listed.revision}.
          </p>
        ) : (
          <Table head={['File', 'Size', 'Format', 'Actions']} label={`Files of ${listed.repo} at ${listed.revision}`}>
            {listed.files.map((file) => (
              <HubFileRows
                key={file.path}
                file={file}
                asked={forecasts[file.path]}
                onForecast={() => forecast(file, listed)}
                onPull={() => pull(file, listed)}
              />
            ))}
          </Table>
        )
      ) : (
        <p class="hint">A GGUF's forecast reads only its header from the hub, so you see whether it fits before you download it.</p>
      )}
    </Section>
  );
}

const PULL_TONE: Record<PullView['state'], 'ok' | 'warn' | 'bad' | 'idle'> = { downloading: 'warn', done: 'ok', failed: 'bad', cancelled: 'idle' };

/** How far a pull is, in words: waiting for a slot, or percent, bytes and rate. */
function progressText(pull: PullView, percent: number | null): string {
  if (pull.waiting) return 'waiting for a download slot';
  const rate = pull.rate_bytes_per_s === null ? '' : ` · ${bytes(pull.rate_bytes_per_s)}/s`;
  return `${percent === null ? '' : `${percent}% · `}${bytes(pull.bytes_done)} of ${bytes(pull.bytes_total)}${rate}`;
}

function PullItem(props: { pull: PullView; onChanged: (pull: PullView) => void; onCreate: (source: Source) => void }) {
  const { pull } = props;
  const [cancelError, setCancelError] = useState<string | null>(null);
  const percent = pull.bytes_total > 0 ? Math.min(100, Math.floor((pull.bytes_done * 100) / pull.bytes_total)) : null;
  const text = progressText(pull, percent);
  return (
    <li data-pull={pull.id} class="pull">
      <div class="pull-head">
        <span>
          <code>
            {pull.repo}/{pull.path}
          </code>{' '}
          <span class="hint">at {pull.revision}</span>
        </span>
        <Badge tone={PULL_TONE[pull.state]}>{pull.state}</Badge>
      </div>
      {pull.state === 'downloading' ? (
        <>
          <div
            class="bar"
            role="progressbar"
            aria-label={`Pull of ${pull.path}`}
            aria-valuemin={0}
            aria-valuemax={100}
            aria-valuenow={percent ?? undefined}
            aria-valuetext={text}
          >
            <span style={{ width: `${percent ?? 0}%` }} />
          </div>
          <p class="pull-progress">{text}</p>
          <ActionButton
            kind="danger"
            label={`Cancel the pull of ${pull.path}`}
            onClick={async () => {
              setCancelError(null);
              try {
                props.onChanged(await api<PullView>('POST', `/api/v1/model-pulls/${encodeURIComponent(pull.id)}/cancel`, {}));
              } catch (error) {
                setCancelError(`Cancel: ${failureText(error)}`);
              }
            }}
          >
            Cancel
          </ActionButton>
          <Alert text={cancelError} />
        </>
      ) : null}
      {pull.state === 'failed' ? <Alert text={pull.error ?? 'failed'} /> : null}
      {pull.state === 'done' && pull.file ? (
        <div class="pull-done">
          <span>
            {bytes(pull.bytes_done)} in <code>{pull.file}</code>
          </span>
          <button type="button" class="btn" aria-label={`Create a profile from ${pull.file}`} onClick={() => props.onCreate({ path: pull.file!, context: null, gguf: /\.gguf$/i.test(pull.file!) })}>
            Create profile
          </button>
        </div>
      ) : null}
    </li>
  );
}

function Pulls(props: { pulls: readonly PullView[] | null; onChanged: (pull: PullView) => void; onCreate: (source: Source) => void }) {
  return (
    <Section title="Pulls" id="model-pulls">
      {!props.pulls ? (
        <p class="loading">Waiting for the pulls' state…</p>
      ) : props.pulls.length === 0 ? (
        <p class="empty">No pull since the service started. Pull a file from the hub.</p>
      ) : (
        <ul class="plain pulls" aria-label="Pulls, newest first">
          {props.pulls.map((pull) => (
            <PullItem key={pull.id} pull={pull} onChanged={props.onChanged} onCreate={props.onCreate} />
          ))}
        </ul>
      )}
    </Section>
  );
}

/** The model files as the folders hold them now; `reload` walks them again. */
function useModelFiles() {
  const [view, setView] = useState<ModelFilesView | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [round, setRound] = useState(0);
  useEffect(() => {
    const controller = new AbortController();
    api<ModelFilesView>('GET', '/api/v1/model-files', undefined, { signal: controller.signal }).then(
      (answer) => {
        setView(answer);
        setError(null);
      },
      (failure: unknown) => {
        if (!controller.signal.aborted) setError(`The model folders could not be listed: ${message(failure)}`);
      },
    );
    return () => controller.abort();
  }, [round]);
  return { view, error, reload: () => setRound((n) => n + 1) };
}

/**
 * Takes in the answer to a pull or a cancel at once, unless the live feed has already brought a
 * later state of that pull.
 */
function put(pull: PullView): void {
  const now = pulls.value ?? [];
  const known = now.find((p) => p.id === pull.id);
  if (known && known.updated_at > pull.updated_at) return;
  pulls.value = [pull, ...now.filter((p) => p.id !== pull.id)].sort((a, b) => b.created_at.localeCompare(a.created_at));
}

export function Models() {
  const files = useModelFiles();
  const list = pulls.value;
  const [creating, setCreating] = useState<Source | null>(null);
  // A pull seen downloading and now done: its file is in the folder, so the folders are listed again.
  const downloading = useRef(new Set<string>());
  useEffect(() => {
    let finished = false;
    for (const pull of list ?? []) {
      if (pull.state === 'downloading') downloading.current.add(pull.id);
      else if (downloading.current.delete(pull.id) && pull.state === 'done') finished = true;
    }
    if (finished) files.reload();
  }, [list]);
  // A pulled file's context comes from its forecast, once the folders were listed again.
  const create = (source: Source) => {
    const listed = files.view?.files.find((file) => file.path === source.path);
    setCreating(listed ? sourceOf(listed) : source);
  };
  return (
    <div class="grid two models">
      <LocalFiles view={files.view} error={files.error} onRefresh={files.reload} onCreate={create} />
      {creating ? <CreateProfile key={creating.path} source={creating} onClose={() => setCreating(null)} /> : null}
      <HubBox onPulled={put} />
      <Pulls pulls={list} onChanged={put} onCreate={create} />
    </div>
  );
}
