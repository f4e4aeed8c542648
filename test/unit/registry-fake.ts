/**
 * In-process HTTP servers for the registry client's unit tests: the HTTP boundary is the only thing
 * faked. Each server records every request it sees.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http, { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface Recorded {
  method: string;
  /** Path and query as received. */
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

export type Handler = (req: Recorded, res: ServerResponse, raw: IncomingMessage) => void | Promise<void>;

export interface FakeServer {
  host: string;
  port: number;
  /** `host:port`, the value for OCI_REGISTRY. */
  authority: string;
  requests: Recorded[];
  /** Requests whose path starts with `prefix`. */
  hits(prefix: string): Recorded[];
  /** Count of connections that sent something other than HTTP (e.g. a TLS ClientHello). */
  clientErrors: number;
  close(): Promise<void>;
}

/** Starts an HTTP (or, with `tls`, HTTPS) server on `host` (default 127.0.0.1) and an ephemeral port. */
export async function startServer(
  handler: Handler,
  opts: { host?: string; tls?: { key: string; cert: string } } = {},
): Promise<FakeServer> {
  const host = opts.host ?? '127.0.0.1';
  const requests: Recorded[] = [];
  const listener = (raw: IncomingMessage, res: ServerResponse) => {
    let body = '';
    raw.setEncoding('utf8');
    raw.on('data', (c: string) => {
      body += c;
    });
    raw.on('end', () => {
      const rec: Recorded = { method: raw.method ?? '', url: raw.url ?? '', headers: raw.headers, body };
      requests.push(rec);
      Promise.resolve(handler(rec, res, raw)).catch((err: unknown) => {
        res.statusCode = 599;
        res.end(String(err));
      });
    });
  };
  const server = opts.tls ? https.createServer(opts.tls, listener) : http.createServer(listener);
  const fake: FakeServer = {
    host,
    port: 0,
    authority: '',
    requests,
    hits: (prefix) => requests.filter((r) => r.url.startsWith(prefix)),
    clientErrors: 0,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  server.on('clientError', (_err, socket) => {
    fake.clientErrors++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  fake.port = (server.address() as AddressInfo).port;
  fake.authority = `${host}:${fake.port}`;
  return fake;
}

export const DIGEST = `sha256:${'ab'.repeat(32)}`;

/** Headers of a valid manifest HEAD answer. */
export function manifestHeaders(): Record<string, string> {
  return {
    'content-type': 'application/vnd.oci.image.manifest.v1+json',
    'content-length': '123',
    'docker-content-digest': DIGEST,
  };
}

/** Writes a JSON file (creating a temp dir when `dir` is omitted) and returns its dir. */
export function tempDir(prefix = 'registry-test-'): { dir: string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

export function writeJSON(path: string, value: unknown): void {
  writeFileSync(path, JSON.stringify(value));
}

/** Self-signed certificate for `127.0.0.1` made with the openssl CLI. */
export function selfSignedCert(dir: string): { key: string; cert: string } {
  const key = join(dir, 'key.pem');
  const cert = join(dir, 'cert.pem');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      key,
      '-out',
      cert,
      '-days',
      '1',
      '-subj',
      '/CN=127.0.0.1',
      '-addext',
      'subjectAltName=IP:127.0.0.1,IP:127.0.0.2',
    ],
    { stdio: 'ignore' },
  );
  return { key: readFileSync(key, 'utf8'), cert: readFileSync(cert, 'utf8') };
}

/** Basic credentials `user:pass` as sent in an Authorization header. */
export function basicHeader(user: string, pass: string): string {
  return `Basic ${Buffer.from(`${user}:${pass}`).toString('base64')}`;
}
