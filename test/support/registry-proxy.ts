/**
 * An HTTP proxy in front of the real registry for tests and benchmarks: adds a fixed latency (plus
 * optional uniform jitter) to every request, can play "registry down" by resetting connections, and
 * counts requests (by method; with `log`, each one in order in a shared RequestLog). Bound to 127.0.0.1
 * only. The operator points OCI_REGISTRY at it; the simulator keeps the real registry.
 */
import { createServer, request, type Server } from 'node:http';
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

export class RegistryProxy {
  latencyMs: number;
  jitterMs: number;
  /** While true, every request's connection is reset (transport error at the client). */
  down = false;
  /** While true, every request is accepted and never answered (a registry that hangs). */
  hang = false;
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
    });
    this.server.keepAliveTimeout = 30_000;
    await new Promise<void>((resolve) => this.server!.listen(this.opts.port ?? 0, '127.0.0.1', resolve));
    return `127.0.0.1:${(this.server.address() as AddressInfo).port}`;
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
