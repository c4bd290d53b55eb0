// Spec 3.1, the inference listener:
//
// | State              | Trigger                          | Condition                  | Next    |
// | stopped            | POST /api/v1/endpoint/start      | admin session              | running | start is remembered across restarts
// | running            | POST /api/v1/endpoint/stop       | admin session              | stopped | no new requests accepted; waiting requests are discarded; running answers and generations finish; then workers are unloaded
// | stopped            | POST /api/v1/endpoint/config     | only while stopped         | stopped | port saved
// | running or stopped | regular restart of the service   | remembered state is running| running | only the listener starts; no model is loaded
//
// Spec 8, container installation: "another range through the installer option `--api-ports
// <first>-<last>` on update, after which the saved port may need correction". A saved port outside
// the range in force is never used: the restart stays stopped, a start is refused, and the error
// (`saved_port_out_of_range`, in the status) names the port, the range and the fix, until a config
// saves a port within the range.
//
// The admin session is checked by the route before an event reaches this machine. `starting` and
// `stopping` are the spans the table's arrows take: binding the port, and the ordered stop. Replies
// to the routes are emitted as `endpoint.reply` events carrying the request's id.
// An admin stop lets running answers and generations finish, however long they take; only the
// service's own end (SIGTERM/SIGINT, CONTRACT section 1) bounds that drain by `drainLimit`.
import { assertEvent, assign, enqueueActions, setup } from 'xstate';
import { TAGS } from '../ids.js';
import { listenerActors } from './listener.actors.js';
import type { ListenerContext, ListenerEmitted, ListenerError, ListenerEvent, ListenerInput, ListenerOutcome, PortRange } from './listener.types.js';

const inRange = (port: number, range: PortRange) => port >= range.first && port <= range.last;

/**
 * Spec 8: the port saved in `endpoint.json` checked against the range in force, with the fix in
 * words when it lies outside (null when it is within). The `service-deck` command says the same.
 */
export function savedPortProblem(port: number, range: PortRange): ListenerError | null {
  if (inRange(port, range)) return null;
  const ports = `${range.first}-${range.last}`;
  return {
    code: 'saved_port_out_of_range',
    message:
      `the saved port ${port} is outside the allowed ports ${ports}, so the inference listener stays stopped. ` +
      `Fix: save a port from ${range.first} to ${range.last} (POST /api/v1/endpoint/config with {"port": ${range.first}}, or the console's Change port) and start it; ` +
      `or allow port ${port} with a wider --api-ports (service-deck update --api-ports <first>-<last>, or serve --api-ports) and restart the service`,
  };
}

/** A rejection's message for the operator. */
const errorMessage = (error: unknown) => (error instanceof Error ? error.message : 'unknown error');

const reply = (requestId: string, outcome: ListenerOutcome): ListenerEmitted => ({ type: 'endpoint.reply', requestId, outcome });

const OK: ListenerOutcome = { ok: true };

type RefusalCode = Exclude<ListenerError['code'], 'listen_failed'>;

/** Why the listener refuses an event in its present state, in words for the operator. */
function refusal(code: RefusalCode, context: ListenerContext): ListenerOutcome {
  const messages: Record<RefusalCode, string> = {
    port_out_of_range: `port must be within ${context.portRange.first}-${context.portRange.last}`,
    saved_port_out_of_range: savedPortProblem(context.address.port, context.portRange)?.message ?? '',
    endpoint_running: 'the address can only be changed while the endpoint is stopped; stop it first',
    endpoint_stopping: 'the endpoint is stopping; start it again once it has stopped',
  };
  return { ok: false, code, message: messages[code] };
}

export const listenerMachine = setup({
  types: {
    context: {} as ListenerContext,
    events: {} as ListenerEvent,
    input: {} as ListenerInput,
    emitted: {} as ListenerEmitted,
  },
  actors: listenerActors,
  guards: {
    rememberedRunning: ({ context }) => context.remembered.running,
    portInAllowedRange: ({ context, event }) => {
      assertEvent(event, 'endpoint.config');
      return event.port === undefined || inRange(event.port, context.portRange);
    },
    savedPortOutsideRange: ({ context }) => !inRange(context.address.port, context.portRange),
    stopRequestedWhileStarting: ({ context }) => context.stopAfterStart,
    shuttingDown: ({ context }) => context.shuttingDown,
  },
  delays: {
    drainLimit: ({ context }) => context.drainLimitMs,
  },
  actions: {
    addStartWaiter: assign(({ context, event }) => {
      assertEvent(event, 'endpoint.start');
      return { startWaiters: event.requestId ? [...context.startWaiters, event.requestId] : context.startWaiters, error: null };
    }),
    addStopWaiter: assign(({ context, event }) => {
      assertEvent(event, 'endpoint.stop');
      return { stopWaiters: event.requestId ? [...context.stopWaiters, event.requestId] : context.stopWaiters };
    }),
    deferStop: assign({ stopAfterStart: true }),
    markShuttingDown: assign({ shuttingDown: true }),
    rememberRunning: assign({ remembered: ({ context }) => ({ ...context.address, running: true }) }),
    rememberStopped: assign({ remembered: ({ context }) => ({ ...context.remembered, running: false }) }),
    saveAddress: assign(({ context, event }) => {
      assertEvent(event, 'endpoint.config');
      const address = { host: event.host ?? context.address.host, port: event.port ?? context.address.port };
      // A saved port outside the range stays the error until a port within it is saved.
      const error = context.error?.code === 'saved_port_out_of_range' ? savedPortProblem(address.port, context.portRange) : context.error;
      return { address, remembered: { ...context.remembered, ...address }, error };
    }),
    assignSavedPortError: assign({ error: ({ context }) => savedPortProblem(context.address.port, context.portRange) }),
    /** `error`: the open's rejection (its event's `error`, passed as a parameter). */
    assignStartError: assign({
      error: ({ context }, params: { error: unknown }) => ({
        code: 'listen_failed' as const,
        message: `cannot listen on ${context.address.host}:${context.address.port}: ${errorMessage(params.error)}`,
      }),
    }),
    /** `error`: the stop step's rejection. */
    assignStopError: assign({
      error: (_, params: { error: unknown }) => ({
        code: 'endpoint_stopping' as const,
        message: `stopping did not finish cleanly: ${errorMessage(params.error)}`,
      }),
    }),
    replyStartWaitersOk: enqueueActions(({ context, enqueue }) => {
      for (const requestId of context.startWaiters) enqueue.emit(reply(requestId, OK));
    }),
    replyStartWaitersFailed: enqueueActions(({ context, enqueue }) => {
      const outcome: ListenerOutcome = context.error ? { ok: false, ...context.error } : OK;
      for (const requestId of context.startWaiters) enqueue.emit(reply(requestId, outcome));
    }),
    replyStopWaitersOk: enqueueActions(({ context, enqueue }) => {
      for (const requestId of context.stopWaiters) enqueue.emit(reply(requestId, OK));
    }),
    clearStartWaiters: assign({ startWaiters: [] }),
    clearStopWaiters: assign({ stopWaiters: [], stopAfterStart: false }),
    replyOk: enqueueActions(({ event, enqueue }) => {
      if ('requestId' in event && event.requestId) enqueue.emit(reply(event.requestId, OK));
    }),
    refuse: enqueueActions(({ context, event, enqueue }, params: { code: RefusalCode }) => {
      if ('requestId' in event && event.requestId) enqueue.emit(reply(event.requestId, refusal(params.code, context)));
    }),
  },
}).createMachine({
  id: 'listener',
  context: ({ input }) => ({
    address: input.address,
    portRange: input.portRange,
    remembered: { ...input.address, running: input.rememberedRunning },
    drainLimitMs: input.drainLimitMs,
    error: null,
    startWaiters: [],
    stopWaiters: [],
    stopAfterStart: false,
    shuttingDown: false,
  }),
  initial: 'restoring',
  states: {
    restoring: {
      description: 'regular restart of the service: the remembered started/stopped flag decides',
      always: [
        {
          guard: 'savedPortOutsideRange',
          target: 'stopped',
          actions: 'assignSavedPortError',
          description:
            'spec 8 | regular restart of the service | the saved port is outside the allowed range (another --api-ports on update) | stopped: the port is not used; the error says how to fix it; the remembered flag stays',
        },
        {
          guard: 'rememberedRunning',
          target: 'starting',
          description: 'running or stopped | regular restart of the service | remembered state is running | running: only the listener starts; no model is loaded',
        },
        { target: 'stopped', description: 'remembered state is stopped: the listener stays stopped' },
      ],
    },
    stopped: {
      on: {
        'endpoint.start': [
          {
            guard: 'savedPortOutsideRange',
            actions: ['assignSavedPortError', { type: 'refuse', params: { code: 'saved_port_out_of_range' } }],
            description: 'spec 8: a saved port outside the allowed range is not used: the start is refused with the fix, the listener stays stopped',
          },
          {
            target: 'starting',
            actions: 'addStartWaiter',
            description: 'stopped | POST /api/v1/endpoint/start | admin session | running: start is remembered across restarts',
          },
        ],
        'endpoint.config': [
          {
            guard: 'portInAllowedRange',
            actions: ['saveAddress', 'replyOk'],
            description: 'stopped | POST /api/v1/endpoint/config with port | only while stopped | stopped: port saved',
          },
          { actions: { type: 'refuse', params: { code: 'port_out_of_range' } }, description: 'a port outside the allowed range is refused' },
        ],
        'endpoint.stop': { actions: 'replyOk', description: 'already stopped: nothing to do' },
        'service.shutdown': { target: 'off', description: 'the service ends while the listener is stopped' },
      },
    },
    starting: {
      invoke: {
        src: 'openListener',
        input: ({ context }) => context.address,
        onDone: [
          {
            guard: 'stopRequestedWhileStarting',
            target: 'stopping',
            actions: ['rememberStopped', 'replyStartWaitersOk', 'clearStartWaiters'],
            description: 'an admin stop arrived while the port was being bound: stop right after, and remember stopped',
          },
          {
            guard: 'shuttingDown',
            target: 'stopping',
            actions: ['rememberRunning', 'replyStartWaitersOk', 'clearStartWaiters'],
            description: 'SIGTERM arrived while the port was being bound: stop, but remember the start',
          },
          {
            target: 'running',
            actions: ['rememberRunning', 'replyStartWaitersOk', 'clearStartWaiters'],
            description: 'the port is bound: the endpoint runs and that is remembered',
          },
        ],
        onError: [
          {
            guard: 'shuttingDown',
            target: 'off',
            actions: [{ type: 'assignStartError', params: ({ event }) => ({ error: event.error }) }, 'replyStartWaitersFailed', 'clearStartWaiters', 'replyStopWaitersOk', 'clearStopWaiters'],
            description: 'the port cannot be bound and the service is ending: nothing to stop',
          },
          {
            target: 'stopped',
            actions: [{ type: 'assignStartError', params: ({ event }) => ({ error: event.error }) }, 'replyStartWaitersFailed', 'clearStartWaiters', 'replyStopWaitersOk', 'clearStopWaiters'],
            description: 'the port cannot be bound: the endpoint stays stopped and says why; a stop sent meanwhile is done',
          },
        ],
      },
      on: {
        'endpoint.start': { actions: 'addStartWaiter' },
        'endpoint.stop': { actions: ['addStopWaiter', 'deferStop'] },
        'endpoint.config': { actions: { type: 'refuse', params: { code: 'endpoint_running' } } },
        'service.shutdown': { actions: 'markShuttingDown' },
      },
    },
    running: {
      tags: [TAGS.accepting],
      on: {
        'endpoint.stop': {
          target: 'stopping',
          actions: ['addStopWaiter', 'rememberStopped'],
          description: 'running | POST /api/v1/endpoint/stop | admin session | stopped: stop is remembered',
        },
        'endpoint.start': { actions: 'replyOk', description: 'already running: nothing to do' },
        'endpoint.config': {
          actions: { type: 'refuse', params: { code: 'endpoint_running' } },
          description: 'config port change while running: not permitted',
        },
        'service.shutdown': {
          target: 'stopping',
          actions: 'markShuttingDown',
          description: 'SIGTERM/SIGINT: stop as on an admin stop, but remember that the endpoint was running',
        },
      },
    },
    stopping: {
      description: 'no new requests accepted; waiting requests are discarded; running answers finish; then workers are unloaded',
      initial: 'discarding',
      states: {
        discarding: {
          invoke: {
            src: 'discardWaiting',
            onDone: { target: 'draining', description: 'waiting requests are discarded' },
            onError: { target: 'draining', actions: { type: 'assignStopError', params: ({ event }) => ({ error: event.error }) } },
          },
        },
        draining: {
          description: 'running answers and generations finish; an admin stop waits for them however long they take (they end by their own limits: 600 s of SSE, the image limit)',
          invoke: {
            src: 'closeListener',
            onDone: { target: 'unloading', description: 'running answers and generations have finished' },
            onError: { target: 'unloading', actions: { type: 'assignStopError', params: ({ event }) => ({ error: event.error }) } },
          },
          initial: 'unbounded',
          states: {
            unbounded: {
              always: { guard: 'shuttingDown', target: 'bounded', description: 'SIGTERM/SIGINT: the drain is bounded' },
              on: {
                'service.shutdown': {
                  target: 'bounded',
                  actions: 'markShuttingDown',
                  description: 'SIGTERM/SIGINT during an admin stop: from now on the drain is bounded',
                },
              },
            },
            bounded: {
              after: {
                drainLimit: {
                  target: '#listener.stopping.forcing',
                  description: 'SIGTERM/SIGINT (CONTRACT section 1): answers still running after the drain limit are ended',
                },
              },
            },
          },
        },
        forcing: {
          invoke: {
            src: 'forceClose',
            onDone: { target: 'unloading' },
            onError: { target: 'unloading', actions: { type: 'assignStopError', params: ({ event }) => ({ error: event.error }) } },
          },
        },
        unloading: {
          invoke: {
            src: 'unloadWorkers',
            onDone: { target: 'done', description: 'own workers received SIGTERM; TTS and STT workers are unloaded' },
            onError: { target: 'done', actions: { type: 'assignStopError', params: ({ event }) => ({ error: event.error }) } },
          },
        },
        done: { type: 'final' },
      },
      onDone: [
        { guard: 'shuttingDown', target: 'off', actions: ['replyStopWaitersOk', 'clearStopWaiters'] },
        { target: 'stopped', actions: ['replyStopWaitersOk', 'clearStopWaiters'] },
      ],
      on: {
        'endpoint.stop': { actions: 'addStopWaiter' },
        'endpoint.start': { actions: { type: 'refuse', params: { code: 'endpoint_stopping' } }, description: 'a start during the stop is refused; start again once stopped' },
        'endpoint.config': { actions: { type: 'refuse', params: { code: 'endpoint_running' } } },
        'service.shutdown': { actions: 'markShuttingDown' },
      },
    },
    off: { type: 'final', description: 'the service has ended' },
  },
});
