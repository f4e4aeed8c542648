/**
 * Naming rules of the registry client: how `OCI_REGISTRY` splits into registry host and path prefix,
 * which repository/reference strings are valid, and which hosts may be reached over plain HTTP.
 * Mirrors go-containerregistry v0.21.7 `pkg/name` as used by cocoon-common `parseRef`
 * (docs/wire-contract.md#oci-registry).
 */
import { BlockList, isIP } from 'node:net';
import { RegistryError } from './types.js';

/** Registry used when the first segment of the base is not a host (ggcr `name.DefaultRegistry`). */
export const DOCKER_HUB_REGISTRY = 'index.docker.io';

/** `OCI_REGISTRY` split into its parts. */
export interface RegistryBase {
  /** `host[:port]` exactly as written (`docker.io` is rewritten to `index.docker.io`). */
  registry: string;
  /** Repository prefix without leading/trailing slashes; may be empty. */
  path: string;
}

/** A validated manifest address. */
export interface ManifestRef {
  registry: string;
  /** Repository path under the registry (`<path>/<name>`), used in URLs and token scopes. */
  repository: string;
  /** Tag or digest, as it goes into `/v2/<repository>/manifests/<reference>`. */
  reference: string;
  kind: 'tag' | 'digest';
}

const REPOSITORY_CHARS = /^[a-z0-9_./-]+$/;
const TAG = /^[A-Za-z0-9_.-]{1,128}$/;
const DIGEST = /^sha256:[0-9a-f]{64}$/;

/**
 * Splits an `OCI_REGISTRY` value (`host[:port][/path...]`). The first segment is the registry when it
 * contains `.` or `:` or equals `localhost`; otherwise the whole value is a Docker Hub repository path
 * (docs/wire-contract.md#oci-registry). Throws a NAME_INVALID RegistryError for an empty value or one
 * carrying a URL scheme.
 */
export function parseRegistryBase(base: string): RegistryBase {
  const trimmed = base.trim().replace(/\/+$/, '');
  if (trimmed === '') throw invalidName('registry base is empty');
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(trimmed)) {
    throw invalidName(`registry base ${JSON.stringify(base)} must be host[:port][/path] without a scheme`);
  }
  const slash = trimmed.indexOf('/');
  const first = slash < 0 ? trimmed : trimmed.slice(0, slash);
  const rest = slash < 0 ? '' : trimmed.slice(slash + 1);
  if (first.includes('.') || first.includes(':') || first === 'localhost') {
    checkAuthority(first);
    return { registry: first === 'docker.io' ? DOCKER_HUB_REGISTRY : first, path: rest };
  }
  return { registry: DOCKER_HUB_REGISTRY, path: trimmed };
}

/**
 * Builds and validates the manifest address for `name` (a VM name) and `reference` under `base`.
 * A reference containing `:` is a digest (`sha256:<64 hex>`), anything else a tag
 * (`[A-Za-z0-9_.-]{1,128}`). The repository must be `[a-z0-9_./-]`, 2–255 characters; a single-segment
 * Docker Hub repository gets the `library/` prefix. Throws a NAME_INVALID RegistryError before any I/O.
 */
export function manifestRef(base: RegistryBase, name: string, reference: string): ManifestRef {
  let repository = base.path === '' ? name : `${base.path}/${name}`;
  if (base.registry === DOCKER_HUB_REGISTRY && !repository.includes('/'))
    repository = `library/${repository}`;
  if (repository.length < 2 || repository.length > 255 || !REPOSITORY_CHARS.test(repository)) {
    throw invalidName(`repository ${JSON.stringify(repository)} must match [a-z0-9_./-]{2,255}`);
  }
  if (repository.split('/').some((segment) => segment === '')) {
    throw invalidName(`repository ${JSON.stringify(repository)} has an empty path segment`);
  }
  if (reference.includes(':')) {
    if (!DIGEST.test(reference))
      throw invalidName(`digest ${JSON.stringify(reference)} must be sha256:<64 hex>`);
    return { registry: base.registry, repository, reference, kind: 'digest' };
  }
  if (!TAG.test(reference))
    throw invalidName(`tag ${JSON.stringify(reference)} must match [A-Za-z0-9_.-]{1,128}`);
  return { registry: base.registry, repository, reference, kind: 'tag' };
}

/**
 * Whether plain HTTP may be used for `registry` (`host[:port]`) — ggcr `name.Registry.Scheme() == "http"`:
 * an RFC1918 IPv4 address, `localhost:<port>`, a `*.local` / `*.localhost` name (optional port), or any
 * name containing `127.0.0.1` or `::1`. For such hosts HTTPS is still tried first
 * (docs/wire-contract.md#oci-registry); everything else (including bare `localhost` and cluster DNS names) is
 * HTTPS-only.
 */
export function allowsHttpFallback(registry: string): boolean {
  return (
    isRFC1918(registry) ||
    registry.startsWith('localhost:') ||
    /.*\.local(?:host)?(?::\d{1,5})?$/.test(registry) ||
    registry.includes('127.0.0.1') ||
    registry.includes('::1')
  );
}

function isRFC1918(registry: string): boolean {
  const host = registry.split(':')[0] ?? '';
  return isIP(host) === 4 && RFC1918.check(host, 'ipv4');
}

const RFC1918 = new BlockList();
RFC1918.addSubnet('10.0.0.0', 8, 'ipv4');
RFC1918.addSubnet('172.16.0.0', 12, 'ipv4');
RFC1918.addSubnet('192.168.0.0', 16, 'ipv4');

const NON_PUBLIC = new BlockList();
NON_PUBLIC.addSubnet('127.0.0.0', 8, 'ipv4');
NON_PUBLIC.addSubnet('10.0.0.0', 8, 'ipv4');
NON_PUBLIC.addSubnet('172.16.0.0', 12, 'ipv4');
NON_PUBLIC.addSubnet('192.168.0.0', 16, 'ipv4');
NON_PUBLIC.addSubnet('169.254.0.0', 16, 'ipv4');
NON_PUBLIC.addSubnet('0.0.0.0', 8, 'ipv4');
NON_PUBLIC.addAddress('::1', 'ipv6');
NON_PUBLIC.addAddress('::', 'ipv6');
NON_PUBLIC.addSubnet('fc00::', 7, 'ipv6');
NON_PUBLIC.addSubnet('fe80::', 10, 'ipv6');

/**
 * Whether `hostname` (as in `URL.hostname`, IPv6 possibly bracketed) is an IP literal in a loopback,
 * private or link-local range. Names are never "private" here: the guard is about literals
 * (docs/wire-contract.md#oci-registry).
 */
export function isNonPublicIPLiteral(hostname: string): boolean {
  const h = hostname.startsWith('[') && hostname.endsWith(']') ? hostname.slice(1, -1) : hostname;
  const family = isIP(h);
  if (family === 4) return NON_PUBLIC.check(h, 'ipv4');
  if (family === 6) {
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(h);
    if (mapped) return NON_PUBLIC.check(mapped[1]!, 'ipv4');
    return NON_PUBLIC.check(h, 'ipv6');
  }
  return false;
}

/** `host:port` of a URL with the scheme's default port filled in, for same-host comparisons. */
export function hostPort(url: URL): string {
  const port = url.port || (url.protocol === 'https:' ? '443' : url.protocol === 'http:' ? '80' : '');
  return `${url.hostname.toLowerCase()}:${port}`;
}

function checkAuthority(registry: string): void {
  let ok = false;
  try {
    ok = new URL(`http://${registry}/`).host !== '' && !/[/?#@\s]/.test(registry);
  } catch {
    ok = false;
  }
  if (!ok) throw invalidName(`registry ${JSON.stringify(registry)} is not a valid host[:port]`);
}

function invalidName(message: string): RegistryError {
  return new RegistryError(message, { kind: 'NAME_INVALID', retryable: false });
}
