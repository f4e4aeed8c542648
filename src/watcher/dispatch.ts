/**
 * Delivery of routed signals to Temporal (docs/architecture.md#the-watcher): signal-with-start, in event
 * order per workflow id, with bounded global concurrency and retries of transient errors. A delivery that
 * finally fails is logged and handed to `onGiveUp` (the router forgets that payload, so the next event or
 * relist sends the object's state again); it never throws into the process.
 */
import type { Client } from '@temporalio/client';
import type { Logger } from 'pino';
import type { RoutedSignal, WorkflowStart } from './routes.js';

/**
 * The Temporal boundary of the watcher: start `start.workflowType` with `start.args` under `workflowId`
 * if no run is open, and deliver signal `signalName` with the single argument `payload`. Rejects with the
 * client's error (gRPC status in `code` or `cause.code`).
 */
export interface Signaller {
  signalWithStart(
    workflowId: string,
    signalName: string,
    payload: unknown,
    start: WorkflowStart,
  ): Promise<void>;
}

/** The production Signaller: `client.workflow.signalWithStart` on `taskQueue`, with the start's search attributes. */
export function temporalSignaller(client: Client, taskQueue: string): Signaller {
  return {
    async signalWithStart(workflowId, signalName, payload, start) {
      await client.workflow.signalWithStart(start.workflowType, {
        workflowId,
        taskQueue,
        args: start.args,
        typedSearchAttributes: start.searchAttributes,
        signal: signalName,
        signalArgs: [payload],
      });
    },
  };
}

/**
 * gRPC codes that retrying cannot fix: INVALID_ARGUMENT, NOT_FOUND (namespace), ALREADY_EXISTS,
 * PERMISSION_DENIED, FAILED_PRECONDITION, UNIMPLEMENTED, UNAUTHENTICATED.
 */
const PERMANENT_GRPC_CODES = new Set([3, 5, 6, 7, 9, 12, 16]);

/** The first numeric gRPC `code` on the error or its `cause` chain. */
export function grpcCodeOf(err: unknown): number | undefined {
  let e: unknown = err;
  for (let depth = 0; e && typeof e === 'object' && depth < 5; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'number') return code;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

/** True unless the error carries a gRPC code in the permanent set (transport errors are transient). */
export function isTransient(err: unknown): boolean {
  const code = grpcCodeOf(err);
  return code === undefined || !PERMANENT_GRPC_CODES.has(code);
}

export interface DispatcherOptions {
  signaller: Signaller;
  log: Logger;
  /** Deliveries in flight across all workflows (default 32). */
  maxInFlight?: number;
  /** Retry of transient errors: first delay, ceiling (ms) and attempts in all (defaults 200, 10 000, 8). */
  retry?: { initialMs?: number; maxMs?: number; maxAttempts?: number };
  /** Called with a signal that could not be delivered. */
  onGiveUp?: (sig: RoutedSignal) => void;
}

export interface DispatcherStats {
  sent: number;
  failed: number;
  retries: number;
  /** Queued signals replaced by a newer payload for the same object before they were sent. */
  coalesced: number;
  /** Signals queued or in flight. */
  pending: number;
}

interface Lane {
  queue: RoutedSignal[];
  running: boolean;
}

/**
 * Per-workflow FIFO lanes drained one signal at a time (so one workflow sees its signals in event order),
 * at most `maxInFlight` deliveries at once overall. A queued, not yet started signal for the same
 * object at the tail of a lane is replaced by the newer one: payloads are full observations, so the
 * newest supersedes it, and under a Temporal outage a busy object holds one queued entry, not thousands.
 */
export class Dispatcher {
  private readonly lanes = new Map<string, Lane>();
  private readonly maxInFlight: number;
  private inFlight = 0;
  private readonly slotWaiters: Array<() => void> = [];
  private readonly idleWaiters: Array<() => void> = [];
  private readonly counters = { sent: 0, failed: 0, retries: 0, coalesced: 0 };
  private pendingCount = 0;
  private stopped = false;
  private readonly wakeSleepers = new Set<() => void>();
  private readonly retryInitialMs: number;
  private readonly retryMaxMs: number;
  private readonly maxAttempts: number;

  constructor(private readonly opts: DispatcherOptions) {
    this.maxInFlight = Math.max(1, opts.maxInFlight ?? 32);
    this.retryInitialMs = opts.retry?.initialMs ?? 200;
    this.retryMaxMs = opts.retry?.maxMs ?? 10_000;
    this.maxAttempts = Math.max(1, opts.retry?.maxAttempts ?? 8);
  }

  /** Queues a signal behind earlier ones for the same workflow. Ignored after stop(). */
  enqueue(sig: RoutedSignal): void {
    if (this.stopped) return;
    const lane = this.lanes.get(sig.workflowId) ?? { queue: [], running: false };
    this.lanes.set(sig.workflowId, lane);
    const tail = lane.queue[lane.queue.length - 1];
    if (tail && tail.key === sig.key) {
      lane.queue[lane.queue.length - 1] = sig;
      this.counters.coalesced++;
      return;
    }
    lane.queue.push(sig);
    this.pendingCount++;
    if (!lane.running) {
      lane.running = true;
      void this.drain(sig.workflowId, lane);
    }
  }

  /** Resolves when nothing is queued or in flight. */
  idle(): Promise<void> {
    if (this.pendingCount === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * Stops accepting signals and waits up to `graceMs` for queued ones; after that, pending retries give
   * up (their objects are resent by the next process's initial list).
   */
  async stop(graceMs = 5_000): Promise<void> {
    this.stopped = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, graceMs);
    });
    await Promise.race([this.idle(), timeout]);
    clearTimeout(timer);
    for (const wake of this.wakeSleepers) wake();
  }

  /** Delivery counters and the current queue depth. */
  stats(): DispatcherStats {
    return { ...this.counters, pending: this.pendingCount };
  }

  private async drain(workflowId: string, lane: Lane): Promise<void> {
    for (let sig = lane.queue.shift(); sig; sig = lane.queue.shift()) {
      await this.deliver(sig);
      this.pendingCount--;
    }
    lane.running = false;
    this.lanes.delete(workflowId);
    if (this.pendingCount === 0) for (const w of this.idleWaiters.splice(0)) w();
  }

  private async deliver(sig: RoutedSignal): Promise<void> {
    let delay = this.retryInitialMs;
    for (let attempt = 1; ; attempt++) {
      await this.acquire();
      let err: unknown;
      try {
        await this.opts.signaller.signalWithStart(sig.workflowId, sig.signalName, sig.payload, sig.start);
        this.counters.sent++;
        return;
      } catch (e) {
        err = e;
      } finally {
        this.release();
      }
      const transient = isTransient(err);
      if (!transient || attempt >= this.maxAttempts || (this.stopped && attempt > 1)) {
        this.counters.failed++;
        this.opts.log.error(
          {
            workflowId: sig.workflowId,
            signal: sig.signalName,
            attempts: attempt,
            transient,
            err: String(err),
          },
          'signal not delivered; the next event or relist resends this object',
        );
        try {
          this.opts.onGiveUp?.(sig);
        } catch (e) {
          this.opts.log.error({ workflowId: sig.workflowId, err: String(e) }, 'onGiveUp threw');
        }
        return;
      }
      this.counters.retries++;
      this.opts.log.warn(
        { workflowId: sig.workflowId, signal: sig.signalName, attempt, delayMs: delay, err: String(err) },
        'signal failed; retrying',
      );
      await this.sleep(delay);
      delay = Math.min(this.retryMaxMs, delay * 2);
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = (): void => {
        clearTimeout(timer);
        this.wakeSleepers.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.wakeSleepers.add(wake);
    });
  }

  private acquire(): Promise<void> {
    if (this.inFlight < this.maxInFlight) {
      this.inFlight++;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.slotWaiters.push(resolve));
  }

  private release(): void {
    const next = this.slotWaiters.shift();
    if (next) next();
    else this.inFlight--;
  }
}
