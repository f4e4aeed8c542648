/**
 * Ownership and classification of a CocoonSet's pods (operator cocoonset/ownership.go, apimachinery
 * `metav1.IsControlledBy`; docs/cocoonset.md#a-pass-in-order, docs/cocoonset.md#failed-main-and-recovery).
 * Pure.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { Annotations, EventReasons, Labels, LifecycleStates, Roles } from '../api/keys.js';
import { type PodLike, podTerminal } from '../api/pod.js';
import type { CocoonSet } from '../api/types.js';

/**
 * True when the pod's **controller** owner reference (the first with `controller: true`) carries the
 * CocoonSet's UID. Labels, kind and name are not looked at; a pod from an earlier same-named CocoonSet
 * (other UID) or without a controller reference is not owned.
 */
export function isControlledBy(pod: PodLike, csUID: string | undefined): boolean {
  const ref = pod.metadata?.ownerReferences?.find((o) => o.controller === true);
  return ref !== undefined && ref.uid === (csUID ?? '');
}

/**
 * The pods (already listed by the name label) that this CocoonSet controls, in list order
 * (docs/cocoonset.md#a-pass-in-order).
 */
export function ownedPods(cs: CocoonSet, pods: readonly V1Pod[]): V1Pod[] {
  return pods.filter((p) => isControlledBy(p, cs.metadata.uid));
}

/** A pod with a deletion timestamp (terminating). */
export function isTerminating(pod: PodLike): boolean {
  return pod.metadata?.deletionTimestamp != null;
}

/**
 * Terminal VM pod: phase `Failed` or lifecycle-state exactly `failed` (lowercase;
 * docs/wire-contract.md#on-pods, docs/cocoonset.md#sub-agent-rebuild-and-dead-letter).
 */
export function isTerminal(pod: PodLike): boolean {
  return (
    podTerminal(pod) || pod.metadata?.annotations?.[Annotations.lifecycleState] === LifecycleStates.failed
  );
}

/**
 * A hibernate round vk-cocoon reported failed: lifecycle-state `failed` on a pod asked to hibernate
 * (`vm.cocoonstack.io/hibernate: "true"`) whose phase is not `Failed`. vk-cocoon fails a round (network
 * resize, snapshot, push, remove) with the VM left in place and running, and retries the round itself
 * (docs/wire-contract.md#on-pods): the pod holds a live VM, not a dead one.
 */
export function hibernateRoundFailed(pod: PodLike): boolean {
  const a = pod.metadata?.annotations;
  return (
    a?.[Annotations.lifecycleState] === LifecycleStates.failed &&
    a?.[Annotations.hibernate] === 'true' &&
    !podTerminal(pod)
  );
}

/**
 * A hibernate round vk-cocoon reported failed, as a set remembers it between passes (pod name → this record,
 * in the CocoonSet's `cocoon-operator.cocoonstack.io/failed-hibernate-rounds` annotation): the pod
 * incarnation it was seen on, and vk-cocoon's message then (at most FAILED_ROUND_MESSAGE_MAX characters).
 */
export interface FailedRound {
  uid: string;
  message: string;
}

/** Longest vk-cocoon message a remembered failed round keeps (the annotation stays small). */
export const FAILED_ROUND_MESSAGE_MAX = 256;

/**
 * The failed rounds recorded in the CocoonSet's annotation (`Annotations.failedHibernateRounds`, JSON written
 * by `noteFailedRounds`' caller); undefined when absent, and when unreadable (someone edited it by hand:
 * the rounds are then forgotten, as the reference never knew them).
 */
export function readFailedRounds(raw: string | undefined): Record<string, FailedRound> | undefined {
  if (!raw) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return undefined;
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return undefined;
  const out: Record<string, FailedRound> = {};
  for (const [name, v] of Object.entries(parsed as Record<string, unknown>)) {
    const r = v as Partial<FailedRound> | null;
    if (typeof r?.uid !== 'string' || typeof r.message !== 'string') return undefined;
    out[name] = { uid: r.uid, message: r.message };
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

/**
 * The failed hibernate rounds to remember after a read of `pods`, given those remembered before (`prev`).
 * A pod seen with `hibernateRoundFailed` is recorded; a recorded one stays while its incarnation (uid) is the
 * same and its lifecycle-state is still `failed` (the round was called off: the hibernate annotation is gone
 * and vk-cocoon, with no new attempt, never writes another state) or `hibernating` (vk-cocoon retries the
 * round). Any other state, another incarnation or a pod no longer read forgets it. Undefined when none is left.
 */
export function noteFailedRounds(
  prev: Readonly<Record<string, FailedRound>> | undefined,
  pods: readonly PodLike[],
): Record<string, FailedRound> | undefined {
  const out: Record<string, FailedRound> = {};
  for (const pod of pods) {
    const name = pod.metadata?.name ?? '';
    const uid = pod.metadata?.uid ?? '';
    const a = pod.metadata?.annotations;
    if (hibernateRoundFailed(pod)) {
      out[name] = {
        uid,
        message: (a?.[Annotations.lifecycleStateMessage] ?? '').slice(0, FAILED_ROUND_MESSAGE_MAX),
      };
      continue;
    }
    const known = prev?.[name];
    const state = a?.[Annotations.lifecycleState];
    if (
      known !== undefined &&
      known.uid === uid &&
      !podTerminal(pod) &&
      (state === LifecycleStates.failed || state === LifecycleStates.hibernating)
    )
      out[name] = known;
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

/**
 * The pod's lifecycle-state `failed` comes from a hibernate round, not from a dead VM: `hibernateRoundFailed`,
 * or a round `rounds` (see `noteFailedRounds`) recorded on this incarnation that was called off since (the
 * annotation is gone; vk-cocoon keeps reporting `failed` until a later round succeeds or the pod is created
 * again, wire contract "sticky failed"). vk-cocoon leaves the VM running through a failed round (or, for a
 * failed restore, the state in the `:hibernate` tag): such a pod is not terminal, whatever the reference's
 * rebuild and failed-main rules say.
 */
export function failedRoundHoldsVM(
  pod: PodLike,
  rounds: Readonly<Record<string, FailedRound>> | undefined,
): boolean {
  if (hibernateRoundFailed(pod)) return true;
  const a = pod.metadata?.annotations;
  return (
    a?.[Annotations.lifecycleState] === LifecycleStates.failed &&
    !podTerminal(pod) &&
    rounds?.[pod.metadata?.name ?? '']?.uid === (pod.metadata?.uid ?? '')
  );
}

/**
 * Why the main counts as failed (`mainPodFailedReason`, docs/cocoonset.md#a-pass-in-order):
 * `PodLifecycleFailed` when the lifecycle-state is `failed` (wins), else `MainAgentFailed` when the phase is
 * `Failed`, else ''.
 */
export function mainPodFailedReason(main: PodLike): '' | 'PodLifecycleFailed' | 'MainAgentFailed' {
  if (main.metadata?.annotations?.[Annotations.lifecycleState] === LifecycleStates.failed) {
    return EventReasons.podLifecycleFailed;
  }
  if (podTerminal(main)) return EventReasons.mainAgentFailed;
  return '';
}

/**
 * The CocoonSet's non-terminating pods by role (`classifyPods` result, docs/cocoonset.md#a-pass-in-order).
 */
export interface Classified {
  /** The main (role `main`); the last one in list order wins. */
  main?: V1Pod;
  /** Sub-agents by slot label parsed as a base-10 int32 (`"01"` → 1, `"-1"` → -1). */
  sub: Map<number, V1Pod>;
  /** Toolboxes keyed by slot **label** (the toolbox name), not by pod name. */
  toolbox: Map<string, V1Pod>;
  /** Every non-terminating pod by name, including unknown roles and unparsable sub slots. */
  allByName: Map<string, V1Pod>;
}

/** Go `strconv.ParseInt(s, 10, 32)` success test. */
function parseSlotLabel(s: string | undefined): number | undefined {
  if (s === undefined || !/^[+-]?[0-9]+$/.test(s)) return undefined;
  const n = Number(s);
  return n >= -2147483648 && n <= 2147483647 ? n : undefined;
}

/**
 * `classifyPods` (docs/cocoonset.md#a-pass-in-order): terminating pods are skipped entirely; every other pod
 * is in `allByName`, and the role label picks its bucket (`main`, `sub-agent` by parsed slot, `toolbox` by
 * slot label). Unknown or missing roles, and sub-agents with an unparsable slot, stay in `allByName` only.
 */
export function classifyPods(pods: readonly V1Pod[]): Classified {
  const out: Classified = { sub: new Map(), toolbox: new Map(), allByName: new Map() };
  for (const pod of pods) {
    if (isTerminating(pod)) continue;
    out.allByName.set(pod.metadata?.name ?? '', pod);
    const labels = pod.metadata?.labels ?? {};
    switch (labels[Labels.role]) {
      case Roles.main:
        out.main = pod;
        break;
      case Roles.subAgent: {
        const slot = parseSlotLabel(labels[Labels.slot]);
        if (slot !== undefined) out.sub.set(slot, pod);
        break;
      }
      case Roles.toolbox:
        out.toolbox.set(labels[Labels.slot] ?? '', pod);
        break;
    }
  }
  return out;
}

/** Byte-order string comparison (Go `sort.Strings`). */
export function compareNames(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** `forEachSorted`: the classified pods in ascending pod-name order. */
export function podsInNameOrder(c: Classified): V1Pod[] {
  return [...c.allByName.keys()].sort(compareNames).map((n) => c.allByName.get(n)!);
}

/** Classified sub-agent slots in ascending order. */
export function subSlotsAscending(c: Classified): number[] {
  return [...c.sub.keys()].sort((a, b) => a - b);
}
