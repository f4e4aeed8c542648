/**
 * Helpers both entity workflows (VM and CocoonSet) share: ordering of observations by resourceVersion,
 * error text of failed activities, error backoff, when to continue as new, patch switches (`on`), and the
 * activity options that bound a call lost with its worker. Workflow code only (deterministic; no I/O).
 */
import {
  ActivityFailure,
  type ActivityOptions,
  ApplicationFailure,
  type LocalActivityOptions,
  patched,
  proxyActivities,
  proxyLocalActivities,
  workflowInfo,
} from '@temporalio/workflow';
import { patchDecision } from './messages.js';

/**
 * True when `incoming` is an older resourceVersion than `current`. Resource versions are etcd revisions in
 * practice, so both are compared numerically; a missing or non-numeric one is never "older" (the caller
 * then takes the incoming observation).
 */
export function olderThan(incoming: string | undefined, current: string | undefined): boolean {
  if (!incoming || !current || !/^\d+$/.test(incoming) || !/^\d+$/.test(current)) return false;
  return BigInt(incoming) < BigInt(current);
}

/** Compares two resourceVersions numerically: < 0, 0, > 0; a missing or non-numeric one sorts last. */
export function compareResourceVersions(a: string | undefined, b: string | undefined): number {
  const num = (v: string | undefined) => (v && /^\d+$/.test(v) ? BigInt(v) : undefined);
  const x = num(a);
  const y = num(b);
  if (x === undefined || y === undefined) return (x === undefined ? 1 : 0) - (y === undefined ? 1 : 0);
  return x < y ? -1 : x > y ? 1 : 0;
}

/**
 * The activity's own error inside what an activity call threw: the cause of an ActivityFailure (a regular
 * activity's wrapper), else the error itself (a local activity's failure may arrive unwrapped).
 */
function activityError(err: unknown): unknown {
  return err instanceof ActivityFailure && err.cause ? err.cause : err;
}

/** The readable message of an error thrown by an activity call (the activity's own error, not the wrapper). */
export function errorMessage(err: unknown): string {
  const e = activityError(err);
  return e instanceof Error ? e.message : String(e);
}

/** The activity failed with the non-retryable `NotFound` application failure (its target object is gone). */
export function isNotFound(err: unknown): boolean {
  const e = activityError(err);
  return e instanceof ApplicationFailure && e.type === 'NotFound';
}

/**
 * Whether the behaviour behind patch `id` applies in this run (messages.ts `patchDecision`). A run this
 * version started (start argument `patches`, set at every start and continue-as-new) takes every patched
 * branch its version knew and records no marker; a branch added later (LEVELED_PATCHES) waits for its next
 * continue-as-new. A run started before `patches` existed asks `patched(id)` where the branch is, as it
 * always did (its history has the markers there). Why no `patched()`: one first called right after a local
 * activity does not replay when a query was answered while that activity ran (the SDK then completes the
 * workflow task early and hands the result over in a new one; a replay hands it over in the first), and a
 * workflow task that fails replay fails on every retry. Found recording a golden history, then seen in CI.
 */
export function on(io: { patches: 'all' | number | undefined }, id: string): boolean {
  const d = patchDecision(io.patches, id);
  return d === 'ask' ? patched(id) : d;
}

/**
 * The run should continue as new: the server suggests it, or its history is past `maxEvents` events or
 * `maxBytes` bytes. Both entity workflows check it between passes, then carry their state over.
 */
export function historyFull(maxEvents: number, maxBytes = Number.POSITIVE_INFINITY): boolean {
  const info = workflowInfo();
  return info.continueAsNewSuggested || info.historyLength > maxEvents || info.historySize > maxBytes;
}

/**
 * Counts a handled signal in an entity workflow's state and keeps the newest resourceVersion signals
 * carried: the `state` query's barrier (tests wait until the count and the version reach what they sent).
 */
export function countSignal(
  state: { signals?: number; lastSignalRV?: string },
  resourceVersion: string | undefined,
): void {
  state.signals = (state.signals ?? 0) + 1;
  if (resourceVersion && (state.lastSignalRV === undefined || olderThan(state.lastSignalRV, resourceVersion)))
    state.lastSignalRV = resourceVersion;
}

/** Error backoff after `failures` consecutive failures (≥ 1): `baseMs` doubling, capped at `maxMs`. */
export function backoffDelay(failures: number, baseMs: number, maxMs: number): number {
  return Math.min(baseMs * 2 ** Math.min(Math.max(failures, 1) - 1, 30), maxMs);
}

/**
 * Heartbeat timeout of the entity workflows' activities. Every activity heartbeats while it runs
 * (src/activities/heartbeat.ts, every HEARTBEAT_INTERVAL_MS), so an attempt whose worker died (killed, OOM,
 * node lost) is timed out by the server after this long and retried on a live worker, instead of after
 * its whole start-to-close timeout. The start-to-close timeouts stay as long as a legitimately slow call
 * needs (the registry client's own 30 s request timeout, the Kubernetes client's); the heartbeat is what
 * tells a slow call from a lost one.
 */
export const ACTIVITY_HEARTBEAT_TIMEOUT = '5s';

/** Options of the Kubernetes activities of the entity workflows (`attempts`: total tries of one call). */
export function kubeActivityOptions(attempts: number): ActivityOptions {
  return {
    startToCloseTimeout: '30s',
    heartbeatTimeout: ACTIVITY_HEARTBEAT_TIMEOUT,
    retry: {
      initialInterval: '500ms',
      maximumInterval: '10s',
      maximumAttempts: attempts,
      nonRetryableErrorTypes: ['NotFound'],
    },
  };
}

/**
 * Options of the Kubernetes activities run as local activities (`attempts`: total tries of one call). No
 * heartbeat: a local activity lives inside its workflow task, and a worker lost mid-call loses that task, so
 * the next worker replays to the call and runs it again. Retries wait in the worker up to the SDK's local
 * retry threshold (1 min), then on a durable timer.
 */
export function kubeLocalActivityOptions(attempts: number): LocalActivityOptions {
  const { heartbeatTimeout: _h, ...rest } = kubeActivityOptions(attempts);
  return rest;
}

/**
 * How a run calls its Kubernetes activities, from its start argument's `kubeIO` field: `local` = local
 * activities (inside the workflow task, one marker event each, no task through the server). Every run this
 * version starts says `local`; a run an older version started (the field absent) keeps regular
 * activities, which its recorded history holds, until it continues as new. No `patched()` id is needed:
 * the mode is in the start argument, which replay sees as the run saw it.
 */
export type KubeIO = 'local' | undefined;

/**
 * The Kubernetes activities `A` of a run whose start said `kubeIO` (see KubeIO), `attempts` total tries of
 * one call. Both forms have the same call signatures; a failure differs in its wrapping only (see
 * `errorMessage`, `isNotFound`).
 */
export function kubeActivities<A>(kubeIO: KubeIO, attempts: number): A {
  return (
    kubeIO === 'local'
      ? proxyLocalActivities<A>(kubeLocalActivityOptions(attempts))
      : proxyActivities<A>(kubeActivityOptions(attempts))
  ) as A;
}

/**
 * Options of the registry activities on `taskQueue`. The client's own request timeout is 30 s; the
 * start-to-close of 45 s bounds a wedged call that ignores it; the heartbeat timeout bounds a lost one.
 * The 3 attempts are for those (a call lost with its worker) and for errors that are not the registry's: an
 * error the registry client reports is not retried here (src/activities/registry.ts `asFailure`), the
 * workflow's backoff retries it.
 */
export function registryActivityOptions(taskQueue: string): ActivityOptions {
  return {
    taskQueue,
    startToCloseTimeout: '45s',
    heartbeatTimeout: ACTIVITY_HEARTBEAT_TIMEOUT,
    retry: { initialInterval: '1s', maximumInterval: '5s', maximumAttempts: 3 },
  };
}
