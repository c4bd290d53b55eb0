// The chat test (spec 4.7): through the admin API only, the same scheduler and worker as the API,
// no publication needed. The conversation lives only in this page's memory (a module signal: gone
// at reload or logout); the server holds only the current job. Tokens appear as the event stream
// brings them; cancel, unload, timings and usage are shown. A test goes through either door of
// the chat worker: chat completions, or OpenAI's Responses API.
import { signal } from '@preact/signals';
import { useEffect, useRef, useState } from 'preact/hooks';
import { api } from '../api.js';
import { chatTest, notify, session, status } from '../state.js';
import type { ChatTestJob } from '../types.js';
import { ActionButton, Facts, ProfileSelect, Section, attempt, duration, useProfiles } from '../ui.js';

interface Message {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

const history = signal<Message[]>([]);
/** The last test this page started (its failure stays shown until the next one). */
const lastJob = signal<string | null>(null);
/** The test this page started and the question it asked: it joins the history once answered. */
const pending = signal<{ jobId: string; question: Message } | null>(null);
session.subscribe((state) => {
  if (state !== 'in') {
    history.value = [];
    pending.value = null;
  }
});

const ENDED = new Set(['done', 'cancelled', 'failed']);

/** The doors a test may take, as the admin API names them. */
const APIS: Array<[ChatTestJob['api'], string]> = [
  ['chat_completions', 'Chat completions (/v1/chat/completions)'],
  ['responses', 'Responses API (/v1/responses)'],
];

function Measurements({ job }: { job: ChatTestJob }) {
  const { prefill, generation } = job.timings;
  return (
    <Facts
      items={[
        ['API', APIS.find(([value]) => value === job.api)?.[1] ?? job.api],
        ['Phase', job.phase + (job.position !== null ? ` (position ${job.position})` : '')],
        ['Prefill', prefill ? `${prefill.tokens} tokens in ${duration(prefill.ms)} (${prefill.tokens_per_second} tokens/s)` : '—'],
        ['Generation', generation ? `${generation.tokens} tokens in ${duration(generation.ms)} (${generation.tokens_per_second} tokens/s)` : '—'],
        ['Usage', job.usage ? `${job.usage.prompt_tokens} prompt + ${job.usage.completion_tokens} completion = ${job.usage.total_tokens} tokens${job.usage.cached_tokens ? ` (${job.usage.cached_tokens} cached)` : ''}` : '—'],
        ['Finish', job.finish_reason ?? '—'],
      ]}
    />
  );
}

export function ChatTest() {
  const { profiles, profileId, setProfileId } = useProfiles('chat');
  const [text, setText] = useState('');
  const [system, setSystem] = useState('');
  const [maxTokens, setMaxTokens] = useState(256);
  const [door, setDoor] = useState<ChatTestJob['api']>('chat_completions');
  // The Responses door is an extension beyond the specification: chosen only while it is on.
  const responsesOn = status.value?.extensions.responses === true;
  useEffect(() => {
    if (!responsesOn && door === 'responses') setDoor('chat_completions');
  }, [responsesOn, door]);
  const job = chatTest.value;
  const ours = job && job.id === pending.value?.jobId ? job : null;
  const running = job !== null && !ENDED.has(job.phase);
  const answerRef = useRef<HTMLDivElement>(null);

  // A test that ended joins the conversation once: the question with its answer (a cancelled
  // answer as far as it came). A failed test, or one cancelled before any token, leaves the
  // conversation as it was and gives the question back to the input, so no two questions follow
  // each other.
  useEffect(() => {
    const asked = pending.value;
    if (!ours || !asked || !ENDED.has(ours.phase)) return;
    pending.value = null;
    if (ours.phase === 'done' || (ours.phase === 'cancelled' && ours.answer)) {
      history.value = [...history.value, asked.question, { role: 'assistant', content: ours.answer }];
    } else {
      setText((current) => current || asked.question.content);
    }
  }, [ours?.phase]);

  useEffect(() => {
    answerRef.current?.scrollIntoView({ block: 'nearest' });
  }, [ours?.answer.length]);

  async function send() {
    const content = text.trim();
    if (!content || !profileId) return;
    const messages: Message[] = [...(system.trim() ? [{ role: 'system' as const, content: system.trim() }] : []), ...history.value, { role: 'user', content }];
    const started = await attempt('Chat test', () => api<{ job: ChatTestJob }>('POST', '/api/v1/chat-tests/start', { profile_id: profileId, messages, max_tokens: maxTokens, api: door }));
    if (!started) return;
    pending.value = { jobId: started.job.id, question: { role: 'user', content } };
    lastJob.value = started.job.id;
    // The event stream may already have brought a later state of this job.
    if (chatTest.value?.id !== started.job.id) chatTest.value = started.job;
    setText('');
  }

  return (
    <div class="grid two">
      <Section
        title="Conversation"
        actions={
          <button type="button" class="btn" disabled={history.value.length === 0 || running} onClick={() => (history.value = [])}>
            Clear conversation
          </button>
        }
      >
        <p class="hint">Kept only in this page: a reload or logout forgets it. The service keeps only the current test job in RAM.</p>
        <ol class="chat" aria-label="Conversation" aria-live="polite">
          {history.value.map((m, i) => (
            <li key={i} class={`msg ${m.role}`}>
              <span class="role">{m.role}</span>
              <div class="content">{m.content}</div>
            </li>
          ))}
          {ours && pending.value ? (
            <li class="msg user pending">
              <span class="role">user</span>
              <div class="content">{pending.value.question.content}</div>
            </li>
          ) : null}
          {ours && !ENDED.has(ours.phase) ? (
            <li class="msg assistant streaming">
              <span class="role">assistant</span>
              <div class="content" ref={answerRef} data-testid="streaming-answer">
                {ours.answer || (ours.phase === 'waiting' ? `waiting in the queue${ours.position !== null ? ` (position ${ours.position})` : ''}…` : `${ours.phase}…`)}
              </div>
            </li>
          ) : null}
          {job && job.id === lastJob.value && (job.phase === 'failed' || (job.phase === 'cancelled' && !job.answer)) ? (
            <li class="msg error" role="alert">
              {job.phase === 'cancelled' ? 'Cancelled before the first token.' : `Failed: ${job.error?.message ?? 'unknown'} (${job.error?.code ?? 'no code'})`}
            </li>
          ) : null}
        </ol>
        <form
          class="chat-input"
          onSubmit={(event) => {
            event.preventDefault();
            void send();
          }}
        >
          <label for="chat-message">Message</label>
          <textarea
            id="chat-message"
            rows={3}
            value={text}
            onInput={(e) => setText(e.currentTarget.value)}
            onKeyDown={(e) => {
              if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
                e.preventDefault();
                void send();
              }
            }}
          />
          <div class="form-actions">
            <button class="btn primary" type="submit" disabled={running || !profileId || !text.trim()}>
              Send
            </button>
            <ActionButton disabled={!running} onClick={() => attempt('Cancel', () => api('POST', '/api/v1/chat-tests/cancel', {}))}>
              Cancel
            </ActionButton>
            <span class="hint">Ctrl+Enter sends.</span>
          </div>
        </form>
      </Section>
      <Section title="Settings and measurements">
        <ProfileSelect id="chat-profile" label="Chat profile" profiles={profiles} value={profileId} onChange={setProfileId} />
        <div class="field">
          <label for="chat-system">System message (optional)</label>
          <textarea id="chat-system" rows={2} value={system} onInput={(e) => setSystem(e.currentTarget.value)} />
        </div>
        <div class="field">
          <label for="chat-api">API</label>
          <select id="chat-api" value={door} onChange={(e) => setDoor(e.currentTarget.value as ChatTestJob['api'])}>
            {APIS.map(([value, label]) => (
              <option key={value} value={value} disabled={value === 'responses' && !responsesOn}>
                {value === 'responses' && !responsesOn ? `${label}: off` : label}
              </option>
            ))}
          </select>
          <small class="hint">
            {responsesOn ? (
              'The same worker through either door.'
            ) : (
              <>
                The Responses API goes beyond the specification and is off: the <a href="#/overview">overview's Extensions</a> turn it on.
              </>
            )}
          </small>
        </div>
        <div class="field">
          <label for="chat-max-tokens">Max tokens</label>
          <input id="chat-max-tokens" type="number" min={1} max={4096} value={maxTokens} onInput={(e) => setMaxTokens(Number(e.currentTarget.value))} />
        </div>
        {job ? <Measurements job={job} /> : <p class="empty">No test has run since the service started.</p>}
        <div class="form-actions">
          <ActionButton
            kind="danger"
            onClick={async () => {
              const done = await attempt('Unload', () => api<{ unloaded: boolean }>('POST', '/api/v1/chat-tests/unload', {}));
              if (done) notify('info', done.unloaded ? 'The chat worker is unloaded.' : 'The chat worker is still unloading.');
            }}
          >
            Unload chat worker
          </ActionButton>
          <span class="hint">Refused (409) while requests are active.</span>
        </div>
      </Section>
    </div>
  );
}
