// The Host header check of both listeners (a DNS rebinding defence): a page on another site whose
// name an attacker points at 127.0.0.1 reaches the listener from the operator's own browser, but
// its requests carry that site's name as Host. Only names that mean this machine are served: the
// loopback names, the address the connection arrived at (an IP literal involves no DNS), and the
// names the operator configured (SERVICE_DECK_ALLOWED_HOSTS, for a proxy or a name on the LAN).
// Any port is accepted: a port forward may put the listener behind another one.
import type { FastifyReply, FastifyRequest } from 'fastify';
import { errors } from '../errors.js';

export const LOOPBACK_HOSTS = ['localhost', '127.0.0.1', '[::1]'] as const;

/** The name part of a Host header, lower case without a trailing dot; undefined when it is malformed. */
export function hostName(header: string | undefined): string | undefined {
  const match = /^(\[[0-9a-fA-F:.]+\]|[^:[\]]+)(?::\d{1,5})?$/.exec(header?.trim() ?? '');
  return match?.[1]?.toLowerCase().replace(/\.$/, '');
}

/** An address as a Host header names it: IPv6 in brackets, an IPv4-mapped IPv6 address as IPv4. */
function asHost(address: string | undefined): string | undefined {
  if (!address) return undefined;
  const v4 = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (v4) return v4[1];
  return address.includes(':') ? `[${address.toLowerCase()}]` : address;
}

/** An onRequest hook refusing (421) a request whose Host names neither this machine nor a configured name. */
export function hostGuard(allowedHosts: readonly string[]) {
  const allowed = new Set<string>([...LOOPBACK_HOSTS, ...allowedHosts]);
  // The callback form: no promise per request.
  return (request: FastifyRequest, _reply: FastifyReply, done: (error?: Error) => void): void => {
    const name = hostName(request.headers.host);
    if (name !== undefined && (allowed.has(name) || name === asHost(request.socket.localAddress))) {
      done();
      return;
    }
    done(
      errors.misdirected('This listener answers only to its own address, localhost, 127.0.0.1, [::1] and the names in SERVICE_DECK_ALLOWED_HOSTS.'),
    );
  };
}

/** The request came over TLS: said by a proxy in front that the operator trusts (SERVICE_DECK_TRUST_PROXY). */
export function overTls(request: FastifyRequest, trustProxy: boolean): boolean {
  if (!trustProxy) return false;
  const proto = request.headers['x-forwarded-proto'];
  // A chain of proxies lists one protocol each; the first is the client's own.
  const first = (Array.isArray(proto) ? proto[0] : proto)?.split(',')[0]?.trim().toLowerCase();
  return first === 'https';
}
