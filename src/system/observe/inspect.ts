// The state-chart inspector switch at the root actor: SERVICE_DECK_INSPECT=off|log|stately.
// `log` writes actor, event and snapshot records through pino (works offline). `stately` relays
// to the Stately inspector through @statelyai/inspect over a WebSocket relay bound to loopback,
// for development only. Both send only sanitized events and contexts: no prompt, audio, image or
// secret leaves the process this way.
import { createWebSocketInspector } from '@statelyai/inspect';
import type { AnyEventObject, InspectionEvent, MachineContext, Observer } from 'xstate';
import { WebSocketServer } from 'ws';
import type { InspectMode } from '../../config.js';
import { ConfigError } from '../../config.js';
import type { Logger } from './log.js';
import { sanitize } from './log.js';

export interface Inspection {
  inspect: Observer<InspectionEvent> | ((event: InspectionEvent) => void) | undefined;
  /** Where a developer points the Stately inspector (stately mode only). */
  url?: string;
  close(): Promise<void>;
}

const sanitizeEvent = (event: AnyEventObject): AnyEventObject => sanitize(event) as AnyEventObject;
const sanitizeContext = (context: MachineContext): MachineContext => sanitize(context) as MachineContext;

function actorName(ref: { id?: string; sessionId?: string; systemId?: string } | undefined): string | undefined {
  return ref?.systemId ?? ref?.id ?? ref?.sessionId;
}

function logInspector(log: Logger): (event: InspectionEvent) => void {
  const inspectLog = log.child({ component: 'inspect' });
  return (event) => {
    switch (event.type) {
      case '@xstate.actor':
        inspectLog.info({ actor: actorName(event.actorRef) }, 'actor');
        break;
      case '@xstate.event':
        inspectLog.info(
          { actor: actorName(event.actorRef), source: actorName(event.sourceRef), event: sanitizeEvent(event.event) },
          `event ${event.event.type}`,
        );
        break;
      case '@xstate.snapshot': {
        const snapshot = event.snapshot as { value?: unknown; context?: MachineContext; status?: string };
        inspectLog.info(
          {
            actor: actorName(event.actorRef),
            state: snapshot.value,
            status: snapshot.status,
            context: snapshot.context ? sanitizeContext(snapshot.context) : undefined,
          },
          'snapshot',
        );
        break;
      }
      default:
        break;
    }
  };
}

/** A loopback-only WebSocket relay: whatever one client sends, every other client receives. */
async function startRelay(port: number): Promise<WebSocketServer> {
  const server = new WebSocketServer({ host: '127.0.0.1', port });
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  server.on('connection', (socket) => {
    socket.on('message', (data, isBinary) => {
      for (const client of server.clients) if (client !== socket && client.readyState === client.OPEN) client.send(data, { binary: isBinary });
    });
  });
  return server;
}

/**
 * The one inspect callback every actor of the service gets: the console's chart feed always, and
 * the chosen inspector as well when SERVICE_DECK_INSPECT is log or stately.
 */
export function inspectBoth(feed: (event: InspectionEvent) => void, inspection: Inspection): (event: InspectionEvent) => void {
  const chosen = inspection.inspect;
  if (!chosen) return feed;
  const forward = typeof chosen === 'function' ? chosen : (event: InspectionEvent) => chosen.next?.(event);
  return (event) => {
    feed(event);
    forward(event);
  };
}

export async function createInspection(mode: InspectMode, options: { log: Logger; port: number; production: boolean }): Promise<Inspection> {
  if (mode === 'off') return { inspect: undefined, close: async () => {} };
  if (mode === 'log') return { inspect: logInspector(options.log), close: async () => {} };
  if (options.production) throw new ConfigError('SERVICE_DECK_INSPECT=stately is for development only (NODE_ENV=production is set)');
  const relay = await startRelay(options.port);
  const url = `ws://127.0.0.1:${options.port}`;
  const inspector = createWebSocketInspector({ url, sanitizeEvent, sanitizeContext });
  options.log.warn({ url }, 'state-chart inspector relay listening on loopback (development only)');
  return {
    inspect: inspector.inspect,
    url,
    close: async () => {
      inspector.stop();
      for (const client of relay.clients) client.terminate();
      await new Promise<void>((resolve) => relay.close(() => resolve()));
    },
  };
}
