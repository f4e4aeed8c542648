/**
 * The VM workflow's scheduling bookkeeping, apart from its transition logic (src/workflows/vm.ts): how long
 * it waits before a retry, a fallback re-read or a deadline, and the error backoff. Pure functions of the
 * workflow's state and workflow time (deterministic).
 */

import { EventReasons } from '../api/keys.js';
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
/** The same once the wake has waited past its deadline (`late`, patch `set-wake-outlasts-deadline`) on a pod that is there. */
export const SET_WAKE_LATE_POLL_MS = 60_000;

/**
 * The two transitions' deadlines (docs/hibernation.md#hibernate, docs/hibernation.md#wake): the in-flight
 * phase whose lastTransitionTime starts the clock, how long it may take (ms), and the Event reason when it
 * does not finish in time.
 */
export const TRANSITIONS = {
  hibernate: {
    phase: 'Hibernating',
    timeoutMs: HIBERNATE_TIMEOUT_MS,
    timedOut: EventReasons.hibernateTimedOut,
  },
  wake: { phase: 'Waking', timeoutMs: WAKE_TIMEOUT_MS, timedOut: EventReasons.wakeTimedOut },
} as const;
export type TransitionKind = keyof typeof TRANSITIONS;

/** True when `cr`'s `kind` transition is in flight past its deadline at `nowMs` (strictly after, as the reference). */
export function pastDeadline(cr: TrackedCR, kind: TransitionKind, nowMs: number): boolean {
  const { phase, timeoutMs } = TRANSITIONS[kind];
  return deadlineExceeded(cr.status, phase, timeoutMs, nowMs);
}

/**
 * How often a set's desire without a watch re-reads the pod (ms). A Wake whose pod is gone looks every
 * SET_WAKE_POLL_MS, late or not: the next pod (vm.ts carryWakeOver) is usually there within a second. A Wake
 * a CocoonHibernation holds looks as seldom as a Hibernate desire.
 */
export function setDesireRecheckMs(state: VMState): number {
  const d = state.setDesire;
  if (d?.desire !== 'Wake') return SET_DESIRE_RECHECK_MS;
  // A Wake a CocoonHibernation holds on a present pod (its conflict reported: vm.ts, patch
  // `set-wake-waits-for-cr`) waits on that CR's signals, as a Hibernate desire does.
  if (d.conflict !== undefined && d.goneSince === undefined) return SET_DESIRE_RECHECK_MS;
  return d.late && d.goneSince === undefined ? SET_WAKE_LATE_POLL_MS : SET_WAKE_POLL_MS;
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
    for (const { phase, timeoutMs } of Object.values(TRANSITIONS))
      consider(after(deadlineOf(cr.status, phase, timeoutMs)));
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
  return pastDeadline(cr, 'hibernate', nowMs) || pastDeadline(cr, 'wake', nowMs);
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

/**
 * The workflow's timer fired without a signal: the coming pass re-reads the world first when the last
 * re-read is older than the fallback period (FALLBACK_RESYNC_MS while a transition or deletion is in flight,
 * setDesireRecheckMs under a set's desire). Never clears a pending re-read (a NotFound asked for one): only a
 * successful re-read does (`resynced`).
 */
export function timerFired(state: VMState): void {
  const every = state.setDesire
    ? Math.min(FALLBACK_RESYNC_MS, setDesireRecheckMs(state))
    : FALLBACK_RESYNC_MS;
  if (state.lastResyncAt === undefined || Date.now() - state.lastResyncAt >= every)
    state.needResync = state.needResync || inFlight(state) || state.setDesire !== undefined;
}

/** A re-read of the world succeeded: the fallback period restarts and the re-read backoff ends. */
export function resynced(state: VMState): void {
  state.needResync = false;
  state.resyncFailures = 0;
  state.resyncAt = undefined;
  state.lastResyncAt = Date.now();
}

/**
 * At the start of a round, whether `cr` gets a pass: not while it backs off after a failed pass, unless
 * its deadline fell due meanwhile. When it does, the backoff is over, and a retry time that has come is
 * spent (this pass is the retry; left set, nextWake would return it for ever and the workflow would wake
 * on a timer every second after a Failed transition recovered).
 */
export function passDue(cr: TrackedCR, nowMs: number): boolean {
  if ((cr.backoffUntil ?? 0) > nowMs && !deadlineDue(cr, nowMs)) return false;
  cr.backoffUntil = undefined;
  if (cr.retryAt !== undefined && cr.retryAt <= nowMs) cr.retryAt = undefined;
  return true;
}

/** The user's own action (a spec edit, a deletion) waits out neither a Failed transition's retry time nor a backoff. */
export function userActed(cr: TrackedCR): void {
  cr.retryAt = undefined;
  cr.backoffUntil = undefined;
}

/** A Failed transition whose retry time has not come: its path does nothing yet (a spec edit clears the wait). */
export function waitingOutFailure(cr: TrackedCR): boolean {
  return cr.status?.phase === 'Failed' && (cr.retryAt ?? 0) > Date.now();
}

/** A transition just went Failed at its deadline: it retries FAILED_RETRY_MS from now (or at once on a spec edit). */
export function retryAfterFailure(cr: TrackedCR): void {
  cr.retryAt = Date.now() + FAILED_RETRY_MS;
}

/**
 * A deleting CR waits on vk until `untilMs` (epoch ms): it looks again then, or at the fallback re-read if
 * that comes sooner.
 */
export function lookAgainBy(cr: TrackedCR, untilMs: number): void {
  cr.retryAt = Math.min(untilMs, Date.now() + FALLBACK_RESYNC_MS);
}
