import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  LEASE_DURATION_MS,
  LeaderElector,
  LeaseConflictError,
  type LeaseRecord,
  type LeaseStore,
  RENEW_DEADLINE_MS,
  RETRY_PERIOD_MS,
  type StoredLease,
} from '../../src/leader.js';
import { createLogger } from '../../src/log.js';

const log = createLogger('silent');

/** In-memory Lease with the apiserver's compare-and-swap on resourceVersion. */
class FakeLeaseServer {
  lease: StoredLease | null = null;
  private rv = 0;
  writes: LeaseRecord[] = [];

  store(name: string, health = { down: false }): LeaseStore {
    return {
      description: `test/${name}`,
      get: async () => {
        if (health.down) throw new Error('connection refused');
        return this.lease ? structuredClone(this.lease) : null;
      },
      create: async (record) => {
        if (health.down) throw new Error('connection refused');
        if (this.lease) throw new LeaseConflictError('exists');
        return this.write(record);
      },
      update: async (record, resourceVersion) => {
        if (health.down) throw new Error('connection refused');
        if (!this.lease || this.lease.resourceVersion !== resourceVersion)
          throw new LeaseConflictError('conflict');
        return this.write(record);
      },
    };
  }

  private write(record: LeaseRecord): StoredLease {
    this.writes.push(structuredClone(record));
    this.lease = { record: structuredClone(record), resourceVersion: String(++this.rv) };
    return structuredClone(this.lease);
  }

  holder(): string | undefined {
    return this.lease?.record.holderIdentity;
  }
}

interface Candidate {
  elector: LeaderElector;
  events: string[];
  health: { down: boolean };
}

function candidate(server: FakeLeaseServer, identity: string): Candidate {
  const events: string[] = [];
  const health = { down: false };
  const elector = new LeaderElector({
    store: server.store(identity, health),
    identity,
    log,
    random: () => 0, // no jitter: retries exactly every RetryPeriod
    onStartedLeading: () => {
      events.push(`start@${Date.now()}`);
    },
    onStoppedLeading: () => {
      events.push(`stop@${Date.now()}`);
    },
  });
  return { elector, events, health };
}

describe('LeaderElector', () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: 0 });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('uses the reference timings: 15 s lease, 10 s renew deadline, 2 s retry', () => {
    expect([LEASE_DURATION_MS, RENEW_DEADLINE_MS, RETRY_PERIOD_MS]).toEqual([15_000, 10_000, 2_000]);
  });

  it('creates the Lease, leads, and renews it every retry period', async () => {
    const server = new FakeLeaseServer();
    const a = candidate(server, 'a');
    a.elector.start();
    await vi.advanceTimersByTimeAsync(1);
    expect(a.elector.isLeader()).toBe(true);
    expect(a.events).toEqual(['start@0']);
    expect(server.lease?.record).toMatchObject({
      holderIdentity: 'a',
      leaseDurationSeconds: 15,
      leaseTransitions: 0,
    });
    await vi.advanceTimersByTimeAsync(10_000);
    const renewals = server.writes.map((w) => w.renewTime.getTime());
    expect(renewals).toEqual([0, 2000, 4000, 6000, 8000, 10000]);
    // acquireTime stays at the start of the term while renewTime moves.
    expect(server.lease?.record.acquireTime.getTime()).toBe(0);
    await a.elector.stop();
  });

  it('lets exactly one of two simultaneous candidates win (optimistic concurrency)', async () => {
    const server = new FakeLeaseServer();
    const a = candidate(server, 'a');
    const b = candidate(server, 'b');
    a.elector.start();
    b.elector.start();
    await vi.advanceTimersByTimeAsync(30_000);
    expect([a.elector.isLeader(), b.elector.isLeader()].filter(Boolean)).toHaveLength(1);
    expect(a.events.length + b.events.length).toBe(1);
    await a.elector.stop();
    await b.elector.stop();
  });

  it('hands over after a crashed leader: not before the lease duration, within one retry after it', async () => {
    const server = new FakeLeaseServer();
    const a = candidate(server, 'a');
    a.elector.start();
    await vi.advanceTimersByTimeAsync(1);
    const b = candidate(server, 'b');
    b.elector.start();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(server.holder()).toBe('a');
    expect(b.elector.isLeader()).toBe(false);
    expect(b.elector.currentLeader()).toBe('a');

    // The leader loses the API (as after kill -9 from B's point of view): its last renewal was at t=4000.
    a.health.down = true;
    const lastRenew = server.lease!.record.renewTime.getTime();
    expect(lastRenew).toBe(4000);
    // B saw that renewal at its own read at t=4000 (it polls every 2 s from t=1); the lease is valid until
    // 15 s after B observed it change.
    await vi.advanceTimersByTimeAsync(lastRenew + LEASE_DURATION_MS - Date.now() - 1);
    expect(b.elector.isLeader()).toBe(false);
    await vi.advanceTimersByTimeAsync(RETRY_PERIOD_MS + 1);
    expect(b.elector.isLeader()).toBe(true);
    expect(server.lease?.record).toMatchObject({ holderIdentity: 'b', leaseTransitions: 1 });
    const startedAt = Number(b.events[0]!.split('@')[1]);
    expect(startedAt - lastRenew).toBeGreaterThanOrEqual(LEASE_DURATION_MS);
    expect(startedAt - lastRenew).toBeLessThanOrEqual(LEASE_DURATION_MS + RETRY_PERIOD_MS + 1);
    await a.elector.stop();
    await b.elector.stop();
  });

  it('steps down when renewals fail for the renew deadline, before the lease could expire elsewhere', async () => {
    const server = new FakeLeaseServer();
    const a = candidate(server, 'a');
    a.elector.start();
    await vi.advanceTimersByTimeAsync(4_001);
    a.health.down = true; // next renewal round starts at t=6000 and keeps failing
    await vi.advanceTimersByTimeAsync(6_000 + RENEW_DEADLINE_MS - Date.now() - 1);
    expect(a.elector.isLeader()).toBe(true);
    await vi.advanceTimersByTimeAsync(2);
    expect(a.elector.isLeader()).toBe(false);
    expect(a.events).toEqual(['start@0', 'stop@16000']);
    // 16 s after start, but 12 s after the last successful renewal (t=4000): less than the 15 s lease.
    expect(16_000 - 4_000).toBeLessThan(LEASE_DURATION_MS);
    // It keeps competing and leads again once the API is back.
    a.health.down = false;
    await vi.advanceTimersByTimeAsync(RETRY_PERIOD_MS + 1);
    expect(a.elector.isLeader()).toBe(true);
    await a.elector.stop();
  });

  it('on stop, runs onStoppedLeading first, then releases so a standby takes over at its next retry', async () => {
    const server = new FakeLeaseServer();
    const a = candidate(server, 'a');
    const order: string[] = [];
    const stopping = new LeaderElector({
      store: server.store('a'),
      identity: 'a',
      log,
      random: () => 0,
      onStartedLeading: () => undefined,
      onStoppedLeading: () => {
        order.push(`stopped-leading holder=${server.holder()}`);
      },
    });
    stopping.start();
    await vi.advanceTimersByTimeAsync(1);
    const b = candidate(server, 'b');
    b.elector.start();
    await vi.advanceTimersByTimeAsync(3_000);
    expect(server.holder()).toBe('a');

    const t0 = Date.now();
    await stopping.stop();
    expect(order).toEqual(['stopped-leading holder=a']);
    expect(server.lease?.record).toMatchObject({ holderIdentity: '', leaseDurationSeconds: 1 });
    await vi.advanceTimersByTimeAsync(RETRY_PERIOD_MS + 1);
    expect(b.elector.isLeader()).toBe(true);
    expect(Number(b.events[0]!.split('@')[1]) - t0).toBeLessThanOrEqual(RETRY_PERIOD_MS + 1);
    expect(server.lease?.record.leaseTransitions).toBe(1);
    await b.elector.stop();
    await a.elector.stop(); // never started: a no-op
  });

  it('does not release a Lease someone else holds', async () => {
    const server = new FakeLeaseServer();
    const b = candidate(server, 'b');
    b.elector.start();
    await vi.advanceTimersByTimeAsync(1);
    const a = candidate(server, 'a');
    a.elector.start();
    await vi.advanceTimersByTimeAsync(1_000);
    const writes = server.writes.length;
    await a.elector.stop();
    expect(server.writes.length).toBe(writes);
    expect(server.holder()).toBe('b');
    await b.elector.stop();
  });

  it('rejects inconsistent timings as client-go does', () => {
    const base = {
      store: new FakeLeaseServer().store('x'),
      identity: 'x',
      log,
      onStartedLeading() {},
      onStoppedLeading() {},
    };
    expect(() => new LeaderElector({ ...base, leaseDurationMs: 10_000, renewDeadlineMs: 10_000 })).toThrow(
      /leaseDuration/,
    );
    expect(() => new LeaderElector({ ...base, renewDeadlineMs: 2_000, retryPeriodMs: 2_000 })).toThrow(
      /renewDeadline/,
    );
  });
});
