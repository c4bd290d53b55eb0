// The inference listener's recent answers, live from the event stream (`request` events; the service
// keeps the last 200 in RAM): newest first, each with its route, profile, status, duration and, for
// a chat answer, its queue wait, time to first token, token counts and speed. The service never
// sends a prompt or an answer here, and the page shows none.
import { requests } from '../state.js';
import type { RecentRequestView } from '../types.js';
import { Badge, Section, Table, clock, duration } from '../ui.js';

const tone = (r: RecentRequestView) => (r.status < 400 ? 'ok' : r.status < 500 ? 'warn' : 'bad');
const perSecond = (value: number | null) => (value === null ? '—' : `${value.toFixed(1)}/s`);
const tokens = (r: RecentRequestView) => (r.prompt_tokens === null && r.completion_tokens === null ? '—' : `${r.prompt_tokens ?? '—'} → ${r.completion_tokens ?? '—'}`);

export function Requests() {
  const list = [...requests.value].reverse();
  return (
    <div class="grid">
      <Section title="Recent requests" id="recent-requests">
        <p class="hint">
          The last {list.length} answers of the inference listener, newest first, kept in the service's memory only (at most 200; gone at a restart). Never a prompt or
          an answer: only what was asked of which profile, how it ended and how fast. Tokens per second are the worker's own measure of generation, without load or queue
          time.
        </p>
        {list.length === 0 ? (
          <p class="empty">No request since the service started (or since this page connected).</p>
        ) : (
          <Table label="Recent requests" head={['Time', 'Route', 'Profile', 'Status', 'Duration', 'Queue wait', 'First token', 'Tokens in → out', 'Tokens/s']}>
            {list.map((r) => (
              <tr key={r.seq} data-request={r.id}>
                <td>{clock(r.at)}</td>
                <td>
                  <code>
                    {r.method} {r.route}
                  </code>
                  {r.stream ? <span class="hint"> stream</span> : null}
                </td>
                <td>{r.profile ?? '—'}</td>
                <td>
                  <Badge tone={tone(r)}>{r.status}</Badge>
                  {r.code ? <div class="hint">{r.code}</div> : null}
                </td>
                <td>{duration(r.duration_ms)}</td>
                <td>{duration(r.queue_ms)}</td>
                <td>{duration(r.ttft_ms)}</td>
                <td>{tokens(r)}</td>
                <td>{perSecond(r.tokens_per_second)}</td>
              </tr>
            ))}
          </Table>
        )}
      </Section>
    </div>
  );
}
