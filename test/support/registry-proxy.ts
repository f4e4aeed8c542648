/**
 * An HTTP proxy in front of the real registry for tests and benchmarks: adds a fixed latency (plus
 * optional uniform jitter) to every request, can play "registry down" by resetting connections, and
 * counts requests (by method; with `log`, each one in order in a shared RequestLog). Bound to 127.0.0.1
 * only. The operator points OCI_REGISTRY at it; the simulator keeps the real registry.
 *
 * `intercept` sees each request on arrival, before the latency and the forwarding, and may park it (return
 * a promise) and then drop it: a way to kill the operator while one of its registry calls is in flight,
 * or to read the world at the exact moment a DELETE arrives.
 */
import { createServer, type IncomingMessage, request, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { RequestLog } from './request-log.js';

export interface RegistryProxyOptions {
  /** Upstream `host:port` (plain HTTP), e.g. 127.0.0.1:5000. */
  upstream: string;
  /** Added latency per request, ms. */
  latencyMs?: number;
  /** Extra uniform random latency in [0, jitterMs), ms. */
  jitterMs?: number;
  /** Port to listen on (0 = any free port). */
  port?: number;
  /** Also record every request here (target `registry`), e.g. beside a KubeApiProxy's records. */
  log?: RequestLog;
}

/** What {@link RegistryProxy.intercept} decides for a request: forward it upstream, or reset its connection. */
export type InterceptVerdict = 'forward' | 'drop';

/** A request as {@link RegistryProxy.intercept} sees it. */
export interface ArrivingRequest {
  /** HTTP method, e.g. `HEAD`, `DELETE`. */
  method: string;
  /** Path without the query string, e.g. `/v2/vk-ns-pod/manifests/hibernate`. */
  path: string;
}

export class RegistryProxy {
  latencyMs: number;
  jitterMs: number;
  /** While true, every request's connection is reset (transport error at the client). */
  down = false;
  /** While true, every request is accepted and never answered (a registry that hangs). */
  hang = false;
  /**
   * Called for every request on arrival (before `down`, the latency and the forwarding). Returning
   * undefined forwards at once; a verdict or a promise of one parks the request until it settles, then
   * forwards it or resets its connection (the client sees a transport error, or nothing if it is gone). A
   * rejected promise counts as `drop`.
   */
  intercept?: (req: ArrivingRequest) => InterceptVerdict | Promise<InterceptVerdict> | undefined;
  /** Requests seen, by method. */
  readonly counts = new Map<string, number>();
  private server?: Server;
  private readonly upstream: { host: string; port: number };

  constructor(private readonly opts: RegistryProxyOptions) {
    const [host, port] = opts.upstream.split(':');
    this.upstream = { host: host!, port: Number(port ?? 80) };
    this.latencyMs = opts.latencyMs ?? 0;
    this.jitterMs = opts.jitterMs ?? 0;
  }

  /** Starts listening; resolves with `127.0.0.1:<port>`, usable as OCI_REGISTRY. */
  async start(): Promise<string> {
    this.server = createServer((req, res) => {
      const verdict = this.intercept?.({
        method: req.method ?? '?',
        path: new URL(req.url ?? '/', 'http://x').pathname,
      });
      if (verdict === undefined) {
        this.handle(req, res);
        return;
      }
      req.pause();
      void Promise.resolve(verdict)
        .catch((): InterceptVerdict => 'drop')
        .then((v) => {
          if (v === 'drop') {
            req.socket.destroy();
            return;
          }
          req.resume();
          this.handle(req, res);
        });
    });
    this.server.keepAliveTimeout = 30_000;
    await new Promise<void>((resolve) => this.server!.listen(this.opts.port ?? 0, '127.0.0.1', resolve));
    return `127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Counts, logs and forwards one request (after the latency), or resets it while `down`. */
  private handle(req: IncomingMessage, res: ServerResponse): void {
    this.counts.set(req.method ?? '?', (this.counts.get(req.method ?? '?') ?? 0) + 1);
    const rec = this.opts.log?.record('registry', req.method ?? '?', req.url ?? '/');
    if (this.down) {
      req.socket.destroy();
      return;
    }
    if (this.hang) return; // the client's timeout or cancellation ends it (or stop())
    const delay = this.latencyMs + (this.jitterMs ? Math.random() * this.jitterMs : 0);
    setTimeout(() => {
      const up = request(
        {
          ...this.upstream,
          method: req.method,
          path: req.url,
          headers: { ...req.headers, host: this.opts.upstream },
        },
        (upRes) => {
          if (rec) rec.status = upRes.statusCode;
          res.writeHead(upRes.statusCode ?? 502, upRes.headers);
          upRes.pipe(res);
        },
      );
      up.on('error', () => res.destroy());
      req.pipe(up);
    }, delay);
  }

  /** Total requests seen. */
  total(): number {
    return [...this.counts.values()].reduce((a, b) => a + b, 0);
  }

  async stop(): Promise<void> {
    const s = this.server;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }
}
