/**
 * OCIRegistryClient against in-process HTTP(S) servers: anonymous HEAD/DELETE outcomes, the 200-header
 * checks, retries, timeouts, abort, the HTTPS→HTTP scheme heuristic, URL building and redirects
 * (docs/wire-contract.md#oci-registry).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { createServer, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { Tags } from '../../src/api/keys.js';
import { OCIRegistryClient, type OCIRegistryClientOptions } from '../../src/registry/client.js';
import { multiKeychain } from '../../src/registry/credentials.js';
import { hasHibernateSnapshot, RegistryError } from '../../src/registry/types.js';
import { collectGarbage } from '../support/gc.js';
import {
  type FakeServer,
  type Handler,
  manifestHeaders,
  selfSignedCert,
  startServer,
  tempDir,
} from './registry-fake.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

/** Anonymous client (empty keychain) with fast retries; closed after the test. */
function client(base: string, opts: OCIRegistryClientOptions = {}): OCIRegistryClient {
  const c = new OCIRegistryClient(base, {
    keychain: multiKeychain(),
    retry: { initialDelayMs: 5 },
    ...opts,
  });
  cleanups.push(() => c.close());
  return c;
}

async function server(handler: Handler, opts?: Parameters<typeof startServer>[1]): Promise<FakeServer> {
  const s = await startServer(handler, opts);
  cleanups.push(() => s.close());
  return s;
}

/** Registry answering the ping with 200 and manifests with `manifest`. */
function anonymous(manifest: Handler): Handler {
  return (req, res, raw) => {
    if (req.url === '/v2/') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
      return;
    }
    return manifest(req, res, raw);
  };
}

async function rejection(p: Promise<unknown>): Promise<RegistryError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(RegistryError);
  return err as RegistryError;
}

describe('hasManifest (anonymous)', () => {
  it('HEADs /v2/<path>/<name>/manifests/<tag> with the reference Accept list and reports 200 as present', async () => {
    const reg = await server(
      anonymous((_req, res) => {
        res.writeHead(200, manifestHeaders());
        res.end();
      }),
    );
    const c = client(`${reg.authority}/snap/shots`);
    await expect(c.hasManifest('vk-ns-cs-0', Tags.hibernate)).resolves.toBe(true);
    const heads = reg.requests.filter((r) => r.method === 'HEAD');
    expect(heads).toHaveLength(1);
    expect(heads[0]!.url).toBe('/v2/snap/shots/vk-ns-cs-0/manifests/hibernate');
    expect(heads[0]!.headers.accept).toBe(
      'application/vnd.docker.distribution.manifest.v1+json,application/vnd.docker.distribution.manifest.v1+prettyjws,application/vnd.docker.distribution.manifest.v2+json,application/vnd.oci.image.manifest.v1+json,application/vnd.docker.distribution.manifest.list.v2+json,application/vnd.oci.image.index.v1+json',
    );
    expect(heads[0]!.headers.authorization).toBeUndefined();
    expect(reg.requests[0]!.url).toBe('/v2/');
  });

  it('reports 404 as absent', async () => {
    const reg = await server(
      anonymous((_req, res) => {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end();
      }),
    );
    await expect(client(reg.authority).hasManifest('vk-a', 'hibernate')).resolves.toBe(false);
  });

  it('retries a 500 three times, then throws a retryable error with the reference wording', async () => {
    const reg = await server(
      anonymous((_req, res) => {
        res.writeHead(500);
        res.end();
      }),
    );
    const err = await rejection(client(reg.authority).hasManifest('vk-a', 'hibernate'));
    expect(err.status).toBe(500);
    expect(err.retryable).toBe(true);
    expect(err.kind).toBe('HTTP');
    expect(err.message).toBe(
      'head manifest vk-a:hibernate: unexpected status code 500 Internal Server Error (HEAD responses have no body, use GET for details)',
    );
    expect(reg.requests.filter((r) => r.method === 'HEAD')).toHaveLength(3);
  });

  it('does not retry a 403 and marks it not retryable', async () => {
    const reg = await server(
      anonymous((_req, res) => {
        res.writeHead(403);
        res.end();
      }),
    );
    const err = await rejection(client(reg.authority).hasManifest('vk-a', 'hibernate'));
    expect(err.status).toBe(403);
    expect(err.retryable).toBe(false);
    expect(reg.requests.filter((r) => r.method === 'HEAD')).toHaveLength(1);
  });

  it('treats a 200 without Docker-Content-Digest as an error, not as present', async () => {
    const reg = await server(
      anonymous((_req, res) => {
        const { 'docker-content-digest': _omit, ...rest } = manifestHeaders();
        res.writeHead(200, rest);
        res.end();
      }),
    );
    const err = await rejection(client(reg.authority).hasManifest('vk-a', 'hibernate'));
    expect(err.kind).toBe('PROTOCOL');
    expect(err.message).toContain('Docker-Content-Digest');
  });

  it('rejects an invalid repository name before any request', async () => {
    const reg = await server(
      anonymous((_req, res) => {
        res.end();
      }),
    );
    const err = await rejection(client(reg.authority).hasManifest('Upper_Case', 'hibernate'));
    expect(err.kind).toBe('NAME_INVALID');
    expect(err.retryable).toBe(false);
    expect(reg.requests).toHaveLength(0);
  });

  it('makes one ping for concurrent calls and reuses it afterwards', async () => {
    const reg = await server(
      anonymous((_req, res) => {
        res.writeHead(404);
        res.end();
      }),
    );
    const c = client(reg.authority);
    await Promise.all(['vk-a', 'vk-b', 'vk-c'].map((vm) => c.hasManifest(vm, 'hibernate')));
    await c.deleteManifest('vk-a', 'hibernate');
    expect(reg.hits('/v2/').filter((r) => r.url === '/v2/')).toHaveLength(1);
  });

  it('does not keep a failed ping: the next call pings again', async () => {
    let down = true;
    const reg = await server((req, res) => {
      if (req.url === '/v2/') {
        res.writeHead(down ? 503 : 200);
        res.end();
        return;
      }
      res.writeHead(200, manifestHeaders());
      res.end();
    });
    const c = client(reg.authority);
    const err = await rejection(c.hasManifest('vk-a', 'hibernate'));
    expect(err.status).toBe(503);
    expect(err.retryable).toBe(true);
    down = false;
    await expect(c.hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
  });
});

describe('manifestAnnotations (anonymous)', () => {
  it('GETs the manifest with the reference Accept list and returns its string annotations; 404 is undefined; a 500 after retries throws', async () => {
    let answer = 200;
    const reg = await server(
      anonymous((_req, res) => {
        if (answer !== 200) {
          res.writeHead(answer, { 'content-type': 'application/json' });
          res.end();
          return;
        }
        const body = JSON.stringify({ schemaVersion: 2, annotations: { a: 'x', n: 1 } });
        res.writeHead(200, { 'content-type': 'application/vnd.oci.image.manifest.v1+json' });
        res.end(body);
      }),
    );
    const c = client(reg.authority);
    await expect(c.manifestAnnotations('vk-a', Tags.hibernate)).resolves.toEqual({ a: 'x' });
    const gets = reg.requests.filter((r) => r.method === 'GET' && r.url !== '/v2/');
    expect(gets.map((r) => r.url)).toEqual(['/v2/vk-a/manifests/hibernate']);
    expect(gets[0]!.headers.accept).toContain('application/vnd.oci.image.manifest.v1+json');
    answer = 404;
    await expect(c.manifestAnnotations('vk-a', Tags.hibernate)).resolves.toBeUndefined();
    answer = 500;
    await expect(c.manifestAnnotations('vk-a', Tags.hibernate)).rejects.toThrow(
      /^get manifest vk-a:hibernate: /,
    );
  });
});

describe('deleteManifest (anonymous)', () => {
  it('DELETEs the tag itself, without resolving it first, and accepts 202', async () => {
    const reg = await server(
      anonymous((_req, res) => {
        res.writeHead(202);
        res.end();
      }),
    );
    await client(`${reg.authority}/p`).deleteManifest('vk-a', 'hibernate');
    const calls = reg.requests.filter((r) => r.url !== '/v2/');
    expect(calls.map((r) => `${r.method} ${r.url}`)).toEqual(['DELETE /v2/p/vk-a/manifests/hibernate']);
  });

  it('accepts 404 (ensure absent)', async () => {
    const reg = await server(
      anonymous((_req, res) => {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end('{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}');
      }),
    );
    await expect(client(reg.authority).deleteManifest('vk-a', 'hibernate')).resolves.toBeUndefined();
  });

  it('surfaces 405 UNSUPPORTED with its OCI error code, not retryable', async () => {
    const reg = await server(
      anonymous((_req, res) => {
        res.writeHead(405, { 'content-type': 'application/json' });
        res.end('{"errors":[{"code":"UNSUPPORTED","message":"The operation is unsupported."}]}');
      }),
    );
    const err = await rejection(client(reg.authority).deleteManifest('vk-a', 'hibernate'));
    expect(err.message).toBe('delete manifest vk-a:hibernate: UNSUPPORTED: The operation is unsupported.');
    expect(err).toMatchObject({ status: 405, code: 'UNSUPPORTED', retryable: false, kind: 'HTTP' });
  });

  it('retries a 500 and then throws a retryable error', async () => {
    const reg = await server(
      anonymous((_req, res) => {
        res.writeHead(500);
        res.end('boom');
      }),
    );
    const err = await rejection(client(reg.authority).deleteManifest('vk-a', 'latest'));
    expect(err).toMatchObject({ status: 500, retryable: true });
    expect(err.message).toBe(
      'delete manifest vk-a:latest: unexpected status code 500 Internal Server Error: boom',
    );
    expect(reg.requests.filter((r) => r.method === 'DELETE')).toHaveLength(3);
  });
});

describe('timeouts and cancellation', () => {
  /** TCP server that accepts connections and never writes a byte. */
  async function silent(host = '127.0.0.1'): Promise<{ authority: string; connections: number }> {
    const sockets: Socket[] = [];
    const state = { authority: '', connections: 0 };
    const srv = createServer((s) => {
      state.connections++;
      sockets.push(s);
      s.on('error', () => {});
    });
    await new Promise<void>((r) => srv.listen(0, host, r));
    state.authority = `${host}:${(srv.address() as { port: number }).port}`;
    cleanups.push(
      () =>
        new Promise<void>((r) => {
          for (const s of sockets) s.destroy();
          srv.close(() => r());
        }),
    );
    return state;
  }

  it('gives up on a registry that never answers within the configured timeout, without retrying', async () => {
    const hung = await silent();
    const c = client(hung.authority, { timeoutMs: 400 });
    const started = Date.now();
    const err = await rejection(c.hasManifest('vk-a', 'hibernate'));
    const elapsed = Date.now() - started;
    expect(err.kind).toBe('TIMEOUT');
    expect(err.retryable).toBe(true);
    // HTTPS ping, then the HTTP fallback 300 ms later; each times out once.
    expect(elapsed).toBeGreaterThanOrEqual(390);
    expect(elapsed).toBeLessThan(1500);
    expect(hung.connections).toBe(2);
  });

  it('times out a HEAD that gets no answer after a good ping', async () => {
    const reg = await server(anonymous(() => {}));
    const c = client(reg.authority, { timeoutMs: 400 });
    const started = Date.now();
    const err = await rejection(c.hasManifest('vk-a', 'hibernate'));
    expect(err.kind).toBe('TIMEOUT');
    expect(Date.now() - started).toBeLessThan(1200);
    expect(reg.requests.filter((r) => r.method === 'HEAD')).toHaveLength(1);
  });

  it('lets go of the calling context once answered: no timeout timer is left holding it', async () => {
    // An activity's context (its logger, arguments, heartbeat) stayed reachable from the request's
    // timeout timer for the whole timeout after the answer: ~850 activities at once in a 1000-VM wake.
    const reg = await server(
      anonymous((_req, res) => {
        res.writeHead(404);
        res.end();
      }),
    );
    const c = client(reg.authority, { timeoutMs: 60_000 });
    expect(await c.hasManifest('vk-a', 'hibernate')).toBe(false); // its connection is made out here
    const als = new AsyncLocalStorage<object>();
    let ref: WeakRef<object> | undefined;
    await als.run({ activity: 'deleteManifest' }, async () => {
      ref = new WeakRef(als.getStore() as object);
      expect(await c.hasManifest('vk-a', 'hibernate')).toBe(false);
    });
    // Node hands a reused keep-alive socket the context of the request that reuses it (until the next
    // one): a call from out here takes the socket back, so only a timer could still hold the context.
    expect(await c.hasManifest('vk-a', 'hibernate')).toBe(false);
    await new Promise((resolve) => setImmediate(resolve));
    collectGarbage();
    expect(ref?.deref()).toBeUndefined();
  });

  it('aborts an in-flight call when the caller signal fires', async () => {
    const reg = await server(anonymous(() => {}));
    const c = client(reg.authority, { timeoutMs: 10_000 });
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 100);
    const started = Date.now();
    const err = await rejection(c.hasManifest('vk-a', 'hibernate', { signal: ac.signal }));
    expect(err.kind).toBe('ABORTED');
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it('aborts the retry wait too', async () => {
    const reg = await server(
      anonymous((_req, res) => {
        res.writeHead(503);
        res.end();
      }),
    );
    const c = client(reg.authority, { retry: { initialDelayMs: 10_000 } });
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 200);
    const started = Date.now();
    const err = await rejection(c.deleteManifest('vk-a', 'hibernate', { signal: ac.signal }));
    expect(err.kind).toBe('ABORTED');
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it('fails at once with an already-aborted signal, sending nothing', async () => {
    const reg = await server(
      anonymous((_req, res) => {
        res.end();
      }),
    );
    const c = client(reg.authority);
    const err = await rejection(c.hasManifest('vk-a', 'hibernate', { signal: AbortSignal.abort() }));
    expect(err.kind).toBe('ABORTED');
    expect(reg.requests.filter((r) => r.method === 'HEAD')).toHaveLength(0);
  });
});

describe('scheme heuristic', () => {
  const present: Handler = anonymous((_req, res) => {
    res.writeHead(200, manifestHeaders());
    res.end();
  });

  it('tries HTTPS first on 127.0.0.1 and falls back to plain HTTP', async () => {
    const reg = await server(present);
    await expect(client(reg.authority).hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
    expect(reg.clientErrors).toBeGreaterThanOrEqual(1); // the TLS ClientHello
  });

  it('uses HTTPS only for a host outside the fallback list (127.0.0.2 is loopback but not listed)', async () => {
    const reg = await server(present, { host: '127.0.0.2' });
    const err = await rejection(client(reg.authority).hasManifest('vk-a', 'hibernate'));
    expect(err.kind).toBe('NETWORK');
    expect(reg.requests).toHaveLength(0);
    expect(reg.clientErrors).toBeGreaterThanOrEqual(1);
  });

  it('talks HTTPS (TLS ≥ 1.2, HTTP/1.1) to an HTTPS-only host', async () => {
    const tmp = tempDir();
    cleanups.push(tmp.cleanup);
    const tls = selfSignedCert(tmp.dir);
    const reg = await server(present, { host: '127.0.0.2', tls });
    const c = client(reg.authority, { extraCA: tls.cert });
    await expect(c.hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
    expect(reg.requests.map((r) => r.url)).toEqual(['/v2/', '/v2/vk-a/manifests/hibernate']);
  });

  it('keeps HTTPS when it answers on a fallback host (HTTP is never tried)', async () => {
    const tmp = tempDir();
    cleanups.push(tmp.cleanup);
    const tls = selfSignedCert(tmp.dir);
    const reg = await server(present, { tls });
    const c = client(reg.authority, { extraCA: tls.cert, httpFallbackDelayMs: 5_000 });
    const started = Date.now();
    await expect(c.hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(reg.clientErrors).toBe(0);
  });
});

describe('redirects', () => {
  it('follows a same-host redirect with credentials and drops them for another host', async () => {
    const other = await server((_req, res) => {
      res.writeHead(200, manifestHeaders());
      res.end();
    });
    const reg = await server((req, res) => {
      if (req.url === '/v2/') {
        res.writeHead(401, { 'www-authenticate': 'Basic realm="fake"' });
        res.end();
      } else if (req.url.endsWith('/manifests/hibernate')) {
        res.writeHead(307, { location: '/moved/hibernate' });
        res.end();
      } else if (req.url === '/moved/hibernate') {
        res.writeHead(307, { location: `http://${other.authority}/elsewhere` });
        res.end();
      }
    });
    const c = client(reg.authority, {
      keychain: { resolve: async () => ({ username: 'u', password: 'p4ssw0rd' }) },
    });
    await expect(c.hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
    const moved = reg.hits('/moved/')[0]!;
    expect(moved.method).toBe('HEAD');
    expect(moved.headers.authorization).toMatch(/^Basic /);
    expect(other.requests[0]!.method).toBe('HEAD');
    expect(other.requests[0]!.headers.authorization).toBeUndefined();
  });
});

describe('hasHibernateSnapshot', () => {
  it('probes the hibernate tag and wraps failures with the VM name, keeping the cause', async () => {
    const boom = new Error('transport boom');
    const calls: string[] = [];
    const fake = {
      hasManifest: async (name: string, ref: string) => {
        calls.push(`${name}:${ref}`);
        if (name === 'vk-bad') throw boom;
        return true;
      },
      deleteManifest: async () => {},
      manifestAnnotations: async () => undefined,
    };
    await expect(hasHibernateSnapshot(fake, 'vk-good')).resolves.toBe(true);
    const err = await rejection(hasHibernateSnapshot(fake, 'vk-bad'));
    expect(calls).toEqual(['vk-good:hibernate', 'vk-bad:hibernate']);
    expect(err.message).toBe('probe hibernate snapshot vk-bad: transport boom');
    expect(err.cause).toBe(boom);
  });

  it('keeps status and retryable of a RegistryError cause', async () => {
    const reg = await server(
      anonymous((_req, res) => {
        res.writeHead(401);
        res.end();
      }),
    );
    const err = await rejection(hasHibernateSnapshot(client(reg.authority), 'vk-a'));
    expect(err.message).toMatch(
      /^probe hibernate snapshot vk-a: head manifest vk-a:hibernate: unexpected status code 401/,
    );
    expect(err).toMatchObject({ status: 401, retryable: false });
    expect(err.cause).toBeInstanceOf(RegistryError);
  });
});
