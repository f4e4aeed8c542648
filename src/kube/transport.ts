/**
 * A keep-alive transport for the typed client-node APIs.
 *
 * client-node 1.4 builds a new `https.Agent` for every request (`KubeConfig.applySecurityAuthentication`
 * → `createAgent`), so every API call opens a TCP connection and does a full TLS handshake: ~12 ms of
 * client CPU per GET here, against ~1 ms over a kept-alive connection (docs/performance.md).
 *
 * What stays exactly as client-node does it: the authentication of every request. `applySecurityAuthentication`
 * of the KubeConfig still runs per request, so the kubeconfig's CA, client certificate and key, skip-verify,
 * TLS server name and the token / exec / auth-provider headers are applied (and files re-read) each time,
 * and a subclass that overrides it (the benchmark's request counter) still sees every request. Only the
 * throwaway agent it built is swapped for a long-lived keep-alive agent with the same TLS options: one
 * agent per distinct set of options (so two identities never share a connection, and a rotated client
 * certificate gets a fresh agent). Requests are then sent with node:http(s) directly, because a request
 * written on a kept-alive connection that the server closed at the same moment must be told apart from
 * one the server may have seen: Node marks the first with `reusedSocket`, and only that case is retried,
 * once per attempt up to {@link STALE_CONNECTION_RETRIES}, on a fresh connection. The server never read
 * such a request, so the retry is safe for every method.
 *
 * Not touched: watches (client-node's `Watch` uses `KubeConfig.applyToFetchOptions` and its own fetch,
 * one long-lived request each), and clusters reached through a proxy (client-node builds a proxy agent;
 * the request then goes through client-node's own fetch library, as before).
 */
import { createHash } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import zlib from 'node:zlib';
import {
  type Configuration,
  createConfiguration,
  IsomorphicFetchHttpLibrary,
  type KubeConfig,
  type RequestContext,
  ResponseContext,
  SelfDecodingBody,
  ServerConfiguration,
  wrapHttpLibrary,
} from '@kubernetes/client-node';

/**
 * An idle kept-alive connection is closed by us after this long. Well under the apiserver's own HTTP/1.1
 * idle timeout (90 s), so that the server closing a connection we are about to reuse stays rare.
 */
export const IDLE_CONNECTION_TIMEOUT_MS = 30_000;
/** Retries of a request that failed on a reused connection before the server read it. */
export const STALE_CONNECTION_RETRIES = 2;
/**
 * Retries of a request the apiserver answered 429 with a Retry-After header, as client-go does (its
 * `maxRetries` is 10): the server rejected it before acting on it (API Priority and Fairness, or a
 * resource whose storage is still initializing, e.g. the first list of a custom resource in a namespace
 * created a moment ago), so the retry is safe for every method.
 */
export const TOO_MANY_REQUESTS_RETRIES = 10;
/** Longest wait honoured from one Retry-After (seconds above it are cut to this), ms. */
export const MAX_RETRY_AFTER_MS = 5_000;
/** Distinct TLS option sets kept (each one agent); beyond it the least recently used agent is dropped. */
const MAX_AGENTS = 8;
/** Errors that mean "the connection was already closed by the peer" when seen on a reused socket. */
const STALE_CODES = new Set(['ECONNRESET', 'EPIPE', 'ECONNABORTED']);

/** The TLS options client-node puts on the agents it builds (`KubeConfig.applySecurityAuthentication`). */
const TLS_OPTION_KEYS = [
  'ca',
  'cert',
  'key',
  'pfx',
  'passphrase',
  'rejectUnauthorized',
  'servername',
] as const;

/** Counters of one transport (tests and benchmarks). */
export interface TransportStats {
  /** Requests sent through a kept-alive agent (retries included). */
  requests: number;
  /** Requests retried because their reused connection had been closed by the server. */
  staleRetries: number;
  /** Requests sent again after a 429 with Retry-After ({@link TOO_MANY_REQUESTS_RETRIES}). */
  throttledRetries: number;
  /** Requests left to client-node's own fetch library (proxied clusters). */
  passthrough: number;
  /** Keep-alive agents created (one per distinct TLS option set seen). */
  agents: number;
  /** Open connections waiting in the agents for their next request (a server's close removes one). */
  idleSockets: number;
}

const STALE = Symbol('staleConnection');

function isStale(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { [STALE]?: boolean })[STALE] === true;
}

/** Fingerprint of an agent's TLS options (buffers hashed), or undefined when it is not a plain agent. */
function agentKey(agent: http.Agent): string | undefined {
  if (agent.constructor !== https.Agent && agent.constructor !== http.Agent) return undefined;
  const opts = (agent as http.Agent & { options?: Record<string, unknown> }).options ?? {};
  const h = createHash('sha256');
  h.update(agent.constructor === https.Agent ? 'https' : 'http');
  for (const k of TLS_OPTION_KEYS) {
    const v = opts[k];
    h.update(`\0${k}=`);
    if (v === undefined || v === null) continue;
    for (const part of Array.isArray(v) ? v : [v]) {
      h.update(Buffer.isBuffer(part) ? part : String(part));
      h.update('\0');
    }
  }
  return h.digest('hex');
}

function keepAliveAgent(template: http.Agent): http.Agent {
  const opts = (template as http.Agent & { options?: Record<string, unknown> }).options ?? {};
  const tls: Record<string, unknown> = {};
  for (const k of TLS_OPTION_KEYS) if (opts[k] !== undefined) tls[k] = opts[k];
  const common = { keepAlive: true, timeout: IDLE_CONNECTION_TIMEOUT_MS };
  return template.constructor === https.Agent
    ? new https.Agent({ ...tls, ...common })
    : new http.Agent(common);
}

/**
 * The wait a 429 response asks for, in ms (Retry-After in whole seconds, capped at
 * {@link MAX_RETRY_AFTER_MS}), or undefined when the response is not a 429 with a usable Retry-After.
 * HTTP dates are not honoured (the apiserver sends seconds).
 */
export function retryAfterMs(res: ResponseContext): number | undefined {
  if (res.httpStatusCode !== 429) return undefined;
  const raw = res.headers['retry-after'] ?? res.headers['Retry-After'];
  if (raw === undefined || !/^\s*\d+\s*$/.test(raw)) return undefined;
  return Math.min(Number(raw) * 1000, MAX_RETRY_AFTER_MS);
}

/** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

function flatHeaders(h: http.IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) {
    if (v !== undefined) out[k] = Array.isArray(v) ? v.join(', ') : v;
  }
  return out;
}

function decode(body: Buffer, encoding: string | undefined): Buffer {
  switch ((encoding ?? '').trim().toLowerCase()) {
    case 'gzip':
    case 'x-gzip':
      return zlib.gunzipSync(body);
    case 'deflate':
      return zlib.inflateSync(body);
    case 'br':
      return zlib.brotliDecompressSync(body);
    default:
      return body;
  }
}

/** One HTTP exchange over `agent`. Rejects with an error marked stale when the reused socket was dead. */
function exchange(
  ctx: RequestContext,
  body: string | undefined,
  agent: http.Agent,
): Promise<ResponseContext> {
  const url = new URL(ctx.getUrl());
  const headers: Record<string, string | number> = { ...ctx.getHeaders() };
  const has = (name: string) => Object.keys(headers).some((k) => k.toLowerCase() === name);
  // Same request shape as client-node's fetch library (node-fetch): compressed responses accepted.
  if (!has('accept-encoding')) headers['Accept-Encoding'] = 'gzip, deflate';
  if (!has('accept')) headers.Accept = '*/*';
  if (body !== undefined) headers['Content-Length'] = Buffer.byteLength(body);
  const request = url.protocol === 'http:' ? http.request : https.request;
  return new Promise<ResponseContext>((resolve, reject) => {
    let responded = false;
    const req = request(
      url,
      { method: ctx.getHttpMethod(), headers, agent, signal: ctx.getSignal() },
      (res) => {
        responded = true;
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('aborted', () => reject(new Error(`response from ${url.host} aborted`)));
        res.on('end', () => {
          let data: Buffer;
          try {
            data = decode(Buffer.concat(chunks), res.headers['content-encoding']);
          } catch (err) {
            reject(err);
            return;
          }
          resolve(
            new ResponseContext(
              res.statusCode ?? 0,
              flatHeaders(res.headers),
              new SelfDecodingBody(Promise.resolve(data)),
            ),
          );
        });
      },
    );
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (!responded && req.reusedSocket && STALE_CODES.has(err.code ?? '')) {
        (err as { [STALE]?: boolean })[STALE] = true;
      }
      reject(err);
    });
    req.end(body);
  });
}

/**
 * Authentication method and HTTP library of the typed API clients (see the module comment). One per
 * KubeConfig; share it between the API clients made from that KubeConfig.
 */
export class KeepAliveTransport {
  private readonly agents = new Map<string, http.Agent>();
  private readonly chosen = new WeakMap<RequestContext, http.Agent>();
  private readonly fallback = new IsomorphicFetchHttpLibrary();
  private readonly counters: Omit<TransportStats, 'idleSockets'> = {
    requests: 0,
    staleRetries: 0,
    throttledRetries: 0,
    passthrough: 0,
    agents: 0,
  };

  /**
   * `requestTimeoutMs`: bound of one API call, retries included (aborted with a TimeoutError after it);
   * unset = none (the caller's own signal, e.g. an activity's cancellation, is the only bound).
   */
  constructor(
    private readonly kc: KubeConfig,
    private readonly opts: { requestTimeoutMs?: number } = {},
  ) {}

  /** The name client-node's auth-method interface asks for. */
  getName(): string {
    return 'default';
  }

  /**
   * Applies the KubeConfig's authentication to the request (client-node's own code), then swaps the
   * agent it built for the kept-alive agent with the same TLS options.
   */
  async applySecurityAuthentication(ctx: RequestContext): Promise<void> {
    await this.kc.applySecurityAuthentication(ctx);
    const built = ctx.getAgent();
    const key = built ? agentKey(built) : undefined;
    if (!built || key === undefined) return;
    let agent = this.agents.get(key);
    if (agent) {
      this.agents.delete(key); // re-inserted below: the map's order is least recently used first
    } else {
      agent = keepAliveAgent(built);
      this.counters.agents++;
      if (this.agents.size >= MAX_AGENTS) {
        // Not destroyed: requests may still be using it; its idle connections close on their own.
        const oldest = this.agents.keys().next().value;
        if (oldest !== undefined) this.agents.delete(oldest);
      }
    }
    this.agents.set(key, agent);
    ctx.setAgent(agent);
    this.chosen.set(ctx, agent);
  }

  /**
   * Sends the request (client-node's PromiseHttpLibrary interface). A 429 with Retry-After is sent again
   * after the wait it asks for, up to {@link TOO_MANY_REQUESTS_RETRIES} times; the last answer is returned
   * as is. Rejects with the transport error, or the abort reason of the request's signal.
   */
  async send(ctx: RequestContext): Promise<ResponseContext> {
    if (this.opts.requestTimeoutMs) {
      const own = ctx.getSignal();
      const timeout = AbortSignal.timeout(this.opts.requestTimeoutMs);
      ctx.setSignal(own ? AbortSignal.any([own, timeout]) : timeout);
    }
    for (let throttled = 0; ; throttled++) {
      const res = await this.sendOnce(ctx);
      const wait = retryAfterMs(res);
      if (wait === undefined || throttled >= TOO_MANY_REQUESTS_RETRIES) return res;
      await res.body.binary(); // drain the 429's body before the request is sent again
      this.counters.throttledRetries++;
      await pause(wait, ctx.getSignal());
    }
  }

  private async sendOnce(ctx: RequestContext): Promise<ResponseContext> {
    const agent = this.chosen.get(ctx);
    const body = ctx.getBody();
    if (!agent || (body !== undefined && typeof body !== 'string')) {
      this.counters.passthrough++;
      return this.fallback.send(ctx).toPromise();
    }
    for (let attempt = 0; ; attempt++) {
      this.counters.requests++;
      try {
        return await exchange(ctx, body, agent);
      } catch (err) {
        if (attempt < STALE_CONNECTION_RETRIES && isStale(err)) {
          this.counters.staleRetries++;
          continue;
        }
        throw err;
      }
    }
  }

  /** A client-node Configuration whose requests go through this transport. */
  configuration(): Configuration {
    const cluster = this.kc.getCurrentCluster();
    if (!cluster) throw new Error('No active cluster!');
    return createConfiguration({
      baseServer: new ServerConfiguration(cluster.server, {}),
      authMethods: { default: this },
      httpApi: wrapHttpLibrary(this),
    });
  }

  /** Like `KubeConfig.makeApiClient`, with this transport. */
  makeApiClient<T>(apiClientType: new (config: Configuration) => T): T {
    return new apiClientType(this.configuration());
  }

  /** A copy of the counters, with the agents' idle connections counted now. */
  stats(): TransportStats {
    let idleSockets = 0;
    for (const agent of this.agents.values()) {
      for (const free of Object.values(agent.freeSockets)) idleSockets += free?.length ?? 0;
    }
    return { ...this.counters, idleSockets };
  }
}
