/**
 * Registry auth through the real client and keychains against in-process servers: Bearer token
 * exchange and caching, scope refresh on 401, Basic auth from a docker config, identity/registry
 * tokens, credential helpers on PATH, realm validation, and that no secret reaches an error or a log
 * line (docs/wire-contract.md#oci-registry).
 */
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { OCIRegistryClient, type OCIRegistryClientOptions } from '../../src/registry/client.js';
import type { RegistryLogger } from '../../src/registry/credentials.js';
import { RegistryError } from '../../src/registry/types.js';
import {
  basicHeader,
  type FakeServer,
  type Handler,
  manifestHeaders,
  type Recorded,
  startServer,
  tempDir,
  writeJSON,
} from './registry-fake.js';

const cleanups: (() => unknown)[] = [];
let home: string;
let dockerDir: string;

beforeEach(() => {
  // Keep the machine's own docker/podman config out of every test.
  const t = tempDir();
  cleanups.push(t.cleanup);
  home = join(t.dir, 'home');
  dockerDir = join(t.dir, 'docker');
  vi.stubEnv('HOME', home);
  vi.stubEnv('DOCKER_CONFIG', dockerDir);
  vi.stubEnv('REGISTRY_AUTH_FILE', '');
  vi.stubEnv('XDG_RUNTIME_DIR', '');
  vi.stubEnv('GOOGLE_APPLICATION_CREDENTIALS', '');
  mkdirSync(dockerDir, { recursive: true });
});
afterEach(async () => {
  vi.unstubAllEnvs();
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

/** Client with the default keychain (docker config from DOCKER_CONFIG) and a capturing logger. */
function client(
  base: string,
  opts: OCIRegistryClientOptions = {},
): { c: OCIRegistryClient; logs: unknown[] } {
  const logs: unknown[] = [];
  const logger: RegistryLogger = {
    debug: (obj, msg) => logs.push({ level: 'debug', obj, msg }),
    warn: (obj, msg) => logs.push({ level: 'warn', obj, msg }),
  };
  const c = new OCIRegistryClient(base, { retry: { initialDelayMs: 5 }, logger, ...opts });
  cleanups.push(() => c.close());
  return { c, logs };
}

function dockerConfig(value: unknown): void {
  writeJSON(join(dockerDir, 'config.json'), value);
}

async function rejection(p: Promise<unknown>): Promise<RegistryError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(RegistryError);
  return err as RegistryError;
}

interface BearerOptions {
  /** Basic credentials the token endpoint requires (anonymous tokens otherwise). */
  basic?: string;
  expiresIn?: number;
  /** Answers the token endpoint instead of the default. */
  token?: Handler;
  /** Which issued token numbers the manifest endpoint accepts (default: any). */
  accepts?: (n: number) => boolean;
  manifest?: Handler;
}

/** Registry whose ping demands Bearer auth with a realm on the same host:port, like distribution + token auth. */
async function bearerRegistry(
  o: BearerOptions = {},
): Promise<FakeServer & { tokenRequests: () => Recorded[] }> {
  let issued = 0;
  let realm = '';
  const challenge = (scope?: string) =>
    `Bearer realm="${realm}",service="fake-registry"${scope ? `,scope="${scope}"` : ''}`;
  const reg = await startServer((req, res, raw) => {
    const path = req.url.split('?')[0]!;
    if (path === '/v2/') {
      res.writeHead(401, { 'www-authenticate': challenge() });
      res.end();
      return;
    }
    if (path === '/token') {
      if (o.token) return o.token(req, res, raw);
      if (o.basic && req.headers.authorization !== o.basic) {
        res.writeHead(401);
        res.end();
        return;
      }
      issued++;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ token: `tok-${issued}`, expires_in: o.expiresIn ?? 300 }));
      return;
    }
    const m = /^Bearer tok-(\d+)$/.exec(req.headers.authorization ?? '');
    if (!m || !(o.accepts ?? (() => true))(Number(m[1]))) {
      res.writeHead(401, { 'www-authenticate': challenge('repository:extra:pull') });
      res.end();
      return;
    }
    if (o.manifest) return o.manifest(req, res, raw);
    if (req.method === 'DELETE') res.writeHead(202);
    else res.writeHead(200, manifestHeaders());
    res.end();
  });
  realm = `http://${reg.authority}/token`;
  cleanups.push(() => reg.close());
  return Object.assign(reg, { tokenRequests: () => reg.hits('/token') });
}

function query(r: Recorded): URLSearchParams {
  return new URL(r.url, 'http://x').searchParams;
}

describe('bearer token flow', () => {
  it('exchanges an anonymous pull token once and reuses it for later calls', async () => {
    const reg = await bearerRegistry();
    const { c } = client(`${reg.authority}/snaps`);
    await expect(c.hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
    await expect(c.hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
    const tokens = reg.tokenRequests();
    expect(tokens).toHaveLength(1);
    expect(tokens[0]!.method).toBe('GET');
    expect(query(tokens[0]!).getAll('scope')).toEqual(['repository:snaps/vk-a:pull']);
    expect(query(tokens[0]!).get('service')).toBe('fake-registry');
    expect(tokens[0]!.headers.authorization).toBeUndefined();
    const heads = reg.requests.filter((r) => r.method === 'HEAD');
    expect(heads.map((r) => r.headers.authorization)).toEqual(['Bearer tok-1', 'Bearer tok-1']);
    expect(reg.hits('/v2/').filter((r) => r.url === '/v2/')).toHaveLength(1);
  });

  it('shares one token exchange between concurrent calls on the same repository', async () => {
    const reg = await bearerRegistry();
    const { c } = client(reg.authority);
    await Promise.all([1, 2, 3, 4].map(() => c.hasManifest('vk-a', 'hibernate')));
    expect(reg.tokenRequests()).toHaveLength(1);
  });

  it('asks for push,pull,delete on DELETE and keeps that token apart from the pull token', async () => {
    const reg = await bearerRegistry();
    const { c } = client(reg.authority);
    await c.hasManifest('vk-a', 'hibernate');
    await c.deleteManifest('vk-a', 'hibernate');
    await c.deleteManifest('vk-a', 'hibernate');
    const scopes = reg.tokenRequests().map((r) => query(r).getAll('scope'));
    expect(scopes).toEqual([['repository:vk-a:pull'], ['repository:vk-a:push,pull,delete']]);
    const deletes = reg.requests.filter((r) => r.method === 'DELETE');
    expect(deletes.map((r) => r.headers.authorization)).toEqual(['Bearer tok-2', 'Bearer tok-2']);
  });

  it('sends Basic credentials from $DOCKER_CONFIG/config.json to the token endpoint', async () => {
    dockerConfig({ auths: {} });
    const reg = await bearerRegistry({ basic: basicHeader('robot', 's3cret-pass') });
    dockerConfig({
      auths: { [reg.authority]: { auth: Buffer.from('robot:s3cret-pass').toString('base64') } },
    });
    const { c } = client(reg.authority);
    await expect(c.hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
    expect(reg.tokenRequests()[0]!.headers.authorization).toBe(basicHeader('robot', 's3cret-pass'));
  });

  it('on a 401 with a scope challenge, prepends those scopes, refreshes once and retries once', async () => {
    const reg = await bearerRegistry({ accepts: (n) => n >= 2 });
    const { c } = client(reg.authority);
    await expect(c.hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
    const scopes = reg.tokenRequests().map((r) => query(r).getAll('scope'));
    expect(scopes).toEqual([['repository:vk-a:pull'], ['repository:extra:pull', 'repository:vk-a:pull']]);
    const heads = reg.requests.filter((r) => r.method === 'HEAD').map((r) => r.headers.authorization);
    expect(heads).toEqual(['Bearer tok-1', 'Bearer tok-2']);
    // The refreshed token is what later calls use.
    await c.hasManifest('vk-a', 'hibernate');
    expect(reg.tokenRequests()).toHaveLength(2);
  });

  it('gives up after one refresh when the registry keeps answering 401', async () => {
    const reg = await bearerRegistry({ accepts: () => false });
    const { c } = client(reg.authority);
    const err = await rejection(c.hasManifest('vk-a', 'hibernate'));
    expect(err).toMatchObject({ status: 401, retryable: false });
    expect(reg.requests.filter((r) => r.method === 'HEAD')).toHaveLength(2);
  });

  it('fetches a new token once the cached one has expired (its lifetime less a tenth: 900 ms of 1 s)', async () => {
    const reg = await bearerRegistry({ expiresIn: 1 });
    const { c } = client(reg.authority);
    // Only the clock is fake: sockets and timers stay real.
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() });
    try {
      const t0 = Date.now();
      await c.hasManifest('vk-a', 'hibernate');
      await c.hasManifest('vk-a', 'hibernate');
      expect(reg.tokenRequests()).toHaveLength(1);
      vi.setSystemTime(t0 + 850);
      await c.hasManifest('vk-a', 'hibernate');
      expect(reg.tokenRequests()).toHaveLength(1);
      vi.setSystemTime(t0 + 950);
      await c.hasManifest('vk-a', 'hibernate');
      expect(reg.tokenRequests()).toHaveLength(2);
    } finally {
      vi.useRealTimers();
    }
  });

  it('accepts access_token instead of token', async () => {
    const reg = await bearerRegistry({
      token: (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ access_token: 'tok-7' }));
      },
    });
    const { c } = client(reg.authority);
    await expect(c.hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
  });

  it('uses the OAuth2 refresh-token POST form for an identitytoken', async () => {
    const reg = await bearerRegistry({
      token: (req, res) => {
        const form = new URLSearchParams(req.body);
        const ok =
          req.method === 'POST' &&
          form.get('grant_type') === 'refresh_token' &&
          form.get('refresh_token') === 'idtok-123456' &&
          form.get('client_id') === 'go-containerregistry' &&
          form.get('scope') === 'repository:vk-a:pull' &&
          form.get('service') === 'fake-registry';
        res.writeHead(ok ? 200 : 400, { 'content-type': 'application/json' });
        res.end(JSON.stringify(ok ? { access_token: 'tok-1', refresh_token: 'idtok-next' } : {}));
      },
    });
    dockerConfig({ auths: { [reg.authority]: { identitytoken: 'idtok-123456' } } });
    const { c } = client(reg.authority);
    await expect(c.hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
    expect(reg.tokenRequests()[0]!.headers['content-type']).toBe('application/x-www-form-urlencoded');
  });

  it('sends a registrytoken as-is, without a token exchange', async () => {
    const reg = await bearerRegistry();
    dockerConfig({ auths: { [reg.authority]: { registrytoken: 'tok-42' } } });
    const { c } = client(reg.authority);
    await expect(c.hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
    expect(reg.tokenRequests()).toHaveLength(0);
    expect(reg.requests.find((r) => r.method === 'HEAD')!.headers.authorization).toBe('Bearer tok-42');
  });

  it('refuses a realm on another private address than the registry', async () => {
    const reg = await startServer((_req, res) => {
      res.writeHead(401, { 'www-authenticate': 'Bearer realm="http://127.0.0.1:1/token",service="x"' });
      res.end();
    });
    cleanups.push(() => reg.close());
    const { c } = client(reg.authority);
    const err = await rejection(c.hasManifest('vk-a', 'hibernate'));
    expect(err.kind).toBe('PROTOCOL');
    expect(err.message).toContain('private address');
  });
});

describe('basic challenge', () => {
  async function basicRegistry(expected: string): Promise<FakeServer> {
    const reg = await startServer((req, res) => {
      if (req.url === '/v2/' || req.headers.authorization !== expected) {
        res.writeHead(401, { 'www-authenticate': 'Basic realm="fake"' });
        res.end();
        return;
      }
      res.writeHead(200, manifestHeaders());
      res.end();
    });
    cleanups.push(() => reg.close());
    return reg;
  }

  it('sends username/password from the docker config on every request', async () => {
    const reg = await basicRegistry(basicHeader('alice', 'wonder-land'));
    dockerConfig({
      auths: { [`http://${reg.authority}/v1/`]: { username: 'alice', password: 'wonder-land' } },
    });
    const { c } = client(reg.authority);
    await expect(c.hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
    expect(reg.requests.find((r) => r.method === 'HEAD')!.headers.authorization).toBe(
      basicHeader('alice', 'wonder-land'),
    );
  });

  it('prefers an entry for the full repository over the registry host', async () => {
    const reg = await basicRegistry(basicHeader('repo-user', 'repo-pass'));
    dockerConfig({
      auths: {
        [reg.authority]: { username: 'host-user', password: 'host-pass' },
        [`${reg.authority}/vk-a`]: { username: 'repo-user', password: 'repo-pass' },
      },
    });
    const { c } = client(reg.authority);
    await expect(c.hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
  });

  it('reads REGISTRY_AUTH_FILE when there is no docker config', async () => {
    const reg = await basicRegistry(basicHeader('pod', 'man-pass'));
    const t = tempDir();
    cleanups.push(t.cleanup);
    const file = join(t.dir, 'auth.json');
    writeJSON(file, { auths: { [reg.authority]: { auth: Buffer.from('pod:man-pass').toString('base64') } } });
    vi.stubEnv('REGISTRY_AUTH_FILE', file);
    const { c } = client(reg.authority);
    await expect(c.hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
  });

  it('gets credentials from a credHelpers helper on PATH, asked with the registry host', async () => {
    const reg = await basicRegistry(basicHeader('helper-user', 'helper-secret'));
    const log = installHelper('fake', reg.authority, { Username: 'helper-user', Secret: 'helper-secret' });
    dockerConfig({ credHelpers: { [reg.authority]: 'fake' } });
    const { c } = client(reg.authority);
    await expect(c.hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
    expect(readLines(log)).toEqual([`get ${reg.authority}`]);
  });

  it('asks a credsStore for the full repository first, then the host', async () => {
    const reg = await basicRegistry(basicHeader('store-user', 'store-secret'));
    const log = installHelper('store', reg.authority, { Username: 'store-user', Secret: 'store-secret' });
    dockerConfig({ credsStore: 'store' });
    const { c } = client(`${reg.authority}/p`);
    await expect(c.hasManifest('vk-a', 'hibernate')).resolves.toBe(true);
    expect(readLines(log)).toEqual([`get ${reg.authority}/p/vk-a`, `get ${reg.authority}`]);
  });

  it('reports rejected credentials as a non-retryable 401 and keeps the password out of errors and logs', async () => {
    const password = 'hunter2-very-secret';
    const reg = await basicRegistry(basicHeader('alice', 'the-right-one'));
    dockerConfig({ auths: { [reg.authority]: { username: 'alice', password } } });
    const { c, logs } = client(reg.authority);
    const err = await rejection(c.hasManifest('vk-a', 'hibernate'));
    expect(err).toMatchObject({ status: 401, retryable: false });
    assertNoSecret([err, logs], [password, Buffer.from(`alice:${password}`).toString('base64')]);
  });
});

describe('secrets', () => {
  it('redacts credentials and tokens a server echoes into an error body', async () => {
    const password = 'pa55-word-xyz';
    const reg = await bearerRegistry({
      token: (req, res) => {
        if (req.headers.authorization?.startsWith('Basic')) {
          res.writeHead(500, { 'content-type': 'text/plain' });
          res.end(`upstream failed for ${req.headers.authorization} (${password})`);
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"token":"tok-1"}');
      },
    });
    dockerConfig({ auths: { [reg.authority]: { username: 'bob', password } } });
    const { c, logs } = client(reg.authority);
    const err = await rejection(c.hasManifest('vk-a', 'hibernate'));
    expect(err).toMatchObject({ status: 500, retryable: true });
    expect(err.message).toContain('<redacted>');
    assertNoSecret([err, logs], [password, Buffer.from(`bob:${password}`).toString('base64')]);
  });

  it('keeps a bearer token out of errors and logs', async () => {
    const reg = await bearerRegistry({
      manifest: (req, res) => {
        res.writeHead(403, { 'content-type': 'text/plain' });
        res.end(`denied: ${req.headers.authorization}`);
      },
    });
    const { c, logs } = client(reg.authority);
    const err = await rejection(c.deleteManifest('vk-a', 'hibernate'));
    expect(err).toMatchObject({ status: 403, retryable: false });
    expect(logs.length).toBeGreaterThan(0);
    assertNoSecret([err, logs], ['tok-1']);
  });
});

/** Writes `docker-credential-<name>` into a temp dir on PATH; it logs its argv+stdin and answers for `host`. */
function installHelper(name: string, host: string, creds: { Username: string; Secret: string }): string {
  const t = tempDir();
  cleanups.push(t.cleanup);
  const log = join(t.dir, 'calls.log');
  const script = join(t.dir, `docker-credential-${name}`);
  writeFileSync(
    script,
    [
      '#!/bin/sh',
      'server=$(cat)',
      `echo "$1 $server" >> '${log}'`,
      `if [ "$server" = '${host}' ]; then`,
      `  printf '%s' '${JSON.stringify({ ServerURL: host, ...creds })}'`,
      'else',
      '  echo "credentials not found in native keychain"',
      '  exit 1',
      'fi',
      '',
    ].join('\n'),
  );
  chmodSync(script, 0o755);
  vi.stubEnv('PATH', `${t.dir}:${process.env.PATH ?? ''}`);
  return log;
}

function readLines(file: string): string[] {
  return readFileSync(file, 'utf8').trim().split('\n');
}

/** Fails when any secret appears in the messages of an error chain or in the serialized log records. */
function assertNoSecret(things: unknown[], secrets: string[]): void {
  const texts: string[] = [];
  for (const thing of things) {
    let e: unknown = thing;
    while (e instanceof Error) {
      texts.push(e.message, String(e.stack));
      e = e.cause;
    }
    texts.push(JSON.stringify(thing));
  }
  for (const secret of secrets) {
    for (const text of texts) expect(text).not.toContain(secret);
  }
}
