/**
 * Keychains on their own: docker config discovery and lookup, credential helpers, the multi-keychain
 * order, and the Google keychain (host list, real google-auth-library ADC against a fake token
 * endpoint) — docs/wire-contract.md#oci-registry.
 */
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  DockerConfigKeychain,
  GoogleKeychain,
  isGoogleRegistry,
  multiKeychain,
  type RegistryCredentials,
} from '../../src/registry/credentials.js';
import { RegistryError } from '../../src/registry/types.js';
import { startServer, tempDir, writeJSON } from './registry-fake.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  vi.unstubAllEnvs();
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

function dir(): string {
  const t = tempDir();
  cleanups.push(t.cleanup);
  return t.dir;
}

const target = { registry: 'reg.example.com:5000', repository: 'reg.example.com:5000/snaps/vk-a' };
const b64 = (s: string) => Buffer.from(s).toString('base64');

describe('DockerConfigKeychain', () => {
  it('is anonymous when no config file exists anywhere', async () => {
    const home = dir();
    const kc = new DockerConfigKeychain({ env: { PATH: process.env.PATH }, home });
    await expect(kc.resolve(target)).resolves.toBeUndefined();
  });

  it('reads ~/.docker/config.json when DOCKER_CONFIG is unset, splitting auth at the first colon', async () => {
    const home = dir();
    mkdirSync(join(home, '.docker'));
    writeJSON(join(home, '.docker', 'config.json'), {
      auths: { 'reg.example.com:5000': { auth: b64('user:pa:ss') } },
    });
    const kc = new DockerConfigKeychain({ env: {}, home });
    await expect(kc.resolve(target)).resolves.toEqual({ username: 'user', password: 'pa:ss' });
  });

  it('uses $DOCKER_CONFIG when ~/.docker/config.json exists, even if $DOCKER_CONFIG has no file (reference quirk)', async () => {
    const home = dir();
    const other = dir();
    mkdirSync(join(home, '.docker'));
    writeJSON(join(home, '.docker', 'config.json'), {
      auths: { 'reg.example.com:5000': { auth: b64('a:b') } },
    });
    const kc = new DockerConfigKeychain({ env: { DOCKER_CONFIG: other }, home });
    await expect(kc.resolve(target)).resolves.toBeUndefined();
  });

  it('falls back to $XDG_RUNTIME_DIR/containers/auth.json', async () => {
    const home = dir();
    const xdg = dir();
    mkdirSync(join(xdg, 'containers'));
    writeJSON(join(xdg, 'containers', 'auth.json'), {
      auths: { 'reg.example.com:5000': { username: 'pod', password: 'man' } },
    });
    const kc = new DockerConfigKeychain({ env: { XDG_RUNTIME_DIR: xdg }, home });
    await expect(kc.resolve(target)).resolves.toEqual({ username: 'pod', password: 'man' });
  });

  it('matches URL-shaped keys by hostname and maps Docker Hub to its legacy key', async () => {
    const cfg = dir();
    writeJSON(join(cfg, 'config.json'), {
      auths: {
        'https://reg.example.com:5000/v2/': { username: 'url', password: 'key' },
        'https://index.docker.io/v1/': { username: 'hub', password: 'pw', identitytoken: 'idt' },
      },
    });
    const kc = new DockerConfigKeychain({ env: { DOCKER_CONFIG: cfg }, home: dir() });
    await expect(kc.resolve(target)).resolves.toEqual({ username: 'url', password: 'key' });
    await expect(
      kc.resolve({ registry: 'index.docker.io', repository: 'index.docker.io/org/vk-a' }),
    ).resolves.toEqual({ username: 'hub', password: 'pw', identityToken: 'idt' });
  });

  it('fails without echoing the file when the config is not JSON', async () => {
    const cfg = dir();
    writeFileSync(join(cfg, 'config.json'), '{"auths": {"x": {"password": "leaky-secret"');
    const kc = new DockerConfigKeychain({ env: { DOCKER_CONFIG: cfg }, home: dir() });
    const err = await kc.resolve(target).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RegistryError);
    expect((err as RegistryError).kind).toBe('CREDENTIALS');
    expect((err as Error).message).not.toContain('leaky-secret');
  });

  it('fails on an auth entry without a colon', async () => {
    const cfg = dir();
    writeJSON(join(cfg, 'config.json'), { auths: { 'reg.example.com:5000': { auth: b64('nocolon') } } });
    const kc = new DockerConfigKeychain({ env: { DOCKER_CONFIG: cfg }, home: dir() });
    await expect(kc.resolve(target)).rejects.toThrow(/invalid auth entry/);
  });

  describe('credential helpers', () => {
    function helper(body: string): { env: NodeJS.ProcessEnv; name: string } {
      const bin = dir();
      const name = `t${Math.random().toString(36).slice(2, 8)}`;
      const script = join(bin, `docker-credential-${name}`);
      writeFileSync(script, `#!/bin/sh\nserver=$(cat)\n${body}\n`);
      chmodSync(script, 0o755);
      return { env: { PATH: `${bin}:${process.env.PATH ?? ''}` }, name };
    }

    function keychain(h: { env: NodeJS.ProcessEnv; name: string }, config: object): DockerConfigKeychain {
      const cfg = dir();
      writeJSON(join(cfg, 'config.json'), config);
      return new DockerConfigKeychain({ env: { ...h.env, DOCKER_CONFIG: cfg }, home: dir() });
    }

    it('maps Username "<token>" to an identity token', async () => {
      const h = helper(`printf '{"ServerURL":"%s","Username":"<token>","Secret":"refresh-me"}' "$server"`);
      const kc = keychain(h, { credHelpers: { 'reg.example.com:5000': h.name } });
      await expect(kc.resolve(target)).resolves.toEqual({ identityToken: 'refresh-me' });
    });

    it('treats "credentials not found" from every key as anonymous', async () => {
      const h = helper('echo "credentials not found in native keychain"; exit 1');
      const kc = keychain(h, { credsStore: h.name });
      await expect(kc.resolve(target)).resolves.toBeUndefined();
    });

    it('fails the lookup when a helper fails otherwise', async () => {
      const h = helper('echo "keychain locked"; exit 3');
      const kc = keychain(h, { credsStore: h.name });
      const err = (await kc.resolve(target).catch((e: unknown) => e)) as RegistryError;
      expect(err).toBeInstanceOf(RegistryError);
      expect(err.kind).toBe('CREDENTIALS');
      expect(err.message).toContain('exit status 3: keychain locked');
    });

    it('fails when the configured helper is not installed', async () => {
      const kc = keychain({ env: { PATH: dir() }, name: 'missing' }, { credsStore: 'missing' });
      await expect(kc.resolve(target)).rejects.toThrow(/docker-credential-missing get .*ENOENT/);
    });

    it('kills a helper that does not answer in time', async () => {
      const h = helper('sleep 30');
      const cfg = dir();
      writeJSON(join(cfg, 'config.json'), { credsStore: h.name });
      const kc = new DockerConfigKeychain({
        env: { ...h.env, DOCKER_CONFIG: cfg },
        home: dir(),
        helperTimeoutMs: 200,
      });
      const started = Date.now();
      await expect(kc.resolve(target)).rejects.toThrow(RegistryError);
      expect(Date.now() - started).toBeLessThan(5_000);
    });
  });
});

describe('multiKeychain', () => {
  const fixed = (creds: RegistryCredentials | undefined, calls: string[], name: string) => ({
    resolve: async () => {
      calls.push(name);
      return creds;
    },
  });

  it('returns the first non-anonymous answer in order', async () => {
    const calls: string[] = [];
    const kc = multiKeychain(
      fixed(undefined, calls, 'a'),
      fixed({}, calls, 'b'),
      fixed({ username: 'u', password: 'p' }, calls, 'c'),
      fixed({ username: 'x', password: 'y' }, calls, 'd'),
    );
    await expect(kc.resolve(target)).resolves.toEqual({ username: 'u', password: 'p' });
    expect(calls).toEqual(['a', 'b', 'c']);
  });

  it('stops at the first keychain error', async () => {
    const calls: string[] = [];
    const boom = new Error('broken keychain');
    const kc = multiKeychain(
      {
        resolve: async () => {
          throw boom;
        },
      },
      fixed({ username: 'u', password: 'p' }, calls, 'next'),
    );
    await expect(kc.resolve(target)).rejects.toBe(boom);
    expect(calls).toEqual([]);
  });
});

describe('GoogleKeychain', () => {
  it.each([
    ['gcr.io', true],
    ['eu.gcr.io', true],
    ['europe-docker.pkg.dev', true],
    ['us-central1-docker.pkg.dev', true],
    ['source.google.com', true],
    ['gcr.io.evil.com', false],
    ['pkg.dev', false],
    ['127.0.0.1:5000', false],
  ])('isGoogleRegistry(%s) = %s', (host, want) => {
    expect(isGoogleRegistry(host)).toBe(want);
  });

  it('asks its token source only for Google hosts and yields _token / <access token>', async () => {
    let calls = 0;
    const kc = new GoogleKeychain({
      tokenSource: async () => {
        calls++;
        return 'ya29.access';
      },
    });
    await expect(kc.resolve(target)).resolves.toBeUndefined();
    expect(calls).toBe(0);
    await expect(
      kc.resolve({ registry: 'europe-docker.pkg.dev', repository: 'europe-docker.pkg.dev/p/r/vk-a' }),
    ).resolves.toEqual({ username: '_token', password: 'ya29.access' });
    expect(calls).toBe(1);
  });

  it('is anonymous (with a warning, no secret) when ADC fails, and backs off before trying again', async () => {
    let calls = 0;
    const warnings: unknown[] = [];
    const kc = new GoogleKeychain({
      tokenSource: async () => {
        calls++;
        throw new Error('could not load the default credentials');
      },
      logger: { debug: () => {}, warn: (obj, msg) => warnings.push({ obj, msg }) },
    });
    const gcr = { registry: 'gcr.io', repository: 'gcr.io/p/vk-a' };
    await expect(kc.resolve(gcr)).resolves.toBeUndefined();
    await expect(kc.resolve(gcr)).resolves.toBeUndefined();
    expect(calls).toBe(1);
    expect(warnings).toHaveLength(1);
  });

  it('gets a real ADC token through google-auth-library (external_account credentials, fake STS endpoint)', async () => {
    const sts = await startServer((req, res) => {
      const form = new URLSearchParams(req.body);
      const ok =
        req.method === 'POST' &&
        form.get('subject_token') === 'subject-jwt' &&
        (form.get('scope') ?? '').includes('https://www.googleapis.com/auth/cloud-platform');
      res.writeHead(ok ? 200 : 400, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify(
          ok
            ? {
                access_token: 'ya29.from-sts',
                issued_token_type: 'urn:ietf:params:oauth:token-type:access_token',
                token_type: 'Bearer',
                expires_in: 3600,
              }
            : { error: 'invalid_request' },
        ),
      );
    });
    cleanups.push(() => sts.close());
    const d = dir();
    writeFileSync(join(d, 'subject'), 'subject-jwt');
    writeJSON(join(d, 'adc.json'), {
      type: 'external_account',
      audience: '//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/prov',
      subject_token_type: 'urn:ietf:params:oauth:token-type:jwt',
      token_url: `http://${sts.authority}/v1/token`,
      credential_source: { file: join(d, 'subject') },
    });
    vi.stubEnv('GOOGLE_APPLICATION_CREDENTIALS', join(d, 'adc.json'));
    vi.stubEnv('GOOGLE_CLOUD_PROJECT', 'test-project'); // skip the project-id lookup, which needs the internet
    const kc = new GoogleKeychain();
    const gar = { registry: 'asia-docker.pkg.dev', repository: 'asia-docker.pkg.dev/proj/repo/vk-a' };
    await expect(kc.resolve(gar)).resolves.toEqual({ username: '_token', password: 'ya29.from-sts' });
    await expect(kc.resolve(gar)).resolves.toEqual({ username: '_token', password: 'ya29.from-sts' });
    expect(sts.requests).toHaveLength(1); // the library caches the token
  });
});
