/**
 * OCI distribution client for the two calls the operator makes (HEAD and DELETE of a manifest by tag),
 * reproducing go-containerregistry v0.21.7 as wired by cocoon-common `oci.NewOCIRegistry`
 * (docs/wire-contract.md#oci-registry): `/v2/` ping with HTTPS→HTTP fallback for local hosts, Basic or
 * Bearer auth per the challenge, token exchange with per-repository scopes, one refresh-and-retry on a
 * 401, the reference retry table, 404 tolerance, and the 200-header checks on HEAD.
 *
 * Deliberate deviations (points where matching the reference is a port's choice):
 * - Only successful handshakes are cached (one per client), and DELETE reuses them; a failed ping or
 *   token exchange is retried on the next call instead of sticking until restart.
 * - Tokens are cached per repository and scope set until shortly before `expires_in` runs out.
 * - Every HTTP attempt has a timeout (default 30 s) and retry waits are abortable.
 * - HTTP(S)_PROXY environment variables are not honoured.
 */
import { STATUS_CODES } from 'node:http';
import { challengeScopes, parseChallenges, pickChallenge } from './challenge.js';
import {
  defaultKeychain,
  type Keychain,
  type RegistryCredentials,
  type RegistryLogger,
} from './credentials.js';
import {
  DEFAULT_RETRY,
  type HttpRequest,
  type HttpResponse,
  HttpTransport,
  isRetryableStatus,
  type RetryPolicy,
  redactURL,
} from './http.js';
import {
  allowsHttpFallback,
  hostPort,
  isNonPublicIPLiteral,
  manifestRef,
  parseRegistryBase,
  type RegistryBase,
} from './reference.js';
import { type Registry, type RegistryCallOptions, RegistryError } from './types.js';

/** Accept header of the manifest HEAD, byte-exact with the reference (docs/wire-contract.md#oci-registry). */
export const MANIFEST_ACCEPT = [
  'application/vnd.docker.distribution.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.v1+prettyjws',
  'application/vnd.docker.distribution.manifest.v2+json',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.oci.image.index.v1+json',
].join(',');

/** Token-scope actions per call (docs/wire-contract.md#oci-registry). */
export const PULL_ACTIONS = 'pull';
export const DELETE_ACTIONS = 'push,pull,delete';

/** Per-attempt HTTP timeout when none is configured (a deviation: the reference has none). */
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;
/**
 * Delay before the plain-HTTP ping joins the HTTPS one for local hosts (docs/wire-contract.md#oci-registry).
 */
export const HTTP_FALLBACK_DELAY_MS = 300;
/** Token lifetime assumed when the token server sends no `expires_in` (distribution token spec). */
const DEFAULT_TOKEN_LIFETIME_S = 60;
/** Token-server responses above this size are rejected (docs/wire-contract.md#oci-registry). */
const TOKEN_BODY_LIMIT = 64 * 1024;
/** `client_id` of the OAuth2 refresh-token grant (docs/wire-contract.md#oci-registry). */
const OAUTH_CLIENT_ID = 'go-containerregistry';
const USER_AGENT = 'cocoon-operator-ts';
const REDACTED = '<redacted>';

export interface OCIRegistryClientOptions {
  /** Credential source (default: Google ADC for Google hosts, then docker config). */
  keychain?: Keychain;
  /** Timeout of each HTTP attempt in ms (default 30 000). */
  timeoutMs?: number;
  /** Retry schedule of each HTTP request (default 3 attempts, 1 s then 3 s). */
  retry?: Partial<RetryPolicy>;
  /** Structured logger; receives no secrets. */
  logger?: RegistryLogger;
  /** How long resolved credentials are reused before the keychain is asked again (default 5 min). */
  credentialTtlMs?: number;
  /** PEM CA certificate(s) trusted for HTTPS in addition to the system roots (private registry CAs, tests). */
  extraCA?: string | string[];
  /** Override of the 300 ms HTTPS→HTTP ping head start (tests). */
  httpFallbackDelayMs?: number;
}

type Scheme = 'http' | 'https';
type Handshake =
  | { scheme: Scheme; mode: 'basic' }
  | { scheme: Scheme; mode: 'bearer'; realm: URL; service: string | undefined };

interface TokenEntry {
  token: string;
  /** Epoch ms after which the token is not used any more. */
  expiresAt: number;
}

/**
 * The production {@link Registry}: one instance per process, shared by all activities.
 * `base` is the `OCI_REGISTRY` value `host[:port][/path...]`; the repository of VM `name` is
 * `<path>/<name>`. Throws a NAME_INVALID RegistryError for an unusable base.
 */
export class OCIRegistryClient implements Registry {
  readonly base: RegistryBase;
  private readonly keychain: Keychain;
  private readonly logger: RegistryLogger | undefined;
  private readonly transport: HttpTransport;
  private readonly credentialTtlMs: number;
  private readonly fallbackDelayMs: number;
  private handshake: Promise<Handshake> | undefined;
  private readonly tokens = new Map<string, TokenEntry>();
  private readonly tokenFlights = new Map<string, Promise<TokenEntry>>();
  private readonly refreshTokens = new Map<string, string>();
  private readonly creds = new Map<string, { value: RegistryCredentials | undefined; at: number }>();
  private readonly secrets = new Set<string>();

  constructor(base: string, opts: OCIRegistryClientOptions = {}) {
    this.base = parseRegistryBase(base);
    this.logger = opts.logger;
    this.keychain = opts.keychain ?? defaultKeychain(opts.logger);
    this.credentialTtlMs = opts.credentialTtlMs ?? 5 * 60_000;
    this.fallbackDelayMs = opts.httpFallbackDelayMs ?? HTTP_FALLBACK_DELAY_MS;
    this.transport = new HttpTransport({
      timeoutMs: opts.timeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
      retry: { ...DEFAULT_RETRY, ...opts.retry },
      userAgent: USER_AGENT,
      extraCA: opts.extraCA,
      onRetry: (info) =>
        this.logger?.debug({ registry: this.base.registry, ...info }, 'registry request retry'),
    });
  }

  /** Closes pooled connections (tests and shutdown). */
  close(): void {
    this.transport.close();
  }

  /** See {@link Registry.hasManifest}. Errors read `head manifest <name>:<reference>: <detail>`. */
  async hasManifest(name: string, reference: string, opts: RegistryCallOptions = {}): Promise<boolean> {
    const label = `head manifest ${name}:${reference}`;
    try {
      const ref = manifestRef(this.base, name, reference);
      const res = await this.send(
        ref.repository,
        PULL_ACTIONS,
        {
          method: 'HEAD',
          path: manifestPath(ref.repository, ref.reference),
          headers: { accept: MANIFEST_ACCEPT },
        },
        opts.signal,
      );
      if (res.status === 404) return false;
      if (res.status !== 200) throw this.statusError(res, 'HEAD');
      checkManifestHeaders(res);
      return true;
    } catch (err) {
      throw wrap(label, err);
    }
  }

  /** See {@link Registry.manifestAnnotations}. Errors read `get manifest <name>:<reference>: <detail>`. */
  async manifestAnnotations(
    name: string,
    reference: string,
    opts: RegistryCallOptions = {},
  ): Promise<Record<string, string> | undefined> {
    const label = `get manifest ${name}:${reference}`;
    try {
      const ref = manifestRef(this.base, name, reference);
      const res = await this.send(
        ref.repository,
        PULL_ACTIONS,
        {
          method: 'GET',
          path: manifestPath(ref.repository, ref.reference),
          headers: { accept: MANIFEST_ACCEPT },
        },
        opts.signal,
      );
      if (res.status === 404) return undefined;
      if (res.status !== 200) throw this.statusError(res, 'GET');
      if (res.truncated)
        throw new RegistryError('manifest larger than 16 KiB', {
          kind: 'HTTP',
          retryable: false,
          status: 200,
        });
      const doc = JSON.parse(res.body) as { annotations?: unknown };
      const out: Record<string, string> = {};
      if (doc.annotations && typeof doc.annotations === 'object')
        for (const [k, v] of Object.entries(doc.annotations)) if (typeof v === 'string') out[k] = v;
      return out;
    } catch (err) {
      throw wrap(label, err);
    }
  }

  /** See {@link Registry.deleteManifest}. Errors read `delete manifest <name>:<reference>: <detail>`. */
  async deleteManifest(name: string, reference: string, opts: RegistryCallOptions = {}): Promise<void> {
    const label = `delete manifest ${name}:${reference}`;
    try {
      const ref = manifestRef(this.base, name, reference);
      const res = await this.send(
        ref.repository,
        DELETE_ACTIONS,
        { method: 'DELETE', path: manifestPath(ref.repository, ref.reference) },
        opts.signal,
      );
      if (res.status === 200 || res.status === 202 || res.status === 404) return;
      throw this.statusError(res, 'DELETE');
    } catch (err) {
      throw wrap(label, err);
    }
  }

  // -------------------------------------------------------------------------------------------------
  // Authenticated request

  private async send(
    repository: string,
    actions: string,
    req: { method: 'HEAD' | 'GET' | 'DELETE'; path: string; headers?: Record<string, string> },
    signal?: AbortSignal,
  ): Promise<HttpResponse> {
    const hs = await this.getHandshake(signal);
    const url = new URL(`${hs.scheme}://${this.base.registry}${req.path}`);
    const registryHost = hostPort(url);
    const request = (authorization: string | undefined): HttpRequest => ({
      method: req.method,
      url,
      headers: req.headers,
      authorization: (u) => (hostPort(u) === registryHost ? authorization : undefined),
      checkRedirect: refusePrivateHop,
    });

    if (hs.mode === 'basic') {
      const creds = await raceAbort(this.credentials(repository), signal);
      const res = await this.transport.request(request(basicAuthorization(creds)), signal);
      if (res.status === 401) this.handshake = undefined; // auth setup may have changed: ping again next call
      return res;
    }

    const scopes = [`repository:${repository}:${actions}`];
    const key = `${repository} ${scopes.join(' ')}`;
    const first = await raceAbort(this.token(hs, repository, key, scopes, false), signal);
    const res = await this.transport.request(request(`Bearer ${first.token}`), signal);
    if (res.status !== 401) return res;
    const challenge = pickChallenge(parseChallenges(res.headersDistinct['www-authenticate']));
    if (challenge?.scheme.toLowerCase() !== 'bearer') {
      this.handshake = undefined;
      return res;
    }
    const widened = [...new Set([...challengeScopes(challenge), ...scopes])];
    const second = await raceAbort(this.token(hs, repository, key, widened, true), signal);
    const retried = await this.transport.request(request(`Bearer ${second.token}`), signal);
    if (retried.status === 401) this.handshake = undefined;
    return retried;
  }

  // -------------------------------------------------------------------------------------------------
  // Ping

  private getHandshake(signal?: AbortSignal): Promise<Handshake> {
    if (!this.handshake) {
      const flight = this.ping().catch((err: unknown) => {
        if (this.handshake === flight) this.handshake = undefined;
        throw err;
      });
      this.handshake = flight;
    }
    return raceAbort(this.handshake, signal);
  }

  /**
   * HTTPS ping; for local hosts HTTP joins after the head start or as soon as HTTPS fails
   * (docs/wire-contract.md#oci-registry).
   */
  private async ping(): Promise<Handshake> {
    if (!allowsHttpFallback(this.base.registry)) return this.pingScheme('https');
    const https = new AbortController();
    const http = new AbortController();
    const hs = await new Promise<Handshake>((resolve, reject) => {
      const errors: unknown[] = [];
      let httpStarted = false;
      let done = false;
      const finish = (scheme: Scheme) => (result: Handshake) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        (scheme === 'https' ? http : https).abort();
        resolve(result);
      };
      const failed = (scheme: Scheme) => (err: unknown) => {
        if (done) return;
        errors.push(err);
        if (scheme === 'https') startHttp();
        if (errors.length === 2) {
          done = true;
          reject(joinErrors(errors));
        }
      };
      const startHttp = () => {
        if (httpStarted || done) return;
        httpStarted = true;
        clearTimeout(timer);
        this.pingScheme('http', http.signal).then(finish('http'), failed('http'));
      };
      const timer = setTimeout(startHttp, this.fallbackDelayMs);
      this.pingScheme('https', https.signal).then(finish('https'), failed('https'));
    });
    return hs;
  }

  private async pingScheme(scheme: Scheme, signal?: AbortSignal): Promise<Handshake> {
    const url = new URL(`${scheme}://${this.base.registry}/v2/`);
    const res = await this.transport.request({ method: 'GET', url, checkRedirect: refusePrivateHop }, signal);
    if (res.status === 200) return this.remember({ scheme, mode: 'basic' });
    if (res.status !== 401) throw this.statusError(res, 'GET', `ping ${redactURL(url)}`);
    const challenge = pickChallenge(parseChallenges(res.headersDistinct['www-authenticate']));
    if (!challenge || challenge.scheme.toLowerCase() === 'basic')
      return this.remember({ scheme, mode: 'basic' });
    if (challenge.scheme.toLowerCase() !== 'bearer') {
      throw protocolError(
        `ping ${redactURL(url)}: unrecognized challenge ${JSON.stringify(challenge.scheme)}`,
      );
    }
    const realm = checkRealm(challenge.params.realm, scheme, url);
    return this.remember({ scheme, mode: 'bearer', realm, service: challenge.params.service });
  }

  private remember(hs: Handshake): Handshake {
    this.logger?.debug(
      {
        registry: this.base.registry,
        scheme: hs.scheme,
        auth: hs.mode,
        realm: hs.mode === 'bearer' ? redactURL(hs.realm) : undefined,
      },
      'registry handshake',
    );
    return hs;
  }

  // -------------------------------------------------------------------------------------------------
  // Credentials and tokens

  private async credentials(repository: string): Promise<RegistryCredentials | undefined> {
    const target = { registry: this.base.registry, repository: `${this.base.registry}/${repository}` };
    const hit = this.creds.get(target.repository);
    if (hit && Date.now() - hit.at < this.credentialTtlMs) return hit.value;
    let value: RegistryCredentials | undefined;
    try {
      value = await this.keychain.resolve(target);
    } catch (err) {
      if (err instanceof RegistryError) throw err;
      throw new RegistryError(
        `resolve credentials for ${target.repository}: ${(err as Error)?.message ?? err}`,
        {
          kind: 'CREDENTIALS',
          retryable: false,
          cause: err,
        },
      );
    }
    if (value) {
      for (const secret of [value.password, value.identityToken, value.registryToken]) this.addSecret(secret);
      if (value.username && value.password) {
        this.addSecret(Buffer.from(`${value.username}:${value.password}`).toString('base64'));
      }
    }
    this.creds.set(target.repository, { value, at: Date.now() });
    return value;
  }

  /** Cached token for `key`, or one fetched for `scopes` (single flight per key; `force` skips the cache). */
  private token(
    hs: Extract<Handshake, { mode: 'bearer' }>,
    repository: string,
    key: string,
    scopes: string[],
    force: boolean,
  ): Promise<TokenEntry> {
    const cached = this.tokens.get(key);
    if (!force && cached && cached.expiresAt > Date.now()) return Promise.resolve(cached);
    const inFlight = this.tokenFlights.get(key);
    if (inFlight && !force) return inFlight;
    const flight = this.fetchToken(hs, repository, scopes)
      .then((entry) => {
        this.tokens.set(key, entry);
        return entry;
      })
      .finally(() => {
        if (this.tokenFlights.get(key) === flight) this.tokenFlights.delete(key);
      });
    this.tokenFlights.set(key, flight);
    return flight;
  }

  private async fetchToken(
    hs: Extract<Handshake, { mode: 'bearer' }>,
    repository: string,
    scopes: string[],
  ): Promise<TokenEntry> {
    const creds = await this.credentials(repository);
    if (creds?.registryToken) return { token: creds.registryToken, expiresAt: Number.POSITIVE_INFINITY };
    const realmHost = hostPort(hs.realm);
    const basic = creds?.username && creds.password ? basicAuthorization(creds) : undefined;
    const checkRedirect = (_from: URL, to: URL) => {
      checkRealm(to.href, hs.scheme, new URL(`${hs.scheme}://${this.base.registry}/v2/`));
    };

    let res: HttpResponse | undefined;
    const refreshToken = this.refreshTokens.get(repository) ?? creds?.identityToken;
    if (refreshToken) {
      const form = new URLSearchParams({
        grant_type: 'refresh_token',
        refresh_token: refreshToken,
        client_id: OAUTH_CLIENT_ID,
        scope: scopes.join(' '),
      });
      if (hs.service !== undefined) form.set('service', hs.service);
      res = await this.transport.request({
        method: 'POST',
        url: hs.realm,
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: form.toString(),
        checkRedirect,
        bodyLimit: TOKEN_BODY_LIMIT + 1,
      });
      if (res.status === 404) res = undefined; // token server without the OAuth2 form: use GET
    }
    if (!res) {
      const url = new URL(hs.realm);
      for (const scope of scopes) url.searchParams.append('scope', scope);
      if (hs.service !== undefined) url.searchParams.set('service', hs.service);
      res = await this.transport.request({
        method: 'GET',
        url,
        authorization: (u) => (hostPort(u) === realmHost ? basic : undefined),
        checkRedirect,
        bodyLimit: TOKEN_BODY_LIMIT + 1,
      });
    }
    const label = `fetch token ${redactURL(hs.realm)}`;
    if (res.status !== 200) throw this.statusError(res, 'GET', label);
    if (res.truncated || res.body.length > TOKEN_BODY_LIMIT) {
      throw protocolError(`${label}: response larger than ${TOKEN_BODY_LIMIT} bytes`);
    }
    let body: { token?: unknown; access_token?: unknown; refresh_token?: unknown; expires_in?: unknown };
    try {
      body = JSON.parse(res.body) as typeof body;
    } catch {
      throw protocolError(`${label}: response is not JSON`);
    }
    const token =
      typeof body.token === 'string' && body.token !== ''
        ? body.token
        : typeof body.access_token === 'string'
          ? body.access_token
          : '';
    if (token === '') throw protocolError(`${label}: response has neither token nor access_token`);
    this.addSecret(token);
    if (typeof body.refresh_token === 'string' && body.refresh_token !== '') {
      this.addSecret(body.refresh_token);
      this.refreshTokens.set(repository, body.refresh_token);
    }
    const lifetimeS =
      typeof body.expires_in === 'number' && body.expires_in > 0 ? body.expires_in : DEFAULT_TOKEN_LIFETIME_S;
    const lifetimeMs = lifetimeS * 1000;
    this.logger?.debug(
      { registry: this.base.registry, repository, scopes, expiresInSec: lifetimeS },
      'registry token fetched',
    );
    return { token, expiresAt: Date.now() + lifetimeMs - Math.min(30_000, lifetimeMs / 10) };
  }

  // -------------------------------------------------------------------------------------------------
  // Errors

  private addSecret(secret: string | undefined): void {
    if (secret && secret.length >= 4) this.secrets.add(secret);
  }

  private redact(text: string): string {
    let out = text;
    for (const secret of this.secrets) out = out.split(secret).join(REDACTED);
    return out;
  }

  /**
   * Error for an unexpected status, in the reference's wording: the OCI error body's `CODE: message`
   * entries, else the raw body, else `unexpected status code N Text` (HEAD: plus the no-body hint).
   */
  private statusError(res: HttpResponse, method: string, prefix?: string): RegistryError {
    const text = STATUS_CODES[res.status] ?? res.statusText;
    const parsed = parseErrorBody(res.body);
    let detail: string;
    if (parsed.length > 0) detail = parsed.map((e) => `${e.code}: ${e.message}`).join('; ');
    else if (res.body.trim() !== '') {
      detail = `unexpected status code ${res.status} ${text}: ${res.body.trim().slice(0, 512)}`;
    } else if (method === 'HEAD') {
      detail = `unexpected status code ${res.status} ${text} (HEAD responses have no body, use GET for details)`;
    } else detail = `unexpected status code ${res.status} ${text}`;
    const message = this.redact(prefix ? `${prefix}: ${detail}` : detail);
    return new RegistryError(message, {
      kind: 'HTTP',
      status: res.status,
      retryable: isRetryableStatus(res.status),
      code: parsed[0]?.code,
    });
  }
}

/**
 * Builds the process-wide client from `env.OCI_REGISTRY`; throws `OCI_REGISTRY must be set` when it is
 * missing or empty (docs/configuration.md#settings).
 */
export function registryFromEnv(
  env: NodeJS.ProcessEnv = process.env,
  opts: OCIRegistryClientOptions = {},
): OCIRegistryClient {
  const base = env.OCI_REGISTRY?.trim();
  if (!base) throw new Error('OCI_REGISTRY must be set');
  return new OCIRegistryClient(base, opts);
}

function manifestPath(repository: string, reference: string): string {
  return `/v2/${repository}/manifests/${reference}`;
}

function basicAuthorization(creds: RegistryCredentials | undefined): string | undefined {
  if (!creds) return undefined;
  if (creds.registryToken) return `Bearer ${creds.registryToken}`;
  if (creds.username && creds.password) {
    return `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}`;
  }
  return undefined;
}

/**
 * A 200 HEAD must carry Content-Type, a numeric Content-Length and a sha256 Docker-Content-Digest
 * (docs/wire-contract.md#oci-registry).
 */
function checkManifestHeaders(res: HttpResponse): void {
  const missing: string[] = [];
  if (!res.headers['content-type']) missing.push('Content-Type');
  if (!/^\d+$/.test(res.headers['content-length'] ?? '')) missing.push('Content-Length');
  const digest = res.headers['docker-content-digest'];
  if (typeof digest !== 'string' || !/^sha256:[0-9a-f]{64}$/.test(digest))
    missing.push('Docker-Content-Digest');
  if (missing.length > 0) {
    throw protocolError(`HEAD ${redactURL(res.url)}: 200 response without a valid ${missing.join(', ')}`);
  }
}

/**
 * Validates a bearer realm: https, or http only when the ping itself used http; an IP literal in a
 * loopback/private/link-local range only when it is the registry's own host:port
 * (docs/wire-contract.md#oci-registry).
 */
function checkRealm(raw: string | undefined, scheme: Scheme, registryURL: URL): URL {
  if (!raw) throw protocolError('bearer challenge without realm');
  let realm: URL;
  try {
    realm = new URL(raw);
  } catch {
    throw protocolError(`bearer realm ${JSON.stringify(raw)} is not a URL`);
  }
  if (realm.protocol !== 'https:' && !(realm.protocol === 'http:' && scheme === 'http')) {
    throw protocolError(`bearer realm ${redactURL(realm)} must use https`);
  }
  if (isNonPublicIPLiteral(realm.hostname) && hostPort(realm) !== hostPort(registryURL)) {
    throw protocolError(
      `bearer realm ${redactURL(realm)} points at a private address other than the registry`,
    );
  }
  return realm;
}

/**
 * Refuses a redirect from a public host to a loopback/private/link-local IP literal (SSRF guard,
 * docs/wire-contract.md#oci-registry).
 */
function refusePrivateHop(from: URL, to: URL): void {
  const fromLocal =
    isNonPublicIPLiteral(from.hostname) ||
    from.hostname === 'localhost' ||
    from.hostname.endsWith('.localhost');
  if (!fromLocal && isNonPublicIPLiteral(to.hostname)) {
    throw protocolError(`redirect from ${redactURL(from)} to private address ${redactURL(to)} refused`);
  }
}

function parseErrorBody(body: string): { code: string; message: string }[] {
  if (!body.trim().startsWith('{')) return [];
  try {
    const parsed = JSON.parse(body) as { errors?: { code?: unknown; message?: unknown }[] };
    if (!Array.isArray(parsed.errors)) return [];
    return parsed.errors
      .filter((e) => typeof e?.code === 'string')
      .map((e) => ({ code: String(e.code), message: typeof e.message === 'string' ? e.message : '' }));
  } catch {
    return [];
  }
}

function protocolError(message: string): RegistryError {
  return new RegistryError(message, { kind: 'PROTOCOL', retryable: false });
}

function joinErrors(errors: unknown[]): RegistryError {
  const message = errors.map((e) => (e instanceof Error ? e.message : String(e))).join('; ');
  const registryErrors = errors.filter((e): e is RegistryError => e instanceof RegistryError);
  const last = registryErrors.at(-1);
  return new RegistryError(message, {
    kind: last?.kind ?? 'NETWORK',
    retryable: registryErrors.some((e) => e.retryable),
    status: last?.status,
    code: last?.code,
    cause: errors.at(-1),
  });
}

function wrap(label: string, err: unknown): RegistryError {
  if (err instanceof RegistryError) return err.wrap(label);
  return new RegistryError(`${label}: ${err instanceof Error ? err.message : String(err)}`, {
    kind: 'UNKNOWN',
    retryable: true,
    cause: err,
  });
}

/** Settles with `promise`, or rejects with an ABORTED RegistryError as soon as `signal` fires. */
function raceAbort<T>(promise: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return promise;
  if (signal.aborted) {
    promise.catch(() => {});
    return Promise.reject(abortError(signal));
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(abortError(signal));
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

function abortError(signal: AbortSignal): RegistryError {
  return new RegistryError('aborted', { kind: 'ABORTED', retryable: false, cause: signal.reason });
}
