// Profiles: the list with category, revision, publication, whether it can run and why not (the one
// the address names after the page, #/profiles/<name>, marked and scrolled to); a form per category
// drawn from the API's own schemas; publish and unpublish (one image profile at a time, reachable
// as `service-image`); delete. A save against a stale revision shows the newer values beside the
// operator's and lets them choose.
import { useEffect, useState } from 'preact/hooks';
import { ApiError, api, message } from '../api.js';
import { notify, status } from '../state.js';
import type { Category, ProfileView } from '../types.js';
import { Alert, ActionButton, Badge, Section, Table, addressTarget, attempt } from '../ui.js';
import { htmlPattern } from '../pattern.js';
import { SchemaFields, type JsonSchema, type Values } from './schemaForm.js';

interface Schemas {
  name: JsonSchema;
  categories: Record<Category, JsonSchema>;
  image_alias: string;
}

const CATEGORIES: Category[] = ['chat', 'image', 'tts', 'stt'];

interface Draft {
  id: string | null;
  revision: number | null;
  name: string;
  category: Category;
  params: Values;
  /** Kept as it was read and sent back unchanged: the prompt enhancers are chosen elsewhere. */
  prompt_enhancer?: unknown;
}

interface Conflict {
  theirs: ProfileView;
}

function draftOf(profile: ProfileView): Draft {
  const enhancer = (profile as { prompt_enhancer?: unknown }).prompt_enhancer;
  return {
    id: profile.id,
    revision: profile.revision,
    name: profile.name,
    category: profile.category,
    params: structuredClone(profile.params) as Values,
    ...(enhancer === undefined ? {} : { prompt_enhancer: structuredClone(enhancer) }),
  };
}

function ProfileForm(props: { schemas: Schemas; draft: Draft; onDone: (saved: ProfileView | null) => void }) {
  const [draft, setDraft] = useState<Draft>(props.draft);
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [conflict, setConflict] = useState<Conflict | null>(null);
  const [busy, setBusy] = useState(false);
  const editing = draft.id !== null;
  const schema = props.schemas.categories[draft.category];

  async function save(revision: number | null) {
    setBusy(true);
    setErrors({});
    try {
      const body = { name: draft.name, category: draft.category, params: draft.params, ...(draft.prompt_enhancer === undefined ? {} : { prompt_enhancer: draft.prompt_enhancer }) };
      const saved = editing
        ? await api<ProfileView>('PUT', `/api/v1/profiles/${encodeURIComponent(draft.id!)}`, { ...body, revision })
        : await api<ProfileView>('POST', '/api/v1/profiles', body);
      notify('info', `Saved ${saved.name} (revision ${saved.revision}).`);
      props.onDone(saved);
    } catch (error) {
      if (error instanceof ApiError && error.code === 'stale_revision' && draft.id) {
        const theirs = await api<ProfileView>('GET', `/api/v1/profiles/${encodeURIComponent(draft.id)}`).catch(() => null);
        if (theirs) setConflict({ theirs });
      } else if (error instanceof ApiError && error.param) {
        setErrors({ [error.param]: error.message });
      } else {
        setErrors({ form: message(error) });
      }
    } finally {
      setBusy(false);
    }
  }

  return (
    <form
      class="profile-form"
      aria-label={editing ? `Edit profile ${props.draft.name}` : 'New profile'}
      onSubmit={(event) => {
        event.preventDefault();
        void save(draft.revision);
      }}
    >
      <div class="field">
        <label for="profile-category">Category</label>
        <select id="profile-category" disabled={editing} value={draft.category} onChange={(e) => setDraft({ ...draft, category: e.currentTarget.value as Category, params: {} })}>
          {CATEGORIES.map((c) => (
            <option key={c} value={c}>
              {c}
            </option>
          ))}
        </select>
        {editing ? <small class="hint">A profile keeps its category.</small> : null}
      </div>
      <div class="field">
        <label for="profile-name">Name (the API's model name)</label>
        <input id="profile-name" required value={draft.name} pattern={htmlPattern(props.schemas.name.pattern)} onInput={(e) => setDraft({ ...draft, name: e.currentTarget.value })} />
        <small class="hint">Letters, digits and . _ : / -; not “{props.schemas.image_alias}”.</small>
        {errors.name ? (
          <small class="error" role="alert">
            {errors.name}
          </small>
        ) : null}
      </div>
      <SchemaFields schema={schema} values={draft.params} errors={errors} path="params" onChange={(params) => setDraft({ ...draft, params })} />
      <Alert text={errors.form ?? null} />
      {conflict ? (
        <div class="conflict" role="alert">
          <p>
            Someone saved revision {conflict.theirs.revision} while you edited revision {draft.revision}. Their values:
          </p>
          <pre>{JSON.stringify({ name: conflict.theirs.name, params: conflict.theirs.params }, null, 2)}</pre>
          <button
            type="button"
            class="btn"
            onClick={() => {
              setDraft(draftOf(conflict.theirs));
              setConflict(null);
            }}
          >
            Take theirs
          </button>
          <button
            type="button"
            class="btn danger"
            onClick={() => {
              const revision = conflict.theirs.revision;
              setDraft({ ...draft, revision });
              setConflict(null);
              void save(revision);
            }}
          >
            Overwrite with mine
          </button>
        </div>
      ) : null}
      <div class="form-actions">
        <button class="btn primary" type="submit" disabled={busy}>
          {editing ? 'Save' : 'Create'}
        </button>
        <button class="btn" type="button" onClick={() => props.onDone(null)}>
          Cancel
        </button>
      </div>
    </form>
  );
}

export function Profiles() {
  const [schemas, setSchemas] = useState<Schemas | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [editing, setEditing] = useState<Draft | null>(null);
  useEffect(() => {
    api<Schemas>('GET', '/api/v1/profile-schemas').then(setSchemas, (error: unknown) => setLoadError(message(error)));
  }, []);
  const profiles = status.value?.profiles ?? [];
  const image = profiles.find((p) => p.category === 'image' && p.published);
  // #/profiles/<name> (the Models page links a profile it made so): that row is marked and shown.
  const target = addressTarget();
  const shown = profiles.some((p) => p.name === target);
  useEffect(() => {
    if (shown) document.querySelector('tr.target')?.scrollIntoView({ block: 'center' });
  }, [target, shown, schemas !== null]);
  if (loadError) return <p class="error">The profile schemas could not be read: {loadError}</p>;
  if (!schemas) return <p class="loading">Loading…</p>;
  return (
    <div class="grid">
      <Section
        title="Profiles"
        id="profiles-list"
        actions={
          <button type="button" class="btn primary" onClick={() => setEditing({ id: null, revision: null, name: '', category: 'chat', params: {} })}>
            New profile
          </button>
        }
      >
        <p class="hint">
          The image alias <code>{schemas.image_alias}</code> {image ? <>answers with {image.name}.</> : <>has no published image profile.</>} Only one image profile is published at a time.
        </p>
        {profiles.length === 0 ? (
          <p class="empty">No profile yet.</p>
        ) : (
          <Table head={['Name', 'Category', 'Revision', 'Published', 'Can run', 'Actions']}>
                {profiles.map((p) => (
                  <tr key={p.id} data-profile={p.name} class={p.name === target ? 'target' : undefined} aria-current={p.name === target ? 'true' : undefined}>
                    <th scope="row">{p.name}</th>
                    <td>{p.category}</td>
                    <td>{p.revision}</td>
                    <td>{p.published ? <Badge tone="ok">published</Badge> : <Badge tone="idle">not published</Badge>}</td>
                    <td>
                      {p.executable ? <Badge tone="ok">yes</Badge> : <Badge tone="bad">no</Badge>}
                      {p.blockers.length > 0 ? (
                        <ul class="plain blockers">
                          {p.blockers.map((b) => (
                            <li key={b}>{b}</li>
                          ))}
                        </ul>
                      ) : null}
                    </td>
                    <td>
                      <div class="row-actions">
                      <ActionButton
                        label={`${p.published ? 'Unpublish' : 'Publish'} ${p.name}`}
                        onClick={() => attempt(p.published ? 'Unpublish' : 'Publish', () => api('POST', '/api/v1/endpoint/profile', { id: p.id, enabled: !p.published }))}
                      >
                        {p.published ? 'Unpublish' : 'Publish'}
                      </ActionButton>
                      <button type="button" class="btn" aria-label={`Edit ${p.name}`} onClick={() => setEditing(draftOf(p))}>
                        Edit
                      </button>
                      <ActionButton
                        kind="danger"
                        label={`Delete ${p.name}`}
                        onClick={async () => {
                          if (!window.confirm(`Delete the profile ${p.name}?`)) return;
                          await attempt('Delete', () => api('DELETE', `/api/v1/profiles/${encodeURIComponent(p.id)}`));
                        }}
                      >
                        Delete
                      </ActionButton>
                      </div>
                    </td>
                  </tr>
                ))}
              </Table>
        )}
      </Section>
      {editing ? (
        <Section title={editing.id ? `Edit ${editing.name}` : 'New profile'}>
          <ProfileForm key={`${editing.id ?? 'new'}-${editing.revision ?? 0}`} schemas={schemas} draft={editing} onDone={() => setEditing(null)} />
        </Section>
      ) : null}
    </div>
  );
}
