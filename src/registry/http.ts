/**
 * The HTTP layer under the registry client: keep-alive HTTP/1.1 agents, a per-attempt timeout joined
 * with the caller's AbortSignal, manual redirects (so Authorization only goes to the registry host and
 * private-address hops can be refused), a capped body read, and the reference retry table
 * (the reference's `bulkTransport`; docs/wire-contract.md#oci-registry).
 * node:http is used rather than fetch because fetch refuses a list of "bad ports" (e.g. 6000, 5060)
 * a registry may legitimately listen on, and merges repeated WWW-Authenticate lines.
 */
import http, { type IncomingHttpHeaders } from 'node:http';
import https from 'node:https';
import { rootCertificates } from 'node:tls';
import { RegistryError } from './types.js';

/** Statuses retried by the transport (ggcr internal/retry, docs/wire-contract.md#oci-registry). */
export const RETRY_STATUSES: ReadonlySet<number> = new Set([408, 429, 499, 500, 502, 503, 504, 522]);
/** Socket error codes treated as temporary and retried (Go: Temporary(), EOF, EPIPE, ECONNRESET, closed). */
const RETRY_ERROR_CODES: ReadonlySet<string> = new Set([
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EAI_AGAIN',
  'ECONNABORTED',
  'UND_ERR_SOCKET',
  'ERR_STREAM_PREMATURE_CLOSE',
]);
/** Socket error codes worth trying again later (the caller-level `retryable` flag). */
const TRANSIENT_ERROR_CODES: ReadonlySet<string> = new Set([
  ...RETRY_ERROR_CODES,
  'ECONNREFUSED',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
]);
const REDIRECT_STATUSES: ReadonlySet<number> = new Set([301, 302, 303, 307, 308]);
const MAX_REDIRECTS = 10;

/** Retry schedule: `attempts` tries in all, waits `initialDelayMs × factor^n`, ±10 % jitter. */
export interface RetryPolicy {
  attempts: number;
  initialDelayMs: number;
  factor: number;
}

/** Reference schedule: 3 attempts, ≈1 s then ≈3 s (docs/wire-contract.md#oci-registry). */
export const DEFAULT_RETRY: RetryPolicy = { attempts: 3, initialDelayMs: 1000, factor: 3 };

/** Whether an HTTP status means "try again later" for callers (timeouts, throttling, server errors). */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 429 || status >= 500 || RETRY_STATUSES.has(status);
}

export interface HttpRequest {
  method: 'GET' | 'HEAD' | 'DELETE' | 'POST';
  url: URL;
  headers?: Record<string, string>;
  body?: string;
  /** Authorization value for a given hop's URL, or undefined to send none (evaluated per redirect hop). */
  authorization?: (url: URL) => string | undefined;
  /** Throws to refuse a redirect hop (`from` → `to`). */
  checkRedirect?: (from: URL, to: URL) => void;
  /** Bytes of body kept (default 16 KiB); more is drained and flagged `truncated`. */
  bodyLimit?: number;
}

export interface HttpResponse {
  status: number;
  statusText: string;
  headers: IncomingHttpHeaders;
  /** Repeated header lines kept apart (e.g. several WWW-Authenticate challenges). */
  headersDistinct: NodeJS.Dict<string[]>;
  body: string;
  truncated: boolean;
  /** URL of the final hop. */
  url: URL;
}

export interface HttpTransportOptions {
  timeoutMs: number;
  retry: RetryPolicy;
  userAgent: string;
  /** PEM CA certificates trusted in addition to the system roots. */
  extraCA?: string | string[];
  /** Called before a retry wait; must not log secrets (it is given none). */
  onRetry?: (info: { method: string; url: string; attempt: number; delayMs: number; reason: string }) => void;
}

/**
 * Keep-alive HTTP/1.1 client with retries. One instance per registry client; `close()` destroys pooled
 * sockets. Errors are RegistryErrors of kind NETWORK, TIMEOUT, ABORTED or PROTOCOL (refused redirect).
 * Non-2xx statuses are returned, not thrown.
 */
export class HttpTransport {
  private readonly httpAgent = new http.Agent({
    keepAlive: true,
    keepAliveMsecs: 30_000,
    maxFreeSockets: 32,
  });
  private readonly httpsAgent: https.Agent;

  constructor(private readonly opts: HttpTransportOptions) {
    this.httpsAgent = new https.Agent({
      keepAlive: true,
      keepAliveMsecs: 30_000,
      maxFreeSockets: 32,
      minVersion: 'TLSv1.2',
      ALPNProtocols: ['http/1.1'],
      ...(opts.extraCA ? { ca: [...rootCertificates, ...[opts.extraCA].flat()] } : {}),
    });
  }

  /** Destroys pooled connections. */
  close(): void {
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
  }

  /**
   * Sends `req`, following redirects and retrying per the policy. Retries happen on RETRY_STATUSES and
   * temporary socket errors, never after a timeout or an abort; after the last attempt the last
   * response is returned (or its error thrown).
   */
  async request(req: HttpRequest, signal?: AbortSignal): Promise<HttpResponse> {
    const { attempts, initialDelayMs, factor } = this.opts.retry;
    for (let attempt = 1; ; attempt++) {
      let outcome: HttpResponse | RegistryError;
      try {
        outcome = await this.followRedirects(req, signal);
      } catch (err) {
        if (!(err instanceof RegistryError)) throw err;
        outcome = err;
      }
      const retry =
        attempt < attempts &&
        (outcome instanceof RegistryError
          ? outcome.kind === 'NETWORK' && RETRY_ERROR_CODES.has(outcome.code ?? '')
          : RETRY_STATUSES.has(outcome.status));
      if (!retry) {
        if (outcome instanceof RegistryError) throw outcome;
        return outcome;
      }
      const base = initialDelayMs * factor ** (attempt - 1);
      const delayMs = Math.round(base * (0.9 + Math.random() * 0.2));
      this.opts.onRetry?.({
        method: req.method,
        url: redactURL(req.url),
        attempt,
        delayMs,
        reason:
          outcome instanceof RegistryError ? (outcome.code ?? outcome.kind) : `status ${outcome.status}`,
      });
      await sleep(delayMs, signal);
    }
  }

  private async followRedirects(req: HttpRequest, signal?: AbortSignal): Promise<HttpResponse> {
    let url = req.url;
    let method = req.method;
    let body = req.body;
    for (let hop = 0; ; hop++) {
      const headers: Record<string, string> = { 'user-agent': this.opts.userAgent, ...req.headers };
      const authorization = req.authorization?.(url);
      if (authorization) headers.authorization = authorization;
      if (body === undefined) delete headers['content-type'];
      const res = await this.once(method, url, headers, body, req.bodyLimit ?? 16 * 1024, signal);
      const location = res.headers.location;
      if (!REDIRECT_STATUSES.has(res.status) || !location) return res;
      if (hop >= MAX_REDIRECTS) {
        throw new RegistryError(`${method} ${redactURL(req.url)}: stopped after ${MAX_REDIRECTS} redirects`, {
          kind: 'PROTOCOL',
          retryable: false,
        });
      }
      const next = new URL(location, url);
      if (next.protocol !== 'http:' && next.protocol !== 'https:') {
        throw new RegistryError(
          `${method} ${redactURL(url)}: redirect to unsupported scheme ${next.protocol}`,
          {
            kind: 'PROTOCOL',
            retryable: false,
          },
        );
      }
      req.checkRedirect?.(url, next);
      if (res.status !== 307 && res.status !== 308 && method !== 'HEAD' && method !== 'GET') {
        method = 'GET';
        body = undefined;
      }
      url = next;
    }
  }

  private once(
    method: string,
    url: URL,
    headers: Record<string, string>,
    body: string | undefined,
    bodyLimit: number,
    callerSignal?: AbortSignal,
  ): Promise<HttpResponse> {
    const target = `${method} ${redactURL(url)}`;
    if (callerSignal?.aborted) return Promise.reject(abortedError(target, callerSignal.reason));
    // Not AbortSignal.timeout: its timer stays scheduled for the whole timeout after the answer, and holds
    // the async context it was made in (the calling activity, its logger and arguments) until it fires.
    const timeout = new AbortController();
    const timer = setTimeout(
      () => timeout.abort(new DOMException(`no answer within ${this.opts.timeoutMs}ms`, 'TimeoutError')),
      this.opts.timeoutMs,
    );
    timer.unref();
    const signal = callerSignal ? AbortSignal.any([callerSignal, timeout.signal]) : timeout.signal;
    const secure = url.protocol === 'https:';
    return new Promise<HttpResponse>((resolve, reject) => {
      let settled = false;
      const settle = (): boolean => {
        if (settled) return false;
        settled = true;
        clearTimeout(timer);
        return true;
      };
      const fail = (err: unknown) => {
        if (!settle()) return;
        if (callerSignal?.aborted) reject(abortedError(target, callerSignal.reason));
        else if (timeout.signal.aborted) {
          reject(
            new RegistryError(`${target}: no answer within ${this.opts.timeoutMs}ms`, {
              kind: 'TIMEOUT',
              retryable: true,
            }),
          );
        } else reject(networkError(target, err));
      };
      const reqHeaders = { ...headers };
      if (body !== undefined) reqHeaders['content-length'] = String(Buffer.byteLength(body));
      const req = (secure ? https : http).request(
        url,
        { method, headers: reqHeaders, agent: secure ? this.httpsAgent : this.httpAgent, signal },
        (res) => {
          const chunks: Buffer[] = [];
          let kept = 0;
          let truncated = false;
          res.on('data', (chunk: Buffer) => {
            if (kept >= bodyLimit) {
              truncated = true;
              return;
            }
            const part = chunk.length > bodyLimit - kept ? chunk.subarray(0, bodyLimit - kept) : chunk;
            if (part.length < chunk.length) truncated = true;
            chunks.push(part);
            kept += part.length;
          });
          res.on('error', fail);
          res.on('aborted', () => fail(new Error('response aborted')));
          res.on('end', () => {
            if (!settle()) return;
            resolve({
              status: res.statusCode ?? 0,
              statusText: res.statusMessage ?? '',
              headers: res.headers,
              headersDistinct: res.headersDistinct,
              body: Buffer.concat(chunks).toString('utf8'),
              truncated,
              url,
            });
          });
        },
      );
      req.on('error', fail);
      req.end(body);
    });
  }
}

/** URL without userinfo and query (the query of a token request names scopes, never secrets, but keep logs short). */
export function redactURL(url: URL): string {
  return `${url.protocol}//${url.host}${url.pathname}`;
}

function abortedError(target: string, reason: unknown): RegistryError {
  return new RegistryError(`${target}: aborted`, { kind: 'ABORTED', retryable: false, cause: reason });
}

function networkError(target: string, err: unknown): RegistryError {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  const message = err instanceof Error ? err.message : String(err);
  return new RegistryError(`${target}: ${message}`, {
    kind: 'NETWORK',
    retryable: code === undefined || TRANSIENT_ERROR_CODES.has(code),
    code,
    cause: err,
  });
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(abortedError('retry wait', signal.reason));
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortedError('retry wait', signal?.reason));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
