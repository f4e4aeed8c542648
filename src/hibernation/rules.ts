/**
 * The CocoonHibernation rules as pure functions: routing, completion gates, deadlines, and the status
 * writers' merge-patch bodies (docs/hibernation.md#one-pass, docs/hibernation.md#status-and-conditions). No
 * I/O and no clock reads: callers pass `nowMs`, so the VM workflow (deterministic time) and unit tests share
 * them.
 */
import {
  Annotations,
  CONDITION_CONFLICT,
  CONDITION_DELETE_FAILING,
  CONDITION_PROBE_FAILING,
  CONDITION_READY,
  LifecycleStates,
} from '../api/keys.js';
import type { PodObservation } from '../api/observe.js';
import { parseGeneration } from '../api/pod.js';
import type { CocoonHibernation, Condition, HibernationPhase } from '../api/types.js';

/** Hibernate deadline, 3 min (docs/hibernation.md#timeouts-and-retries). */
export const HIBERNATE_TIMEOUT_MS = 3 * 60_000;
/** Wake deadline, 5 min (docs/hibernation.md#timeouts-and-retries). */
export const WAKE_TIMEOUT_MS = 5 * 60_000;

export type Path = 'hibernate' | 'wake';
export type Status = NonNullable<CocoonHibernation['status']>;

/** A CR as the rules see it: generation, uid, names, spec and status. */
export interface CRView {
  name: string;
  namespace: string;
  uid?: string;
  generation?: number;
  podRef?: string;
  desire?: string;
  status?: Status;
}

/**
 * Reverse-desire routing (docs/hibernation.md#reverse-desire-routing): an in-flight transition finishes
 * before the reverse one starts. Returns the path, or `{ unknown }` for a desire that is neither Hibernate
 * nor Wake.
 */
export function route(desire: string | undefined, phase: string | undefined): Path | { unknown: string } {
  if (desire === 'Hibernate') return phase === 'Waking' ? 'wake' : 'hibernate';
  if (desire === 'Wake') return phase === 'Hibernating' ? 'hibernate' : 'wake';
  return { unknown: desire ?? '' };
}

function ann(pod: PodObservation, key: string): string {
  return pod.annotations?.[key] ?? '';
}

/** `vm.cocoonstack.io/hibernate` is exactly "true". */
export function hibernateAnnotated(pod: PodObservation): boolean {
  return ann(pod, Annotations.hibernate) === 'true';
}

/**
 * vk-cocoon's reason when it reported the pod's last round failed (lifecycle-state `failed`): its
 * lifecycle-state-message, or "no message"; undefined when the state is not `failed`
 * (docs/hibernation.md#hibernate, #wake: the deadline's message carries it).
 */
export function vkFailure(pod: PodObservation): string | undefined {
  return ann(pod, Annotations.lifecycleState) === LifecycleStates.failed
    ? ann(pod, Annotations.lifecycleStateMessage) || 'no message'
    : undefined;
}

/**
 * vk-cocoon manages the pod's VM: `cocoonset.cocoonstack.io/managed` is exactly "true". vk-cocoon adopts
 * the VM of any other pod (a static toolbox's) and never hibernates it (docs/hibernation.md#hibernate).
 */
export function vkManaged(pod: PodObservation): boolean {
  return ann(pod, Annotations.managed) === 'true';
}

/**
 * Hibernate completion gate before the registry probe (docs/hibernation.md#hibernate): lifecycle-state is
 * `hibernated` and its observed generation is at least the pod's CocoonSet generation stamp.
 */
export function hibernateGateOpen(pod: PodObservation): boolean {
  return (
    ann(pod, Annotations.lifecycleState) === LifecycleStates.hibernated &&
    parseGeneration(ann(pod, Annotations.lifecycleObservedGeneration)) >=
      parseGeneration(ann(pod, Annotations.cocoonSetGeneration))
  );
}

/** Wake completion gate (docs/hibernation.md#wake): a running container and a non-empty VM id. */
export function wakeGateOpen(pod: PodObservation): boolean {
  return pod.containerRunning === true && ann(pod, Annotations.vmID) !== '';
}

/** Ready.lastTransitionTime in epoch ms, or undefined when absent or unparsable. */
export function readyTransitionMs(status: Status | undefined): number | undefined {
  const ltt = status?.conditions?.find((c) => c.type === CONDITION_READY)?.lastTransitionTime;
  if (!ltt) return undefined;
  const t = Date.parse(ltt);
  return Number.isNaN(t) || t <= 0 ? undefined : t;
}

/**
 * The deadline of the in-flight phase in epoch ms: Ready.lastTransitionTime + timeout while the cached
 * phase is `phase`; undefined when the phase differs or the timestamp is missing
 * (docs/hibernation.md#timeouts-and-retries).
 */
export function deadlineOf(
  status: Status | undefined,
  phase: HibernationPhase,
  timeoutMs: number,
): number | undefined {
  if (status?.phase !== phase) return undefined;
  const t = readyTransitionMs(status);
  return t === undefined ? undefined : t + timeoutMs;
}

/** Deadline strictly exceeded (docs/hibernation.md#timeouts-and-retries: `now − LTT > timeout`). */
export function deadlineExceeded(
  status: Status | undefined,
  phase: HibernationPhase,
  timeoutMs: number,
  nowMs: number,
): boolean {
  const d = deadlineOf(status, phase, timeoutMs);
  return d !== undefined && nowMs > d;
}

/** RFC 3339 at second precision, as metav1.Time serializes. */
export function rfc3339(ms: number): string {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** Go's Duration.String() for whole seconds/minutes/hours as used in messages: 180000 → "3m0s". */
export function goDuration(ms: number): string {
  const total = Math.floor(ms / 1000);
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  if (h > 0) return `${h}h${m}m${s}s`;
  if (m > 0) return `${m}m${s}s`;
  return `${s}s`;
}

/** Go's `%q` for the ASCII strings that reach messages (JSON quoting agrees with strconv.Quote there). */
export function goQuote(s: string): string {
  return JSON.stringify(s);
}

/** The Ready condition each phase maps to (docs/hibernation.md#status-and-conditions table). */
export function readyConditionFor(
  phase: HibernationPhase,
  generation: number,
): Omit<Condition, 'lastTransitionTime'> {
  const done = phase === 'Hibernated' || phase === 'Active';
  return {
    type: CONDITION_READY,
    status: done ? 'True' : 'False',
    reason: done ? 'Done' : phase === 'Failed' ? 'Failed' : 'Pending',
    message: phase,
    observedGeneration: generation,
  };
}

/**
 * apimachinery SetStatusCondition: append with LTT=now; on a status flip update LTT; otherwise keep LTT;
 * reason, message and observedGeneration always overwritten. Returns a new list.
 */
export function setCondition(
  conditions: Condition[] | undefined,
  next: Omit<Condition, 'lastTransitionTime'>,
  nowMs: number,
  forceTransition = false,
): Condition[] {
  const list = (conditions ?? []).map((c) => ({ ...c }));
  const i = list.findIndex((c) => c.type === next.type);
  if (i < 0) {
    list.push({ ...next, lastTransitionTime: rfc3339(nowMs) });
    return list;
  }
  const old = list[i]!;
  const flipped = old.status !== next.status;
  list[i] = {
    ...old,
    ...next,
    lastTransitionTime:
      flipped || forceTransition || !old.lastTransitionTime ? rfc3339(nowMs) : old.lastTransitionTime,
  };
  return list;
}

/** A merge-patch body for the status subresource. */
export interface StatusPatch {
  status: Partial<Status>;
}

function sameConditions(a: Condition[] | undefined, b: Condition[] | undefined): boolean {
  return JSON.stringify(a ?? []) === JSON.stringify(b ?? []);
}

/**
 * setPhase (docs/hibernation.md#status-and-conditions): null when phase, vmName and observedGeneration
 * already match; otherwise the patch, with the Ready.lastTransitionTime forced to now when entering
 * Hibernating/Waking from another phase.
 */
export function setPhasePatch(
  cr: CRView,
  phase: HibernationPhase,
  vmName: string,
  nowMs: number,
): StatusPatch | null {
  const gen = cr.generation ?? 0;
  const st = cr.status;
  if (st?.phase === phase && (st.vmName ?? '') === vmName && (st.observedGeneration ?? 0) === gen)
    return null;
  const force = (phase === 'Hibernating' || phase === 'Waking') && st?.phase !== phase;
  const conditions = setCondition(st?.conditions, readyConditionFor(phase, gen), nowMs, force);
  return { status: { observedGeneration: gen, phase, vmName, conditions } };
}

/**
 * markPending (docs/hibernation.md#status-and-conditions): never demotes Hibernated/Waking; no-op when
 * already Pending at this generation with the same message; vmName untouched.
 */
export function markPendingPatch(cr: CRView, message: string, nowMs: number): StatusPatch | null {
  const gen = cr.generation ?? 0;
  const st = cr.status;
  if (st?.phase === 'Hibernated' || st?.phase === 'Waking') return null;
  const ready = st?.conditions?.find((c) => c.type === CONDITION_READY);
  if (st?.phase === 'Pending' && (st.observedGeneration ?? 0) === gen && ready?.message === message)
    return null;
  const conditions = setCondition(
    st?.conditions,
    { type: CONDITION_READY, status: 'False', reason: 'Pending', message, observedGeneration: gen },
    nowMs,
  );
  return { status: { observedGeneration: gen, phase: 'Pending', conditions } };
}

/**
 * markFailed (docs/hibernation.md#status-and-conditions): phase Failed with the message; vmName untouched.
 * Returns null when the status already says exactly this (the reference sends an empty diff, which the
 * apiserver ignores).
 */
export function markFailedPatch(cr: CRView, message: string, nowMs: number): StatusPatch | null {
  const gen = cr.generation ?? 0;
  const st = cr.status;
  const conditions = setCondition(
    st?.conditions,
    { type: CONDITION_READY, status: 'False', reason: 'Failed', message, observedGeneration: gen },
    nowMs,
  );
  if (
    st?.phase === 'Failed' &&
    (st.observedGeneration ?? 0) === gen &&
    sameConditions(st.conditions, conditions)
  )
    return null;
  return { status: { observedGeneration: gen, phase: 'Failed', conditions } };
}

/**
 * Sets (with `message`) or removes (`undefined`) one of the conditions this port adds beside Ready: True
 * with `reason` and the message; null when the status already says exactly that.
 */
function ownConditionPatch(
  cr: CRView,
  type: string,
  reason: string,
  message: string | undefined,
  nowMs: number,
): StatusPatch | null {
  const st = cr.status;
  const existing = st?.conditions?.find((c) => c.type === type);
  if (message === undefined) {
    if (!existing) return null;
    return { status: { conditions: (st?.conditions ?? []).filter((c) => c.type !== type) } };
  }
  const conditions = setCondition(
    st?.conditions,
    { type, status: 'True', reason, message, observedGeneration: cr.generation ?? 0 },
    nowMs,
  );
  if (sameConditions(st?.conditions, conditions)) return null;
  return { status: { conditions } };
}

/**
 * The DesireConflict condition this port adds (not in the reference): True on a CR whose desire loses to
 * another live CR's in-flight or older desire on the same VM, removed when it no longer conflicts. Null when
 * nothing changes.
 */
export function conflictPatch(
  cr: CRView,
  conflictMessage: string | undefined,
  nowMs: number,
): StatusPatch | null {
  return ownConditionPatch(cr, CONDITION_CONFLICT, 'AnotherCRHoldsVM', conflictMessage, nowMs);
}

/**
 * The status write of a CR that loses the VM to another CR or a suspended set (`conflictMessage`): the
 * DesireConflict condition (`conflictPatch`), and a CR that has no phase yet also shows `Pending` with the
 * same message, so `kubectl get` never shows it blank. Null when the condition is already set (nothing is
 * written then, even for a blank phase: a workflow recorded before this rule made no write there, and
 * replay must match).
 *
 * `loserNotReady` (the VM workflow passes `patched('conflict-loser-not-ready')`): a loser whose phase says
 * its old desire is done (`Hibernated`, `Active`: a desire edited while another holder keeps the VM) keeps
 * that phase, which is still true of the VM, but its Ready condition turns False, reason `Pending`, with the
 * conflict as message and the current generation; before, it went on saying Ready=True for the old desire.
 * A `Pending` loser's Ready message follows the conflict's too (before, it kept the first one, e.g. "its
 * transition is in flight" after the holder had finished).
 *
 * `holderPath` (the VM workflow passes the holder's path behind `patched('loser-phase-follows-holder')`):
 * a loser whose done phase the holder is undoing (`Hibernated` while the holder wakes the VM, `Active`
 * while it hibernates it: two CRs hibernated the VM, then one was edited to Wake) goes `Pending` with the
 * conflict as message, as a loser with no phase does; before, it said `Hibernated` on a running VM (found by
 * a new-user run).
 */
export function conflictWaitPatch(
  cr: CRView,
  conflictMessage: string,
  nowMs: number,
  loserNotReady = false,
  holderPath?: Path,
): StatusPatch | null {
  const conflict = conflictPatch(cr, conflictMessage, nowMs);
  const phase = cr.status?.phase;
  const undone =
    (phase === 'Hibernated' && holderPath === 'wake') || (phase === 'Active' && holderPath === 'hibernate');
  if (undone) {
    const gen = cr.generation ?? 0;
    const conditions = setCondition(
      (conflict ? applyStatusPatch(cr, conflict) : cr).status?.conditions,
      {
        type: CONDITION_READY,
        status: 'False',
        reason: 'Pending',
        message: conflictMessage,
        observedGeneration: gen,
      },
      nowMs,
    );
    return { status: { observedGeneration: gen, phase: 'Pending', conditions } };
  }
  if (loserNotReady && (phase === 'Hibernated' || phase === 'Active' || phase === 'Pending')) {
    const gen = cr.generation ?? 0;
    const conditions = setCondition(
      (conflict ? applyStatusPatch(cr, conflict) : cr).status?.conditions,
      {
        type: CONDITION_READY,
        status: 'False',
        reason: 'Pending',
        message: conflictMessage,
        observedGeneration: gen,
      },
      nowMs,
    );
    if (sameConditions(cr.status?.conditions, conditions) && (cr.status?.observedGeneration ?? 0) === gen)
      return null;
    return { status: { observedGeneration: gen, conditions } };
  }
  if (!conflict || phase) return conflict;
  const pending = markPendingPatch(cr, conflictMessage, nowMs);
  if (!pending) return conflict;
  const both = conflictPatch(applyStatusPatch(cr, pending), conflictMessage, nowMs);
  return { status: { ...pending.status, ...(both ?? conflict).status } };
}

/**
 * The status write of a CR that waits for its pod (gone, being deleted, or without a VM name yet:
 * `pendingMessage`), when `markPendingPatch` alone would leave it saying something false. Deliberate (the
 * reference has neither case):
 * - a CR that lost the VM (DesireConflict) to a holder that no longer holds it (the caller decides):
 *   the condition goes; it named a holder since deleted for as long as the pod stayed away;
 * - a `Hibernated` CR whose desire is now Wake (edited, or a conflict loser) keeps its phase, which is still
 *   true of the VM (markPending never demotes it), but Ready is False, reason `Pending`, with
 *   `pendingMessage` at the current generation; it said Ready=True "Hibernated" for the old desire. One
 *   whose Ready is already False (a conflict loser) says `pendingMessage` too.
 * Otherwise the same as `markPendingPatch`. Null when nothing changes.
 */
export function podWaitPatch(
  cr: CRView,
  pendingMessage: string,
  nowMs: number,
  clearConflict: boolean,
): StatusPatch | null {
  const cleared = clearConflict ? conflictPatch(cr, undefined, nowMs) : null;
  const after = cleared ? applyStatusPatch(cr, cleared) : cr;
  let pending = markPendingPatch(after, pendingMessage, nowMs);
  const ready = after.status?.conditions?.find((c) => c.type === CONDITION_READY);
  if (
    !pending &&
    after.status?.phase === 'Hibernated' &&
    (cr.desire === 'Wake' || ready?.status === 'False')
  ) {
    const gen = cr.generation ?? 0;
    const conditions = setCondition(
      after.status?.conditions,
      {
        type: CONDITION_READY,
        status: 'False',
        reason: 'Pending',
        message: pendingMessage,
        observedGeneration: gen,
      },
      nowMs,
    );
    if (
      !sameConditions(after.status?.conditions, conditions) ||
      (after.status?.observedGeneration ?? 0) !== gen
    )
      pending = { status: { observedGeneration: gen, conditions } };
  }
  if (!cleared) return pending;
  return { status: { ...cleared.status, ...(pending?.status ?? {}) } };
}

/**
 * The SnapshotProbeFailing condition this port adds (not in the reference, whose status only says
 * `Hibernating` while its probes fail): True with the probe's error while HEAD of the snapshot fails,
 * removed by the next probe that answers. Null when nothing changes.
 */
export function probeFailingPatch(
  cr: CRView,
  message: string | undefined,
  nowMs: number,
): StatusPatch | null {
  return ownConditionPatch(cr, CONDITION_PROBE_FAILING, 'RegistryError', message, nowMs);
}

/**
 * The SnapshotDeleteFailing condition this port adds (not in the reference, which logs the failed DELETE and
 * goes Active with the tag still there): True with the error while a wake's DELETE of the spent tag fails,
 * removed by the DELETE that succeeds. Null when nothing changes.
 */
export function deleteFailingPatch(
  cr: CRView,
  message: string | undefined,
  nowMs: number,
): StatusPatch | null {
  return ownConditionPatch(cr, CONDITION_DELETE_FAILING, 'RegistryError', message, nowMs);
}

/** The CR has this port's DesireConflict condition set (it lost the VM to another CR's desire). */
export function conflicting(cr: CRView): boolean {
  return (cr.status?.conditions ?? []).some((c) => c.type === CONDITION_CONFLICT && c.status === 'True');
}

/**
 * The CR's `:hibernate` tag is spent (ours): its wake ran the VM and the DELETE of the tag failed (phase
 * `Waking` with `SnapshotDeleteFailing` True, which only that failure writes). vk-cocoon restores any new pod
 * of the VM from a tag that exists, so until the DELETE succeeds a re-created pod would roll the VM back:
 * the VM workflow keeps retrying the DELETE even with the pod gone, and a CocoonSet holds the re-create back.
 */
export function tagSpent(status: Pick<Status, 'phase' | 'conditions'> | undefined): boolean {
  return (
    status?.phase === 'Waking' &&
    (status.conditions ?? []).some((c) => c.type === CONDITION_DELETE_FAILING && c.status === 'True')
  );
}

/** Applies a status patch to a CR view locally (what the apiserver's merge would produce). */
export function applyStatusPatch<T extends CRView>(cr: T, patch: StatusPatch): T {
  return { ...cr, status: { ...(cr.status ?? {}), ...patch.status } };
}

/**
 * Holder rule of the deletion flow (docs/hibernation.md#deletion-and-tag-gc, fixes 472581f/36df05a): another
 * live CR (different uid, not deleting) that recorded the same VM or targets the same pod keeps the
 * `:hibernate` tag alive.
 */
export function heldByAnother(
  self: { uid?: string; podRef?: string; vmName: string },
  others: Array<{ uid?: string; deleting?: boolean; podRef?: string; status?: Status }>,
): boolean {
  return others.some(
    (o) =>
      o.uid !== self.uid &&
      !o.deleting &&
      ((o.status?.vmName ?? '') === self.vmName || (o.podRef ?? '') === self.podRef),
  );
}
