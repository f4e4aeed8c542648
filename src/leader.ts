/**
 * Leader election over a coordination.k8s.io/v1 Lease, the way client-go's leaderelection package does it
 * (the lock controller-runtime uses for the Go operator; docs/configuration.md#notes-on-some-settings): Lease
 * `cocoon-operator.cocoonset.cocoonstack.io`, LeaseDuration 15 s, RenewDeadline 10 s, RetryPeriod 2 s,
 * identity `<hostname>_<uuid>`. Every write carries the resourceVersion it read (optimistic concurrency), so
 * two candidates can never both win one round.
 *
 * Timing rule: a candidate measures a holder's lease with its own clock, from the moment it last saw the
 * Lease change, never from the timestamps written in it (no clock skew assumptions).
 *
 * Deliberate deviation: on a graceful stop the holder releases the Lease (empty holder, 1 s duration), so a
 * standby takes over at its next retry instead of waiting up to 15 s for expiry (the reference does not
 * set LeaderElectionReleaseOnCancel). No npm library was used: the one candidate found
 * (@codedependant/kubernetes-leader-election) has a single release and no stated licence.
 */

import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { type CoordinationV1Api, type V1Lease, V1MicroTime } from '@kubernetes/client-node';
import { statusCodeOf } from './kube/client.js';
import type { Logger } from './log.js';

/** Timings of client-go / controller-runtime defaults, in milliseconds. */
export const LEASE_DURATION_MS = 15_000;
export const RENEW_DEADLINE_MS = 10_000;
export const RETRY_PERIOD_MS = 2_000;
/** client-go's JitterFactor: waits are retryPeriod × (1 + random × 1.2). */
export const JITTER_FACTOR = 1.2;

/** What a Lease says about its holder (the fields of coordination.k8s.io/v1 LeaseSpec that matter). */
export interface LeaseRecord {
  /** '' = nobody holds it (released). */
  holderIdentity: string;
  leaseDurationSeconds: number;
  acquireTime: Date;
  renewTime: Date;
  leaseTransitions: number;
}

/** A stored record and the resourceVersion to send back with an update. */
export interface StoredLease {
  record: LeaseRecord;
  resourceVersion: string;
}

/** Thrown by a LeaseStore when a create or update lost a race (HTTP 409). */
export class LeaseConflictError extends Error {
  override name = 'LeaseConflictError';
}

/** The one boundary of the elector: read, create and compare-and-swap one Lease. */
export interface LeaseStore {
  /** The current Lease, or null when it does not exist. */
  get(): Promise<StoredLease | null>;
  /** Creates the Lease. @throws LeaseConflictError if it already exists. */
  create(record: LeaseRecord): Promise<StoredLease>;
  /** Replaces the Lease if it still has `resourceVersion`. @throws LeaseConflictError otherwise. */
  update(record: LeaseRecord, resourceVersion: string): Promise<StoredLease>;
  /** Human-readable location, for logs (`<namespace>/<name>`). */
  readonly description: string;
}

/** `<hostname>_<uuid>`, as controller-runtime builds the identity. */
export function defaultIdentity(): string {
  return `${hostname()}_${randomUUID()}`;
}

function fromLease(lease: V1Lease): StoredLease {
  const spec = lease.spec ?? {};
  const date = (v: unknown) => (v instanceof Date ? v : v ? new Date(String(v)) : new Date(0));
  return {
    record: {
      holderIdentity: spec.holderIdentity ?? '',
      leaseDurationSeconds: spec.leaseDurationSeconds ?? 0,
      acquireTime: date(spec.acquireTime),
      renewTime: date(spec.renewTime),
      leaseTransitions: spec.leaseTransitions ?? 0,
    },
    resourceVersion: lease.metadata?.resourceVersion ?? '',
  };
}

function toSpec(r: LeaseRecord): V1Lease['spec'] {
  return {
    holderIdentity: r.holderIdentity === '' ? undefined : r.holderIdentity,
    leaseDurationSeconds: r.leaseDurationSeconds,
    acquireTime: new V1MicroTime(r.acquireTime.getTime()),
    renewTime: new V1MicroTime(r.renewTime.getTime()),
    leaseTransitions: r.leaseTransitions,
  };
}

/**
 * A LeaseStore on the Kubernetes API (create / read / replace with resourceVersion). Each request is
 * bounded by `requestTimeoutMs` (client-go: max(RenewDeadline/2, 1 s) = 5 s).
 */
export function kubeLeaseStore(
  coordination: CoordinationV1Api,
  namespace: string,
  name: string,
  requestTimeoutMs = Math.max(RENEW_DEADLINE_MS / 2, 1000),
): LeaseStore {
  const bounded = async <T>(p: Promise<T>): Promise<T> => {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`lease request timed out after ${requestTimeoutMs} ms`)),
        requestTimeoutMs,
      );
    });
    try {
      return await Promise.race([p, timeout]);
    } finally {
      clearTimeout(timer);
    }
  };
  const conflict = (err: unknown): never => {
    if (statusCodeOf(err) === 409)
      throw new LeaseConflictError(`lease ${namespace}/${name} changed concurrently`);
    throw err;
  };
  return {
    description: `${namespace}/${name}`,
    async get() {
      try {
        return fromLease(await bounded(coordination.readNamespacedLease({ name, namespace })));
      } catch (err) {
        if (statusCodeOf(err) === 404) return null;
        throw err;
      }
    },
    async create(record) {
      const body: V1Lease = {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name, namespace },
        spec: toSpec(record),
      };
      return fromLease(
        await bounded(coordination.createNamespacedLease({ namespace, body })).catch(conflict),
      );
    },
    async update(record, resourceVersion) {
      const body: V1Lease = {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name, namespace, resourceVersion },
        spec: toSpec(record),
      };
      return fromLease(
        await bounded(coordination.replaceNamespacedLease({ name, namespace, body })).catch(conflict),
      );
    },
  };
}

/** Options of a {@link LeaderElector}. Durations in milliseconds. */
export interface LeaderElectorOptions {
  store: LeaseStore;
  identity: string;
  log: Logger;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  /** Called once per term after the Lease is acquired. Errors are logged; the term continues. */
  onStartedLeading: () => void | Promise<void>;
  /** Called once per term when leadership ends (lost, or stop()); awaited before a release. */
  onStoppedLeading: () => void | Promise<void>;
  /** Called when the observed holder changes (including to this process). */
  onNewLeader?: (identity: string) => void;
  /** Randomness for jitter, [0, 1); tests pass a constant. */
  random?: () => number;
}

/**
 * Runs one candidate: acquire (retrying every RetryPeriod with jitter), lead while renewals keep
 * succeeding within RenewDeadline, step down when they do not, and compete again. `stop()` ends the loop,
 * calls onStoppedLeading if leading, then releases the Lease.
 */
export class LeaderElector {
  private readonly leaseDurationMs: number;
  private readonly renewDeadlineMs: number;
  private readonly retryPeriodMs: number;
  private readonly random: () => number;
  private readonly abort = new AbortController();
  private observed: StoredLease | null = null;
  /** Local clock reading when `observed` last changed. */
  private observedAt = 0;
  private leading = false;
  private loop: Promise<void> | undefined;
  private lastHolder: string | undefined;

  constructor(private readonly opts: LeaderElectorOptions) {
    this.leaseDurationMs = opts.leaseDurationMs ?? LEASE_DURATION_MS;
    this.renewDeadlineMs = opts.renewDeadlineMs ?? RENEW_DEADLINE_MS;
    this.retryPeriodMs = opts.retryPeriodMs ?? RETRY_PERIOD_MS;
    this.random = opts.random ?? Math.random;
    // client-go's validation of the three timings.
    if (this.leaseDurationMs <= this.renewDeadlineMs)
      throw new Error('leaseDuration must be greater than renewDeadline');
    if (this.renewDeadlineMs <= JITTER_FACTOR * this.retryPeriodMs) {
      throw new Error('renewDeadline must be greater than retryPeriod*1.2');
    }
    if (this.leaseDurationMs < 1000) throw new Error('leaseDuration must be at least 1 s');
  }

  /** True while this process holds the Lease and its last renewal is within RenewDeadline. */
  isLeader(): boolean {
    return this.leading;
  }

  /** The holder this candidate last observed ('' = released, undefined = not read yet). */
  currentLeader(): string | undefined {
    return this.lastHolder;
  }

  /** Starts competing in the background. Idempotent. */
  start(): void {
    this.loop ??= this.run().catch((err) => this.opts.log.error({ err }, 'leader election loop failed'));
  }

  /**
   * Stops competing: ends the loops, runs onStoppedLeading (if leading), then releases the Lease so a
   * standby can take over at once. Safe to call more than once and before start().
   */
  async stop(): Promise<void> {
    this.abort.abort();
    await this.loop;
    if (this.leading) {
      this.leading = false;
      await this.callback('onStoppedLeading', this.opts.onStoppedLeading);
      await this.release();
    }
  }

  private get stopped(): boolean {
    return this.abort.signal.aborted;
  }

  private async run(): Promise<void> {
    const { log, store, identity } = this.opts;
    while (!this.stopped) {
      log.info({ lease: store.description, identity }, 'attempting to acquire leader lease');
      if (!(await this.acquire())) return;
      this.leading = true;
      log.info({ lease: store.description, identity }, 'successfully acquired lease');
      await this.callback('onStartedLeading', this.opts.onStartedLeading);
      await this.renewUntilLost();
      if (this.stopped) return; // stop() finishes the term (callback + release).
      this.leading = false;
      log.warn({ lease: store.description, identity }, 'leader election lost');
      await this.callback('onStoppedLeading', this.opts.onStoppedLeading);
    }
  }

  private async callback(name: string, fn: () => void | Promise<void>): Promise<void> {
    try {
      await fn();
    } catch (err) {
      this.opts.log.error({ err }, `leader election ${name} callback failed`);
    }
  }

  /** Retries every RetryPeriod (jittered) until acquired (true) or stopped (false). */
  private async acquire(): Promise<boolean> {
    while (!this.stopped) {
      if (await this.tryAcquireOrRenew()) return true;
      await this.sleep(this.retryPeriodMs * (1 + this.random() * JITTER_FACTOR));
    }
    return false;
  }

  /** Renews every RetryPeriod; returns when a renewal round fails past RenewDeadline, or on stop. */
  private async renewUntilLost(): Promise<void> {
    while (!this.stopped) {
      await this.sleep(this.retryPeriodMs); // just acquired or renewed
      if (this.stopped) return;
      const deadline = Date.now() + this.renewDeadlineMs;
      let renewed = false;
      while (!this.stopped && Date.now() < deadline) {
        if (await this.tryAcquireOrRenew()) {
          renewed = true;
          break;
        }
        await this.sleep(Math.min(this.retryPeriodMs, Math.max(0, deadline - Date.now())));
      }
      if (this.stopped || !renewed) return;
    }
  }

  /** One round of client-go's tryAcquireOrRenew. True when this process holds the Lease afterwards. */
  private async tryAcquireOrRenew(): Promise<boolean> {
    const { store, identity, log } = this.opts;
    const now = new Date(Date.now());
    const fresh: LeaseRecord = {
      holderIdentity: identity,
      leaseDurationSeconds: Math.round(this.leaseDurationMs / 1000),
      acquireTime: now,
      renewTime: now,
      leaseTransitions: 0,
    };
    try {
      const current = await store.get();
      if (!current) {
        this.setObserved(await store.create(fresh));
        return true;
      }
      if (!this.observed || this.observed.resourceVersion !== current.resourceVersion)
        this.setObserved(current);
      const held = current.record.holderIdentity;
      const expired = this.observedAt + current.record.leaseDurationSeconds * 1000 <= Date.now();
      if (held !== '' && held !== identity && !expired) return false;
      const record: LeaseRecord =
        held === identity
          ? {
              ...fresh,
              acquireTime: current.record.acquireTime,
              leaseTransitions: current.record.leaseTransitions,
            }
          : { ...fresh, leaseTransitions: current.record.leaseTransitions + 1 };
      this.setObserved(await store.update(record, current.resourceVersion));
      return true;
    } catch (err) {
      if (err instanceof LeaseConflictError)
        log.debug({ lease: store.description }, 'lease changed concurrently');
      else log.warn({ err, lease: store.description }, 'error retrieving or updating lease');
      return false;
    }
  }

  private setObserved(lease: StoredLease): void {
    this.observed = lease;
    this.observedAt = Date.now();
    const holder = lease.record.holderIdentity;
    if (holder !== this.lastHolder) {
      this.lastHolder = holder;
      if (holder !== '') {
        this.opts.log.info({ leader: holder, lease: this.opts.store.description }, 'new leader observed');
        this.opts.onNewLeader?.(holder);
      }
    }
  }

  /** client-go's release: keep transitions, clear the holder, 1 s duration. Only if still ours. */
  private async release(): Promise<void> {
    const { store, identity, log } = this.opts;
    try {
      const current = await store.get();
      if (!current || current.record.holderIdentity !== identity) return;
      const now = new Date(Date.now());
      await store.update(
        {
          holderIdentity: '',
          leaseDurationSeconds: 1,
          acquireTime: now,
          renewTime: now,
          leaseTransitions: current.record.leaseTransitions,
        },
        current.resourceVersion,
      );
      log.info({ lease: store.description, identity }, 'released leader lease');
    } catch (err) {
      log.warn({ err, lease: store.description }, 'failed to release leader lease');
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      if (this.stopped) return resolve();
      const onAbort = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        this.abort.signal.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      this.abort.signal.addEventListener('abort', onAbort, { once: true });
    });
  }
}
