/**
 * Registry credentials, resolved per repository like the reference keychain
 * `MultiKeychain(google.Keychain, authn.DefaultKeychain)` (docs/wire-contract.md#oci-registry):
 * Google Application Default Credentials for Google-hosted registries, then the docker-style config
 * (`auths`, `credHelpers`, `credsStore`), else anonymous.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { GoogleAuth } from 'google-auth-library';
import { DOCKER_HUB_REGISTRY } from './reference.js';
import { RegistryError } from './types.js';

/** What a keychain can yield. All fields are secrets except `username`. */
export interface RegistryCredentials {
  username?: string;
  password?: string;
  /** OAuth2 refresh token for the registry's token server (docker `identitytoken`). */
  identityToken?: string;
  /** Bearer token sent to the registry as-is (docker `registrytoken`). */
  registryToken?: string;
}

/** What credentials are asked for: the registry host and the full repository string `host/path/name`. */
export interface CredentialTarget {
  registry: string;
  repository: string;
}

/** A credential source. `undefined` means anonymous; a throw aborts the registry call. */
export interface Keychain {
  resolve(target: CredentialTarget, signal?: AbortSignal): Promise<RegistryCredentials | undefined>;
}

/** Minimal structured logger (pino-compatible); messages and fields never carry secrets. */
export interface RegistryLogger {
  debug(obj: Record<string, unknown>, msg: string): void;
  warn(obj: Record<string, unknown>, msg: string): void;
}

/** True when `creds` carries nothing usable. */
export function isAnonymous(creds: RegistryCredentials | undefined): boolean {
  return !creds || (!creds.username && !creds.password && !creds.identityToken && !creds.registryToken);
}

/**
 * Asks each keychain in order and returns the first non-anonymous answer; an error from any keychain
 * aborts the lookup (authn.MultiKeychain).
 */
export function multiKeychain(...chains: Keychain[]): Keychain {
  return {
    async resolve(target, signal) {
      for (const chain of chains) {
        const creds = await chain.resolve(target, signal);
        if (!isAnonymous(creds)) return creds;
      }
      return undefined;
    },
  };
}

/**
 * The production chain: Google ADC for Google registries, then the docker config
 * (docs/wire-contract.md#oci-registry).
 */
export function defaultKeychain(logger?: RegistryLogger): Keychain {
  return multiKeychain(new GoogleKeychain({ logger }), new DockerConfigKeychain());
}

// ---------------------------------------------------------------------------------------------------
// Google

/** OAuth scope requested from ADC (ggcr pkg/v1/google). */
export const GOOGLE_CLOUD_PLATFORM_SCOPE = 'https://www.googleapis.com/auth/cloud-platform';
/** Basic-auth username that goes with an OAuth access token on Google registries (ggcr google.Keychain). */
export const GOOGLE_TOKEN_USERNAME = '_token';
/** How long a failed ADC lookup is remembered before it is tried again. */
const GOOGLE_FAILURE_BACKOFF_MS = 60_000;

/**
 * Whether `registry` (`host[:port]`) is served by Google: `gcr.io`, `*.gcr.io`, `*.pkg.dev`
 * (Artifact Registry, e.g. `europe-docker.pkg.dev`) or `*.google.com` (docs/wire-contract.md#oci-registry).
 */
export function isGoogleRegistry(registry: string): boolean {
  return (
    registry === 'gcr.io' ||
    registry.endsWith('.gcr.io') ||
    registry.endsWith('.pkg.dev') ||
    registry.endsWith('.google.com')
  );
}

/** Source of an OAuth2 access token. */
export type AccessTokenSource = () => Promise<string>;

/**
 * Google keychain: anonymous for non-Google hosts; for Google hosts, basic credentials
 * `_token` / `<access token>` from Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS,
 * gcloud's ADC file, or the metadata server) via google-auth-library, which caches and refreshes the
 * token. Deviation from the reference: an ADC failure is not remembered for the process lifetime but
 * for one minute, then retried; the gcloud `config-helper` fallback is not implemented.
 */
export class GoogleKeychain implements Keychain {
  private readonly source: AccessTokenSource;
  private readonly logger: RegistryLogger | undefined;
  private failedAt = 0;

  constructor(opts: { tokenSource?: AccessTokenSource; logger?: RegistryLogger } = {}) {
    this.source = opts.tokenSource ?? adcTokenSource();
    this.logger = opts.logger;
  }

  async resolve(target: CredentialTarget): Promise<RegistryCredentials | undefined> {
    if (!isGoogleRegistry(target.registry)) return undefined;
    if (this.failedAt && Date.now() - this.failedAt < GOOGLE_FAILURE_BACKOFF_MS) return undefined;
    try {
      const token = await this.source();
      this.failedAt = 0;
      return { username: GOOGLE_TOKEN_USERNAME, password: token };
    } catch (err) {
      this.failedAt = Date.now();
      this.logger?.warn(
        { registry: target.registry, err: err instanceof Error ? err.message : String(err) },
        'google application default credentials unavailable; using the next keychain',
      );
      return undefined;
    }
  }
}

/** Access tokens from Application Default Credentials with the cloud-platform scope. */
export function adcTokenSource(): AccessTokenSource {
  let auth: GoogleAuth | undefined;
  return async () => {
    auth ??= new GoogleAuth({ scopes: [GOOGLE_CLOUD_PLATFORM_SCOPE] });
    let client: Awaited<ReturnType<GoogleAuth['getClient']>>;
    try {
      client = await auth.getClient();
    } catch (err) {
      auth = undefined; // let a later call retry discovery from scratch
      throw err;
    }
    const { token } = await client.getAccessToken();
    if (!token) throw new Error('application default credentials returned no access token');
    return token;
  };
}

// ---------------------------------------------------------------------------------------------------
// Docker config

/** docker CLI key under which Docker Hub credentials are stored. */
export const DOCKER_HUB_AUTH_KEY = 'https://index.docker.io/v1/';
/** Output of a credential helper that has nothing for the server (docker-credential-helpers). */
const HELPER_NOT_FOUND = 'credentials not found in native keychain';
const HELPER_OUTPUT_LIMIT = 64 * 1024;

interface DockerAuthEntry {
  auth?: string;
  username?: string;
  password?: string;
  identitytoken?: string;
  registrytoken?: string;
}

interface DockerConfigFile {
  auths?: Record<string, DockerAuthEntry>;
  credsStore?: string;
  credHelpers?: Record<string, string>;
}

export interface DockerConfigKeychainOptions {
  /** Environment to read DOCKER_CONFIG, REGISTRY_AUTH_FILE, XDG_RUNTIME_DIR and PATH from (default: process.env at each call). */
  env?: NodeJS.ProcessEnv;
  /** Home directory (default: os.homedir()). */
  home?: string;
  /** Kill a credential helper that has not answered after this long (default 30 s). */
  helperTimeoutMs?: number;
}

/**
 * authn.DefaultKeychain: finds the config file (`$HOME/.docker/config.json` or
 * `$DOCKER_CONFIG/config.json` → the docker config dir; else `$REGISTRY_AUTH_FILE`; else
 * `$XDG_RUNTIME_DIR/containers/auth.json`), then looks up the full repository string and then the
 * registry host (Docker Hub: `https://index.docker.io/v1/`). A key with a `credHelpers` entry, or any key
 * when `credsStore` is set, is asked of `docker-credential-<helper> get`; otherwise `auths` is used
 * (exact key, then keys whose hostname matches). The file is re-read on every call.
 * Throws a CREDENTIALS RegistryError for an unreadable/invalid file or a failing helper.
 */
export class DockerConfigKeychain implements Keychain {
  constructor(private readonly opts: DockerConfigKeychainOptions = {}) {}

  async resolve(target: CredentialTarget, signal?: AbortSignal): Promise<RegistryCredentials | undefined> {
    const env = this.opts.env ?? process.env;
    const file = locateConfig(env, this.opts.home ?? homedir());
    if (!file) return undefined;
    const config = await loadConfig(file);
    for (const rawKey of [target.repository, target.registry]) {
      const key = rawKey === DOCKER_HUB_REGISTRY ? DOCKER_HUB_AUTH_KEY : rawKey;
      const helper = config.credHelpers?.[key] ?? config.credsStore;
      const creds = helper
        ? await runHelper(helper, key, env, this.opts.helperTimeoutMs ?? 30_000, signal)
        : fromAuths(config, key, file);
      if (!isAnonymous(creds)) return creds;
    }
    return undefined;
  }
}

function locateConfig(env: NodeJS.ProcessEnv, home: string): string | undefined {
  const dockerDir = env.DOCKER_CONFIG || join(home, '.docker');
  if (
    existsSync(join(home, '.docker', 'config.json')) ||
    (env.DOCKER_CONFIG && existsSync(join(env.DOCKER_CONFIG, 'config.json')))
  ) {
    return join(dockerDir, 'config.json');
  }
  if (env.REGISTRY_AUTH_FILE && existsSync(env.REGISTRY_AUTH_FILE)) return env.REGISTRY_AUTH_FILE;
  if (env.XDG_RUNTIME_DIR) {
    const podman = join(env.XDG_RUNTIME_DIR, 'containers', 'auth.json');
    if (existsSync(podman)) return podman;
  }
  return undefined;
}

async function loadConfig(file: string): Promise<DockerConfigFile> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw credentialsError(`read registry auth file ${file}: ${(err as Error).message}`, err);
  }
  try {
    const parsed = JSON.parse(text) as unknown;
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
      throw new Error('not an object');
    return parsed as DockerConfigFile;
  } catch {
    // JSON.parse messages quote the input; keep them out in case the file holds secrets.
    throw credentialsError(`parse registry auth file ${file}: invalid JSON`, undefined);
  }
}

function hostnameOfKey(key: string): string {
  const stripped = key.replace(/^https?:\/\//, '');
  return stripped.split('/')[0] ?? stripped;
}

function fromAuths(config: DockerConfigFile, key: string, file: string): RegistryCredentials | undefined {
  const auths = config.auths ?? {};
  let entry = Object.hasOwn(auths, key) ? auths[key] : undefined;
  if (!entry) {
    for (const [k, v] of Object.entries(auths)) {
      if (hostnameOfKey(k) === key) {
        entry = v;
        break;
      }
    }
  }
  if (!entry) return undefined;
  const creds: RegistryCredentials = {};
  if (entry.auth) {
    const decoded = Buffer.from(entry.auth, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0)
      throw credentialsError(`registry auth file ${file}: invalid auth entry for ${key}`, undefined);
    creds.username = decoded.slice(0, colon);
    creds.password = decoded.slice(colon + 1);
  } else {
    if (entry.username) creds.username = entry.username;
    if (entry.password) creds.password = entry.password;
  }
  if (entry.identitytoken) creds.identityToken = entry.identitytoken;
  if (entry.registrytoken) creds.registryToken = entry.registrytoken;
  return creds;
}

/**
 * Runs `docker-credential-<helper> get` with `serverURL` on stdin (docker-credential-helpers protocol)
 * and maps `{Username, Secret}`; `Username == "<token>"` means Secret is an identity token. The helper's
 * "credentials not found" answer is anonymous, any other failure throws.
 */
async function runHelper(
  helper: string,
  serverURL: string,
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<RegistryCredentials | undefined> {
  const program = `docker-credential-${helper}`;
  const { code, stdout, error } = await new Promise<{ code: number | null; stdout: string; error?: Error }>(
    (resolve) => {
      const child = spawn(program, ['get'], { env, stdio: ['pipe', 'pipe', 'ignore'], signal });
      let out = '';
      let settled = false;
      const settle = (result: { code: number | null; stdout: string; error?: Error }) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(result);
      };
      // Own timer rather than spawn's `timeout`: a grandchild holding stdout open would delay 'close'.
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        child.stdout.destroy();
        settle({
          code: null,
          stdout: out,
          error: Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' }),
        });
      }, timeoutMs);
      child.stdout.setEncoding('utf8');
      child.stdout.on('data', (chunk: string) => {
        if (out.length < HELPER_OUTPUT_LIMIT) out += chunk;
      });
      child.on('error', (err) => settle({ code: null, stdout: out, error: err }));
      child.on('close', (exit) => settle({ code: exit, stdout: out }));
      child.stdin.on('error', () => {}); // helper exited before reading stdin; reported through 'close'
      child.stdin.end(serverURL);
    },
  );
  const text = stdout.trim();
  if (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? error.name;
    throw credentialsError(
      `credential helper ${program} get ${serverURL}: ${reason}`,
      error,
      reason !== 'ENOENT',
    );
  }
  if (code !== 0) {
    if (text.includes(HELPER_NOT_FOUND)) return undefined;
    const firstLine = (text.split('\n')[0] ?? '').slice(0, 200);
    throw credentialsError(
      `credential helper ${program} get ${serverURL}: exit status ${code ?? 'killed'}${firstLine ? `: ${firstLine}` : ''}`,
      undefined,
      code === null,
    );
  }
  let parsed: { Username?: unknown; Secret?: unknown };
  try {
    parsed = JSON.parse(text) as typeof parsed;
  } catch {
    throw credentialsError(`credential helper ${program} get ${serverURL}: output is not JSON`, undefined);
  }
  const username = typeof parsed.Username === 'string' ? parsed.Username : '';
  const secret = typeof parsed.Secret === 'string' ? parsed.Secret : '';
  if (username === '<token>') return { identityToken: secret };
  if (!username && !secret) return undefined;
  return { username, password: secret };
}

function credentialsError(message: string, cause: unknown, retryable = false): RegistryError {
  return new RegistryError(message, { kind: 'CREDENTIALS', retryable, cause });
}
