/**
 * One heartbeat mechanism for every activity of the operator: a worker interceptor that heartbeats while
 * an activity runs. With the entity workflows' short heartbeat timeout (src/workflows/entity.ts
 * ACTIVITY_HEARTBEAT_TIMEOUT) the server notices an attempt whose worker died within seconds and retries
 * it on a live worker; heartbeats are also what delivers a workflow's cancellation to a running activity
 * (whose `cancellationSignal` aborts its HTTP request).
 */
import type { ActivityInterceptorsFactory } from '@temporalio/worker';

/** Heartbeat period when the activity has no heartbeat timeout (cancellation delivery only), ms. */
const HEARTBEAT_INTERVAL_MS = 1_000;

/**
 * Worker interceptor factory (`interceptors: { activity: [heartbeatWhileRunning] }`): heartbeats every
 * quarter of the activity's heartbeat timeout (at most every HEARTBEAT_INTERVAL_MS), from one period after
 * the start until it returns or throws. The SDK throttles what reaches the server, so the period only bounds detection latency. Local
 * activities are left alone.
 */
export const heartbeatWhileRunning: ActivityInterceptorsFactory = (ctx) => ({
  inbound: {
    async execute(input, next) {
      // A local activity has no server-side heartbeat: it lives inside its workflow task.
      if (ctx.info.isLocal) return next(input);
      const timeoutMs = ctx.info.heartbeatTimeoutMs;
      const period = timeoutMs ? Math.min(HEARTBEAT_INTERVAL_MS, timeoutMs / 4) : HEARTBEAT_INTERVAL_MS;
      // The first heartbeat after one period, not at once: a call shorter than that (a registry HEAD at
      // ordinary latency) sends none, and the server has nothing to record (each heartbeat is an RPC, and a
      // billed action on Temporal Cloud). The heartbeat timeout still counts from the start.
      const timer = setInterval(() => ctx.heartbeat(), period);
      try {
        return await next(input);
      } finally {
        clearInterval(timer);
      }
    },
  },
});
