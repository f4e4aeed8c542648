/**
 * The VM workflow's scheduling bookkeeping, apart from its transition logic (src/workflows/vm.ts): how long
 * it waits before a retry, a fallback re-read or a deadline, and the error backoff. Pure functions of the
 * workflow's state and workflow time (deterministic).
 */

import { deadlineExceeded, deadlineOf, HIBERNATE_TIMEOUT_MS, WAKE_TIMEOUT_MS } from '../hibernation/rules.js';
import { backoffDelay } from './entity.js';
import type { TrackedCR, VMState } from './vm.js';

/** Re-read the world this often while a transition is in flight, in case a watch event was missed. */
export const FALLBACK_RESYNC_MS = 60_000;
/** After a deadline turned a transition Failed, retry it after this long (or sooner on any change). */
export const FAILED_RETRY_MS = 30_000;
/** Error backoff for a CR's pass: 1 s doubling to 60 s. */
export const BACKOFF_BASE_MS = 1_000;
export const BACKOFF_MAX_MS = 60_000;
/** Deleting CRs wait for an in-flight vk hibernate round at most this long before dropping the tag. */
export const DELETE_ROUND_WAIT_MS = HIBERNATE_TIMEOUT_MS;
/**
 * Deleting CRs wait for an in-flight vk wake (which pulls the tag) at most this long after the deletion
 * started, then keep the tag: room for a hibernate round to finish and the wake that follows it.
 */
export const DELETE_WAKE_WAIT_MS = HIBERNATE_TIMEOUT_MS + WAKE_TIMEOUT_MS;
/**
 * While a CocoonSet's desire keeps this workflow alive (no watch event reaches it when no CocoonHibernation
 * targets the pod), re-read the pod this often: a pod deleted meanwhile ends the desire.
 */
export const SET_DESIRE_RECHECK_MS = 10 * 60_000;
/** While an un-suspend waits for its VM to run again (to drop the leftover tag), re-read the pod this often. */
export const SET_WAKE_POLL_MS = 5_000;

/** How often a set's desire without a watch re-reads the pod (ms). */
export function setDesireRecheckMs(state: VMState): number {
  return state.setDesire?.desire === 'Wake' ? SET_WAKE_POLL_MS : SET_DESIRE_RECHECK_MS;
}

/** A transition in flight (or a deletion): the world is re-read every FALLBACK_RESYNC_MS meanwhile. */
export function inFlight(state: VMState): boolean {
  return Object.values(state.crs).some(
    (cr) => cr.deleting || cr.status?.phase === 'Hibernating' || cr.status?.phase === 'Waking',
  );
}

/** Earliest time any CR wants a pass without a signal: deadlines, retries, fallback re-reads. */
export function nextWake(state: VMState): number | undefined {
  let at: number | undefined;
  // A time at or before the last pass's start was already served by it: never sleep on a past time again
  // (a CR whose deadline passed while it waits on something else would otherwise spin on 1 ms timers).
  const spent = state.lastPassAt ?? Number.NEGATIVE_INFINITY;
  const consider = (t: number | undefined, floor = Number.NEGATIVE_INFINITY) => {
    if (t === undefined) return;
    const when = Math.max(t, floor);
    if (when > spent && (at === undefined || when < at)) at = when;
  };
  // Deadlines are strict (now − LTT > timeout; LTT at second precision, now in ms): look 1 ms after.
  const after = (t: number | undefined) => (t === undefined ? undefined : t + 1);
  for (const cr of Object.values(state.crs)) {
    // A CR backing off after a failed pass gets no retry before backoffUntil; its deadline is not moved
    // by the backoff (a registry outage must turn Hibernating into Failed at 3m0s, not at 3m0s + backoff).
    const floor = cr.backoffUntil ?? Number.NEGATIVE_INFINITY;
    consider(cr.backoffUntil);
    consider(cr.retryAt, floor);
    consider(after(deadlineOf(cr.status, 'Hibernating', HIBERNATE_TIMEOUT_MS)));
    consider(after(deadlineOf(cr.status, 'Waking', WAKE_TIMEOUT_MS)));
  }
  if (state.needResync) consider(state.resyncAt);
  if (inFlight(state)) consider((state.lastResyncAt ?? Date.now()) + FALLBACK_RESYNC_MS);
  // From the later of the last re-read and the last round: a round without a re-read (the set's signal
  // carried nothing newer) leaves lastResyncAt in the past, and a time before the round counts as spent.
  if (state.setDesire)
    consider(Math.max(state.lastResyncAt ?? Date.now(), state.lastPassAt ?? 0) + setDesireRecheckMs(state));
  return at;
}

/** The in-flight phase's deadline has passed: a pass is due whatever the error backoff says. */
export function deadlineDue(cr: TrackedCR, nowMs: number): boolean {
  return (
    deadlineExceeded(cr.status, 'Hibernating', HIBERNATE_TIMEOUT_MS, nowMs) ||
    deadlineExceeded(cr.status, 'Waking', WAKE_TIMEOUT_MS, nowMs)
  );
}

/** Counts a failed pass of `cr` and backs it off: BACKOFF_BASE_MS doubling to BACKOFF_MAX_MS. */
export function backoff(cr: TrackedCR): void {
  cr.failures = (cr.failures ?? 0) + 1;
  cr.backoffUntil = Date.now() + backoffDelay(cr.failures, BACKOFF_BASE_MS, BACKOFF_MAX_MS);
}

/** Counts a failed re-read of the world and schedules the next one (the same backoff). */
export function backoffResync(state: VMState): void {
  state.resyncFailures = (state.resyncFailures ?? 0) + 1;
  state.resyncAt = Date.now() + backoffDelay(state.resyncFailures, BACKOFF_BASE_MS, BACKOFF_MAX_MS);
}
