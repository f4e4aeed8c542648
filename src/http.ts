/**
 * The process's HTTP endpoints (docs/observability.md#health-and-readiness): a probe listener with `/healthz`
 * and `/readyz` and a metrics listener with `/metrics`, plain HTTP, on separate addresses as in the reference
 * (`:8081`, `:8080`). When both settings name the same address, one listener serves all three paths.
 *
 * Deliberate deviation: `/readyz` is not a constant `ok`. It answers 503 while Temporal is unreachable, the
 * workers are not running, or this process leads but one of its informers is not synced (first list not
 * done yet, or a watch failed and has not been re-established, e.g. during an apiserver restart); a standby
 * (non-leader) with a reachable Temporal reports ready, as in the reference.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import { formatListen, type ListenAddress } from './config.js';
import type { Logger } from './log.js';

/** One named readiness check; resolves to an error text when not ready, undefined when ready. */
export interface ReadyCheck {
  name: string;
  check: () => Promise<string | undefined> | string | undefined;
}

/** Adds text in the Prometheus exposition format to a scrape (e.g. the Temporal SDK's own metrics). */
export type ExtraMetricsSource = () => Promise<string>;

export interface HttpOptions {
  probeAddr: ListenAddress | null;
  metricsAddr: ListenAddress | null;
  registry: Registry;
  readyChecks: ReadyCheck[];
  extraMetrics?: ExtraMetricsSource[];
  log: Logger;
}

/** The started listeners; `addresses` are the bound `host:port` (useful with port 0). */
export interface HttpServers {
  probe: string | undefined;
  metrics: string | undefined;
  close(): Promise<void>;
}

type Handler = (req: IncomingMessage, res: ServerResponse, url: URL) => Promise<void>;

function send(
  res: ServerResponse,
  status: number,
  body: string,
  contentType = 'text/plain; charset=utf-8',
): void {
  res.writeHead(status, { 'Content-Type': contentType, 'X-Content-Type-Options': 'nosniff' });
  res.end(body);
}

/**
 * Runs every readiness check; with `?verbose` lists each as `[+]name ok` / `[-]name failed: reason` like
 * controller-runtime's healthz handler. 200 `ok` when all pass, 503 (Service Unavailable) otherwise.
 */
async function readyz(checks: ReadyCheck[], res: ServerResponse, url: URL, only?: string): Promise<void> {
  const selected = only ? checks.filter((c) => c.name === only) : checks;
  if (only && selected.length === 0) return send(res, 404, 'not found\n');
  const results = await Promise.all(
    selected.map(async (c) => {
      try {
        return { name: c.name, error: await c.check() };
      } catch (err) {
        return { name: c.name, error: (err as Error).message };
      }
    }),
  );
  const failed = results.filter((r) => r.error !== undefined);
  if (url.searchParams.has('verbose') || failed.length > 0) {
    const lines = results.map((r) =>
      r.error === undefined ? `[+]${r.name} ok` : `[-]${r.name} failed: ${r.error}`,
    );
    lines.push(failed.length === 0 ? 'readyz check passed' : 'readyz check failed');
    return send(res, failed.length === 0 ? 200 : 503, `${lines.join('\n')}\n`);
  }
  send(res, 200, 'ok');
}

async function metrics(
  registry: Registry,
  extra: ExtraMetricsSource[],
  res: ServerResponse,
  log: Logger,
): Promise<void> {
  let body = await registry.metrics();
  for (const source of extra) {
    try {
      const text = await source();
      if (text) body += body.endsWith('\n') ? text : `\n${text}`;
    } catch (err) {
      log.debug({ err }, 'extra metrics source failed');
    }
  }
  send(res, 200, body, registry.contentType);
}

/**
 * Listens on `addr`; `setting` names the setting it came from in a listen error (`PROBE_ADDR :8081: listen
 * EADDRINUSE: …`, the Node error's `code` kept).
 */
function listen(addr: ListenAddress, handler: Handler, log: Logger, setting: string): Promise<Server> {
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'method not allowed\n');
    handler(req, res, url).catch((err) => {
      log.error({ err, path: url.pathname }, 'http handler failed');
      if (!res.headersSent) send(res, 500, 'internal error\n');
      else res.end();
    });
  });
  server.keepAliveTimeout = 5_000;
  server.headersTimeout = 10_000;
  return new Promise((resolve, reject) => {
    const failed = (err: NodeJS.ErrnoException) =>
      reject(
        Object.assign(new Error(`${setting} ${formatListen(addr)}: ${err.message}`), { code: err.code }),
      );
    server.once('error', failed);
    server.listen(addr.port, addr.host, () => {
      server.off('error', failed);
      resolve(server);
    });
  });
}

function boundAddress(server: Server): string {
  const a = server.address() as AddressInfo;
  return a.family === 'IPv6' ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`;
}

/**
 * Starts the probe and metrics listeners (either may be disabled with null).
 * @throws the listen error of the first listener that cannot bind, its message prefixed with the setting and
 *   the address (`METRICS_ADDR 127.0.0.1:8080: listen EADDRINUSE: …`), its `code` kept.
 */
export async function startHttp(opts: HttpOptions): Promise<HttpServers> {
  const { log } = opts;
  const probeHandler: Handler = async (_req, res, url) => {
    const p = url.pathname;
    if (p === '/healthz' || p === '/healthz/ping') return send(res, 200, 'ok');
    if (p === '/readyz') return readyz(opts.readyChecks, res, url);
    if (p.startsWith('/readyz/')) return readyz(opts.readyChecks, res, url, p.slice('/readyz/'.length));
    send(res, 404, 'not found\n');
  };
  const metricsHandler: Handler = async (_req, res, url) => {
    if (url.pathname === '/metrics') return metrics(opts.registry, opts.extraMetrics ?? [], res, log);
    send(res, 404, 'not found\n');
  };
  const same =
    opts.probeAddr &&
    opts.metricsAddr &&
    opts.probeAddr.port !== 0 &&
    opts.probeAddr.port === opts.metricsAddr.port &&
    opts.probeAddr.host === opts.metricsAddr.host;
  const servers: Server[] = [];
  let probe: string | undefined;
  let metricsAt: string | undefined;
  const close = () =>
    Promise.all(
      servers.map(
        (s) =>
          new Promise<void>((resolve) => {
            s.close(() => resolve());
            s.closeAllConnections();
          }),
      ),
    ).then(() => undefined);
  try {
    if (same) {
      const s = await listen(
        opts.probeAddr!,
        async (req, res, url) =>
          url.pathname === '/metrics' ? metricsHandler(req, res, url) : probeHandler(req, res, url),
        log,
        'PROBE_ADDR and METRICS_ADDR',
      );
      servers.push(s);
      probe = metricsAt = boundAddress(s);
    } else {
      if (opts.probeAddr) {
        const s = await listen(opts.probeAddr, probeHandler, log, 'PROBE_ADDR');
        servers.push(s);
        probe = boundAddress(s);
      }
      if (opts.metricsAddr) {
        const s = await listen(opts.metricsAddr, metricsHandler, log, 'METRICS_ADDR');
        servers.push(s);
        metricsAt = boundAddress(s);
      }
    }
  } catch (err) {
    await close();
    throw err;
  }
  return { probe, metrics: metricsAt, close };
}

/**
 * Fetches Prometheus text from another exporter on this host (the Temporal SDK's), so /metrics can serve
 * both. Times out after `timeoutMs`.
 */
export function scrapeText(url: string, timeoutMs = 2_000): ExtraMetricsSource {
  return async () => {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
    return res.text();
  };
}
