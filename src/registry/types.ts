/**
 * The registry as the reconcilers see it: two calls on a manifest addressed by repository name and tag,
 * plus the hibernate-snapshot probe helper (docs/wire-contract.md#oci-registry).
 */
import { Tags } from '../api/keys.js';

/** Per-call options. `signal` aborts the call (every HTTP request it makes, and any retry wait). */
export interface RegistryCallOptions {
  signal?: AbortSignal;
}

/**
 * The operator's narrow view of the OCI registry (cocoon-operator `snapshot/registry.go`).
 * `name` is the repository under the configured base (always a VM name); `reference` is a tag
 * (`hibernate` or `latest`), or a digest when it contains `:`.
 */
export interface Registry {
  /**
   * HEAD of the manifest. Resolves true on 200 (with valid manifest headers), false on 404.
   * Throws a {@link RegistryError} for anything else: transport failure, timeout, 401/403 after auth,
   * 405, 5xx after retries, or a 200 lacking Content-Type, Content-Length or a sha256 Docker-Content-Digest
   * (docs/wire-contract.md#oci-registry).
   */
  hasManifest(name: string, reference: string, opts?: RegistryCallOptions): Promise<boolean>;
  /**
   * GET of the manifest: its `annotations` (string values only; {} when it has none), undefined on 404.
   * Throws a {@link RegistryError} as `hasManifest` does, also for a body that is not JSON or over 16 KiB.
   * Used to read the image a `:hibernate` snapshot was taken under (`cocoonstack.snapshot.baseimage`,
   * docs/wire-contract.md#snapshot-artifacts).
   */
  manifestAnnotations(
    name: string,
    reference: string,
    opts?: RegistryCallOptions,
  ): Promise<Record<string, string> | undefined>;
  /**
   * DELETE of the manifest by the reference itself (a tag is not resolved to a digest first).
   * 200/202 and 404 resolve ("ensure absent"); anything else throws a {@link RegistryError}
   * (e.g. 405 UNSUPPORTED when the registry has deletes disabled). docs/wire-contract.md#oci-registry.
   */
  deleteManifest(name: string, reference: string, opts?: RegistryCallOptions): Promise<void>;
}

/**
 * Coarse classification of a failure, for callers and logs. HTTP failures carry `status` as well.
 * - `HTTP`: the registry (or token server) answered with an unexpected status.
 * - `NETWORK`: connection refused/reset, DNS, TLS.
 * - `TIMEOUT`: the client's per-request timeout fired.
 * - `ABORTED`: the caller's AbortSignal fired.
 * - `PROTOCOL`: a malformed answer (bad challenge, bad token response, 200 without manifest headers,
 *   refused redirect or realm).
 * - `NAME_INVALID`: the repository or reference does not parse; no request was made.
 * - `CREDENTIALS`: the keychain failed (unreadable docker config, failing credential helper).
 * - `UNKNOWN`: a non-registry error wrapped by a helper (e.g. from a test fake).
 */
export type RegistryErrorKind =
  | 'HTTP'
  | 'NETWORK'
  | 'TIMEOUT'
  | 'ABORTED'
  | 'PROTOCOL'
  | 'NAME_INVALID'
  | 'CREDENTIALS'
  | 'UNKNOWN';

export interface RegistryErrorInit {
  kind: RegistryErrorKind;
  retryable: boolean;
  status?: number;
  /** First OCI error code of the response body (e.g. `UNSUPPORTED`, `DIGEST_INVALID`). */
  code?: string;
  cause?: unknown;
}

/**
 * Every failure of the registry client. `retryable` says whether trying again later can help
 * (network trouble, timeouts, 408/429/5xx); `status` is the HTTP status when there was one.
 * The message never contains credentials or tokens.
 */
export class RegistryError extends Error {
  readonly kind: RegistryErrorKind;
  readonly retryable: boolean;
  readonly status: number | undefined;
  readonly code: string | undefined;

  constructor(message: string, init: RegistryErrorInit) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = 'RegistryError';
    this.kind = init.kind;
    this.retryable = init.retryable;
    this.status = init.status;
    this.code = init.code;
  }

  /** Same classification, message prefixed with `prefix: `, this error as the cause. */
  wrap(prefix: string): RegistryError {
    return new RegistryError(`${prefix}: ${this.message}`, {
      kind: this.kind,
      retryable: this.retryable,
      status: this.status,
      code: this.code,
      cause: this,
    });
  }
}

/** Type guard for {@link RegistryError} (also across realms, by name and shape). */
export function isRegistryError(err: unknown): err is RegistryError {
  return (
    err instanceof RegistryError ||
    (err instanceof Error &&
      err.name === 'RegistryError' &&
      typeof (err as RegistryError).retryable === 'boolean')
  );
}

/**
 * Whether the `:hibernate` snapshot of `vmName` exists (HasManifest(vmName, "hibernate")).
 * Errors are wrapped as `probe hibernate snapshot <vmName>: <cause>` with the original error as `cause`;
 * a RegistryError cause keeps its `retryable`/`status`/`kind` on the wrapper, so the caller's retry decision
 * is unchanged.
 */
export async function hasHibernateSnapshot(
  reg: Registry,
  vmName: string,
  opts?: RegistryCallOptions,
): Promise<boolean> {
  try {
    return await reg.hasManifest(vmName, Tags.hibernate, opts);
  } catch (err) {
    const prefix = `probe hibernate snapshot ${vmName}`;
    if (isRegistryError(err)) throw err.wrap(prefix);
    const detail = err instanceof Error ? err.message : String(err);
    throw new RegistryError(`${prefix}: ${detail}`, { kind: 'UNKNOWN', retryable: true, cause: err });
  }
}
