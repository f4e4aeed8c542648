/**
 * Pure naming rules of the registry client: OCI_REGISTRY parsing, repository/reference validation,
 * the HTTP-fallback host list, private-address literals and WWW-Authenticate parsing
 * (docs/wire-contract.md#oci-registry).
 */
import { describe, expect, it } from 'vitest';
import { challengeScopes, parseChallenges, pickChallenge } from '../../src/registry/challenge.js';
import { registryFromEnv } from '../../src/registry/client.js';
import {
  allowsHttpFallback,
  isNonPublicIPLiteral,
  manifestRef,
  parseRegistryBase,
} from '../../src/registry/reference.js';
import { RegistryError } from '../../src/registry/types.js';

describe('parseRegistryBase', () => {
  it.each([
    ['asia-docker.pkg.dev/proj/repo', { registry: 'asia-docker.pkg.dev', path: 'proj/repo' }],
    ['127.0.0.1:5000', { registry: '127.0.0.1:5000', path: '' }],
    ['127.0.0.1:5000/', { registry: '127.0.0.1:5000', path: '' }],
    ['localhost/snaps', { registry: 'localhost', path: 'snaps' }],
    ['registry.registry.svc:5000/a/b', { registry: 'registry.registry.svc:5000', path: 'a/b' }],
    ['[::1]:5000/x', { registry: '[::1]:5000', path: 'x' }],
    ['docker.io/org', { registry: 'index.docker.io', path: 'org' }],
    ['myorg/snaps', { registry: 'index.docker.io', path: 'myorg/snaps' }],
  ])('%s', (base, want) => {
    expect(parseRegistryBase(base)).toEqual(want);
  });

  it.each(['', '   ', 'https://registry.example.com/x', 'bad host:5000/x'])('rejects %j', (base) => {
    expect(() => parseRegistryBase(base)).toThrow(RegistryError);
  });
});

describe('manifestRef', () => {
  const base = parseRegistryBase('reg.example.com/cocoon');

  it('joins path and name and keeps the tag', () => {
    expect(manifestRef(base, 'vk-ns-cs-0', 'hibernate')).toEqual({
      registry: 'reg.example.com',
      repository: 'cocoon/vk-ns-cs-0',
      reference: 'hibernate',
      kind: 'tag',
    });
  });

  it('treats a reference with a colon as a digest', () => {
    const digest = `sha256:${'0'.repeat(64)}`;
    expect(manifestRef(base, 'vk-a', digest)).toMatchObject({ reference: digest, kind: 'digest' });
  });

  it('prefixes library/ for a single-segment Docker Hub repository', () => {
    expect(manifestRef(parseRegistryBase('docker.io'), 'vk-a', 'latest').repository).toBe('library/vk-a');
  });

  it.each([
    ['VK-upper', 'hibernate'],
    ['vk a', 'hibernate'],
    ['vk-a', ''],
    ['vk-a', 'bad/tag'],
    ['vk-a', 'x'.repeat(129)],
    ['vk-a', 'sha256:short'],
    ['a//b', 'latest'],
  ])('rejects name %j with reference %j', (name, ref) => {
    try {
      manifestRef(base, name, ref);
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(RegistryError);
      expect((err as RegistryError).kind).toBe('NAME_INVALID');
    }
  });

  it('limits the repository to 255 characters', () => {
    expect(() => manifestRef(parseRegistryBase('r.io'), 'a'.repeat(255), 'latest')).not.toThrow();
    expect(() => manifestRef(parseRegistryBase('r.io/p'), 'a'.repeat(254), 'latest')).toThrow(RegistryError);
  });
});

describe('allowsHttpFallback (ggcr name.Registry.Scheme)', () => {
  it.each([
    '127.0.0.1',
    '127.0.0.1:5000',
    'localhost:5000',
    'registry.local',
    'registry.local:5000',
    'dev.localhost:8080',
    '10.1.2.3',
    '10.1.2.3:443',
    '172.16.0.1:5000',
    '172.31.255.255',
    '192.168.1.10:5000',
    '[::1]:5000',
  ])('allows plain HTTP for %s', (host) => {
    expect(allowsHttpFallback(host)).toBe(true);
  });

  it.each([
    'localhost',
    'registry.registry.svc:5000',
    'asia-docker.pkg.dev',
    '172.32.0.1:5000',
    '11.0.0.1',
    '127.0.0.2:5000',
    'gcr.io',
    'registry.locals',
  ])('requires HTTPS for %s', (host) => {
    expect(allowsHttpFallback(host)).toBe(false);
  });
});

describe('isNonPublicIPLiteral', () => {
  it.each([
    '127.0.0.1',
    '10.0.0.1',
    '172.20.1.1',
    '192.168.0.1',
    '169.254.169.254',
    '[::1]',
    '[fe80::1]',
    '[fd00::1]',
  ])('%s is non-public', (h) => expect(isNonPublicIPLiteral(h)).toBe(true));
  it.each(['8.8.8.8', 'example.com', 'localhost', '[2001:db8::1]'])('%s is not a non-public literal', (h) =>
    expect(isNonPublicIPLiteral(h)).toBe(false),
  );
});

describe('parseChallenges', () => {
  it('parses a distribution Bearer challenge', () => {
    const [c, ...rest] = parseChallenges(
      'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:samalba/my-app:pull,push"',
    );
    expect(rest).toEqual([]);
    expect(c).toEqual({
      scheme: 'Bearer',
      params: {
        realm: 'https://auth.docker.io/token',
        service: 'registry.docker.io',
        scope: 'repository:samalba/my-app:pull,push',
      },
    });
  });

  it('splits several challenges, in one line or several', () => {
    const oneLine = parseChallenges('Negotiate abc==, Basic realm="r", Bearer realm="https://t", service=s');
    expect(oneLine.map((c) => c.scheme)).toEqual(['Negotiate', 'Basic', 'Bearer']);
    expect(oneLine[0]!.token68).toBe('abc==');
    expect(oneLine[2]!.params).toEqual({ realm: 'https://t', service: 's' });
    const lines = parseChallenges(['Basic realm="a"', 'Bearer realm="https://t"']);
    expect(lines.map((c) => c.scheme)).toEqual(['Basic', 'Bearer']);
  });

  it('lower-cases parameter names, unescapes quoted strings and tolerates whitespace', () => {
    const [c] = parseChallenges('bearer  Realm = "https://x/\\"q\\"" ,  Service=svc');
    expect(c).toEqual({ scheme: 'bearer', params: { realm: 'https://x/"q"', service: 'svc' } });
  });

  it('returns nothing for an empty or missing header', () => {
    expect(parseChallenges(undefined)).toEqual([]);
    expect(parseChallenges('')).toEqual([]);
    expect(parseChallenges(' , ')).toEqual([]);
  });

  it('picks Basic or Bearer over other schemes and reads the scope list', () => {
    const picked = pickChallenge(
      parseChallenges('Negotiate, Bearer realm="https://t",scope="a:b:pull c:d:push"'),
    );
    expect(picked?.scheme).toBe('Bearer');
    expect(challengeScopes(picked)).toEqual(['a:b:pull', 'c:d:push']);
    expect(pickChallenge(parseChallenges('Digest realm="x"'))?.scheme).toBe('Digest');
    expect(challengeScopes(undefined)).toEqual([]);
  });
});

describe('registryFromEnv', () => {
  it('requires OCI_REGISTRY', () => {
    expect(() => registryFromEnv({})).toThrow('OCI_REGISTRY must be set');
    expect(() => registryFromEnv({ OCI_REGISTRY: ' ' })).toThrow('OCI_REGISTRY must be set');
    const c = registryFromEnv({ OCI_REGISTRY: '127.0.0.1:5000/snaps' });
    expect(c.base).toEqual({ registry: '127.0.0.1:5000', path: 'snaps' });
    c.close();
  });
});
