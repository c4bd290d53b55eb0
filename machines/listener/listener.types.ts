// Events, context and input of the inference listener machine (spec 3.1).

export interface ListenerAddress {
  host: string;
  port: number;
}

export interface PortRange {
  first: number;
  last: number;
}

export interface ListenerInput {
  address: ListenerAddress;
  /** Ports the operator may choose: 1024-65535 natively, narrower in a container installation. */
  portRange: PortRange;
  /** The started/stopped flag remembered in `endpoint.json` from before this start of the service. */
  rememberedRunning: boolean;
  /** How long the service's own end (SIGTERM) lets running answers finish before it closes their connections; an admin stop has no such limit. */
  drainLimitMs: number;
}

/**
 * `port_out_of_range`: a config's port outside the allowed range (refused, nothing saved).
 * `saved_port_out_of_range`: the port saved in `endpoint.json` lies outside the range in force (a
 * narrower `--api-ports` on update, spec 8): it is not used, and the listener stays stopped.
 */
export type ListenerErrorCode = 'endpoint_running' | 'endpoint_stopping' | 'port_out_of_range' | 'saved_port_out_of_range' | 'listen_failed';

export interface ListenerError {
  code: ListenerErrorCode;
  message: string;
}

export type ListenerOutcome = { ok: true } | ({ ok: false } & ListenerError);

export interface ListenerContext {
  address: ListenerAddress;
  portRange: PortRange;
  /** What `endpoint.json` must say; the system writes it whenever this object changes. */
  remembered: ListenerAddress & { running: boolean };
  drainLimitMs: number;
  /** The last failure (a port in use, a saved port outside the range, a worker that would not unload), shown in the status. */
  error: ListenerError | null;
  startWaiters: string[];
  stopWaiters: string[];
  /** A stop that arrived while the listener was still starting. */
  stopAfterStart: boolean;
  /** The service itself is ending (SIGTERM): stop without forgetting that the endpoint was running. */
  shuttingDown: boolean;
}

export type ListenerEvent =
  | { type: 'endpoint.start'; requestId?: string }
  | { type: 'endpoint.stop'; requestId?: string }
  | { type: 'endpoint.config'; requestId?: string; port?: number; host?: string }
  | { type: 'service.shutdown' };

export type ListenerEmitted = { type: 'endpoint.reply'; requestId: string; outcome: ListenerOutcome };
