/**
 * A counting HTTPS proxy in front of the real kube-apiserver, for tests: the operator's kubeconfig names
 * it as its server, and every request it forwards lands in a {@link RequestLog} (method, path template,
 * status). TLS on both sides: it serves a certificate the kubeconfig's CA signs (the stack's apiserver
 * serving pair, whose SANs cover 127.0.0.1) and verifies the apiserver against that CA. Request headers,
 * the Authorization header included, pass through unchanged, so the apiserver authenticates and
 * authorizes the operator's own credentials (use a bearer-token kubeconfig: a client certificate would
 * end at the proxy). Responses stream, so watches work. Write bodies are read on the side to name what
 * was written (RequestLog.describe). Bound to 127.0.0.1 only.
 *
 * `holdNext(match)` parks the next matching request before it is forwarded until the test releases it:
 * a way to change the world while a reconcile pass is known to be between two of its requests, or to
 * keep another workflow's request out of a pass. Requests are logged when forwarded, so a parked one
 * takes its place in the log at its release.
 */
import { Agent, createServer, request, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { RecordedRequest, RequestInfo, RequestLog } from './request-log.js';

/** Request bodies are kept (for the record's `detail`) up to this size. */
const MAX_BODY_BYTES = 256 * 1024;

export interface KubeApiProxyOptions {
  /** The apiserver's base URL, e.g. `https://127.0.0.1:6443`. */
  upstream: string;
  /** PEM CA that signs the apiserver's certificate (and `cert`). */
  ca: string;
  /** PEM serving certificate and key of the proxy (must be valid for 127.0.0.1). */
  cert: string;
  key: string;
  log: RequestLog;
  /** Port to listen on (0 = any free port). */
  port?: number;
}

/** A request parked by {@link KubeApiProxy.holdNext}. */
export interface Hold {
  /** Resolves once a request matched and was parked (it is not forwarded, nor logged, yet). */
  held: Promise<RequestInfo>;
  /** Resolves with the log record of the parked request once it was forwarded. */
  forwarded: Promise<RecordedRequest>;
  /** Forwards the parked request (or, if none matched yet, stops waiting for one). Idempotent. */
  release(): void;
}

export class KubeApiProxy {
  private server?: Server;
  private readonly agent: Agent;
  private readonly upstream: URL;
  private readonly holds: {
    match: (r: RequestInfo) => boolean;
    onHeld: (r: RequestInfo) => void;
    onForwarded: (r: RecordedRequest) => void;
    gate: Promise<void>;
    active: boolean;
  }[] = [];

  constructor(private readonly opts: KubeApiProxyOptions) {
    this.upstream = new URL(opts.upstream);
    this.agent = new Agent({ ca: opts.ca, keepAlive: true });
  }

  /** Starts listening; resolves with the proxy's base URL `https://127.0.0.1:<port>`. */
  async start(): Promise<string> {
    this.server = createServer({ cert: this.opts.cert, key: this.opts.key }, (req, res) => {
      const info = this.opts.log.classify('kube', req.method ?? 'GET', req.url ?? '/');
      const hold = this.holds.find((h) => h.active && h.match(info));
      const forward = () => {
        const rec = this.opts.log.append(info);
        hold?.onForwarded(rec);
        const up = request(
          {
            protocol: 'https:',
            hostname: this.upstream.hostname,
            port: this.upstream.port,
            method: req.method,
            path: req.url,
            headers: { ...req.headers, host: this.upstream.host },
            agent: this.agent,
          },
          (upRes) => {
            rec.status = upRes.statusCode;
            res.writeHead(upRes.statusCode ?? 502, upRes.headers);
            upRes.pipe(res);
          },
        );
        up.on('error', () => res.destroy());
        // A client that goes away (an aborted watch) ends the upstream request too.
        res.on('close', () => {
          if (!res.writableFinished) up.destroy();
        });
        if (req.method !== 'GET') {
          const chunks: Buffer[] = [];
          let size = 0;
          req.on('data', (c: Buffer) => {
            if (size < MAX_BODY_BYTES) chunks.push(c);
            size += c.length;
          });
          req.on('end', () => this.opts.log.describe(rec, Buffer.concat(chunks).toString('utf8')));
        }
        req.pipe(up);
      };
      if (!hold) {
        forward();
        return;
      }
      hold.active = false;
      hold.onHeld(info);
      req.pause();
      void hold.gate.then(() => {
        req.resume();
        forward();
      });
    });
    this.server.keepAliveTimeout = 30_000;
    await new Promise<void>((resolve) => this.server!.listen(this.opts.port ?? 0, '127.0.0.1', resolve));
    return `https://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /**
   * Parks the next request for which `match` holds (checked on arrival, before forwarding). Requests
   * that arrive meanwhile and do not match pass as usual.
   */
  holdNext(match: (r: RequestInfo) => boolean): Hold {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    let onHeld!: (r: RequestInfo) => void;
    const held = new Promise<RequestInfo>((resolve) => {
      onHeld = resolve;
    });
    let onForwarded!: (r: RecordedRequest) => void;
    const forwarded = new Promise<RecordedRequest>((resolve) => {
      onForwarded = resolve;
    });
    const h = { match, onHeld, onForwarded, gate, active: true };
    this.holds.push(h);
    return {
      held,
      forwarded,
      release: () => {
        h.active = false;
        open();
      },
    };
  }

  async stop(): Promise<void> {
    for (const h of this.holds) h.active = false;
    const s = this.server;
    if (s) {
      s.closeAllConnections();
      await new Promise<void>((resolve) => s.close(() => resolve()));
    }
    this.agent.destroy();
  }
}
