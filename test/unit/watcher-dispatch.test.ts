import pino from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Dispatcher, isTransient, type Signaller } from '../../src/watcher/dispatch.js';
import type { RoutedSignal } from '../../src/watcher/routes.js';

const log = pino({ level: 'silent' });

const sig = (workflowId: string, object: string, n: number): RoutedSignal => ({
  workflowId,
  signalName: 'podObserved',
  payload: { n },
  start: { workflowType: 'vmWorkflow', args: [{ namespace: 'ns', pod: 'p' }], searchAttributes: [] },
  key: `${workflowId}|${object}`,
});

/** Fake Temporal boundary: records deliveries, with a per-call latency and scripted failures. */
class FakeSignaller implements Signaller {
  delivered: Array<{ workflowId: string; n: number }> = [];
  inFlight = 0;
  maxInFlight = 0;
  failures: unknown[] = [];
  latencyMs: (workflowId: string, n: number) => number = () => 0;
  calls = 0;

  async signalWithStart(workflowId: string, _signal: string, payload: unknown): Promise<void> {
    this.calls++;
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      const n = (payload as { n: number }).n;
      const latency = this.latencyMs(workflowId, n);
      if (latency > 0) await new Promise((r) => setTimeout(r, latency));
      else await Promise.resolve();
      const failure = this.failures.shift();
      if (failure) throw failure;
      this.delivered.push({ workflowId, n });
    } finally {
      this.inFlight--;
    }
  }
}

describe('Dispatcher', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('delivers signals to one workflow in event order even when deliveries take different times', async () => {
    const s = new FakeSignaller();
    s.latencyMs = (_w, n) => (n % 3) * 5;
    const d = new Dispatcher({ signaller: s, log });
    for (let n = 0; n < 20; n++) {
      d.enqueue(sig('vm/ns/a', `o${n % 2}`, n));
      d.enqueue(sig('vm/ns/b', `o${n % 2}`, n));
    }
    await d.idle();
    for (const w of ['vm/ns/a', 'vm/ns/b']) {
      expect(s.delivered.filter((x) => x.workflowId === w).map((x) => x.n)).toEqual([...Array(20).keys()]);
    }
    expect(d.stats()).toMatchObject({ sent: 40, failed: 0, pending: 0 });
  });

  it('bounds deliveries in flight across workflows, and runs distinct workflows concurrently', async () => {
    const s = new FakeSignaller();
    s.latencyMs = () => 10;
    const d = new Dispatcher({ signaller: s, log, maxInFlight: 3 });
    for (let i = 0; i < 12; i++) d.enqueue(sig(`vm/ns/p${i}`, 'o', i));
    await d.idle();
    expect(s.maxInFlight).toBe(3);
    expect(s.delivered).toHaveLength(12);
  });

  it('retries transient errors (UNAVAILABLE, transport) with backoff, then delivers', async () => {
    vi.useFakeTimers();
    const s = new FakeSignaller();
    s.failures = [Object.assign(new Error('unavailable'), { code: 14 }), new Error('socket hang up')];
    const d = new Dispatcher({ signaller: s, log, retry: { initialMs: 100, maxMs: 1000, maxAttempts: 5 } });
    d.enqueue(sig('vm/ns/a', 'o', 1));
    d.enqueue(sig('vm/ns/a', 'other', 2));
    await vi.advanceTimersByTimeAsync(99);
    expect(s.calls).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(s.calls).toBe(2);
    await vi.advanceTimersByTimeAsync(200);
    expect(s.delivered.map((x) => x.n)).toEqual([1, 2]);
    expect(d.stats()).toMatchObject({ sent: 2, retries: 2, failed: 0 });
  });

  it('gives up on a permanent error at once, reports it to onGiveUp and goes on with the next signal', async () => {
    const s = new FakeSignaller();
    s.failures = [{ message: 'bad', cause: { code: 3 } }];
    const givenUp: string[] = [];
    const d = new Dispatcher({ signaller: s, log, onGiveUp: (g) => givenUp.push(g.key) });
    d.enqueue(sig('vm/ns/a', 'o', 1));
    d.enqueue(sig('vm/ns/a', 'p', 2));
    await d.idle();
    expect(givenUp).toEqual(['vm/ns/a|o']);
    expect(s.delivered.map((x) => x.n)).toEqual([2]);
    expect(d.stats()).toMatchObject({ sent: 1, failed: 1, retries: 0 });
  });

  it('gives up after maxAttempts transient failures without throwing', async () => {
    vi.useFakeTimers();
    const s = new FakeSignaller();
    s.failures = Array.from({ length: 10 }, () => Object.assign(new Error('down'), { code: 14 }));
    const givenUp: string[] = [];
    const d = new Dispatcher({
      signaller: s,
      log,
      retry: { initialMs: 10, maxMs: 40, maxAttempts: 4 },
      onGiveUp: (g) => givenUp.push(g.key),
    });
    d.enqueue(sig('vm/ns/a', 'o', 1));
    await vi.advanceTimersByTimeAsync(10 + 20 + 40);
    await d.idle();
    expect(s.calls).toBe(4);
    expect(givenUp).toHaveLength(1);
    expect(d.stats()).toMatchObject({ failed: 1, retries: 3, pending: 0 });
  });

  it('replaces a queued, unsent signal for the same object with the newer one (tail only)', async () => {
    const s = new FakeSignaller();
    s.latencyMs = () => 5;
    const d = new Dispatcher({ signaller: s, log });
    d.enqueue(sig('vm/ns/a', 'o', 1)); // in flight at once
    d.enqueue(sig('vm/ns/a', 'o', 2)); // queued
    d.enqueue(sig('vm/ns/a', 'o', 3)); // replaces 2
    d.enqueue(sig('vm/ns/a', 'x', 4));
    d.enqueue(sig('vm/ns/a', 'o', 5)); // tail is 'x': queued behind it, order kept
    await d.idle();
    expect(s.delivered.map((x) => x.n)).toEqual([1, 3, 4, 5]);
    expect(d.stats().coalesced).toBe(1);
  });

  it('classifies errors: gRPC permanent codes are not transient, others and transport errors are', () => {
    expect(isTransient({ code: 14 })).toBe(true);
    expect(isTransient(new Error('ECONNREFUSED'))).toBe(true);
    expect(isTransient({ cause: { code: 4 } })).toBe(true);
    expect(isTransient({ cause: { code: 3 } })).toBe(false);
    expect(isTransient({ code: 7 })).toBe(false);
  });
});
