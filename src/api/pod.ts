/**
 * Pure readers of the pod-side wire contract (cocoon-common meta/pod.go, meta/lifecycle.go,
 * meta/hibernate.go, meta/vmname.go; docs/cocoonset.md#pods). No I/O.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { Annotations } from './keys.js';

/** Minimal pod shape the readers need, so workflow code can pass plain JSON. */
export type PodLike = Pick<V1Pod, 'metadata' | 'status' | 'spec'>;

function annotation(pod: PodLike | undefined, key: string): string {
  return pod?.metadata?.annotations?.[key] ?? '';
}

/** Parses a decimal int64 annotation as Go's strconv.ParseInt would accept it; anything else reads 0. */
export function parseGeneration(raw: string | undefined): number {
  if (!raw || !/^[+-]?\d+$/.test(raw)) return 0;
  const n = Number(raw);
  return Number.isSafeInteger(n) ? n : 0;
}

/** `vm.cocoonstack.io/name`, or '' when absent. */
export function vmNameOf(pod: PodLike | undefined): string {
  return annotation(pod, Annotations.vmName);
}

/** `vm.cocoonstack.io/id`, or ''. */
export function vmIDOf(pod: PodLike | undefined): string {
  return annotation(pod, Annotations.vmID);
}

/** True only when `vm.cocoonstack.io/hibernate` is exactly "true". */
export function hibernateRequested(pod: PodLike | undefined): boolean {
  return annotation(pod, Annotations.hibernate) === 'true';
}

/** True only when `vm.cocoonstack.io/restore-from-hibernate` is exactly "true". */
export function restoreFromHibernate(pod: PodLike | undefined): boolean {
  return annotation(pod, Annotations.restoreFromHibernate) === 'true';
}

export interface LifecycleStatus {
  state: string;
  observedGeneration: number;
  message: string;
}

/** The lifecycle triple vk-cocoon writes atomically (docs/wire-contract.md#on-pods). */
export function lifecycleOf(pod: PodLike | undefined): LifecycleStatus {
  return {
    state: annotation(pod, Annotations.lifecycleState),
    observedGeneration: parseGeneration(annotation(pod, Annotations.lifecycleObservedGeneration)),
    message: annotation(pod, Annotations.lifecycleStateMessage),
  };
}

/** `cocoonset.cocoonstack.io/generation` stamp; 0 when missing or unparsable. */
export function cocoonSetGenerationOf(pod: PodLike | undefined): number {
  return parseGeneration(annotation(pod, Annotations.cocoonSetGeneration));
}

/** Any container status with a non-null `state.running` (init containers are not looked at). */
export function containerRunning(pod: PodLike | undefined): boolean {
  return (pod?.status?.containerStatuses ?? []).some((c) => c.state?.running != null);
}

/** A `Ready` condition with status True. */
export function podReady(pod: PodLike | undefined): boolean {
  return (pod?.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

/** Only phase Failed is terminal (Succeeded is not; docs/cocoonset.md#a-pass-in-order). */
export function podTerminal(pod: PodLike | undefined): boolean {
  return pod?.status?.phase === 'Failed';
}

/** `vk-<ns>-<cs>-<slot>` (agents). */
export function vmNameForAgent(namespace: string, cocoonSet: string, slot: number): string {
  return `vk-${namespace}-${cocoonSet}-${slot}`;
}

/** `vk-<ns>-<podName>` (toolboxes, and the pod form of an agent's name). */
export function vmNameForPod(namespace: string, podName: string): string {
  return `vk-${namespace}-${podName}`;
}

/**
 * The agent slot encoded in a VM name, or -1 (cocoon-common ExtractAgentSlot: prefix `vk-<ns>-<cs>-`,
 * remainder without '-', parsed like Go Atoi which accepts a leading '+'; negative or bad → -1).
 */
export function extractAgentSlot(namespace: string, cocoonSet: string, vmName: string): number {
  const prefix = `vk-${namespace}-${cocoonSet}-`;
  if (!vmName.startsWith(prefix)) return -1;
  const rest = vmName.slice(prefix.length);
  if (rest.includes('-') || !/^[+]?\d+$/.test(rest)) return -1;
  const n = Number(rest);
  return Number.isSafeInteger(n) && n >= 0 ? n : -1;
}

/** Longest object name a DNS-1123 subdomain allows (pods' names are validated as one). */
export const MAX_POD_NAME_LENGTH = 253;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/**
 * Why `name` can never be a pod's name, or undefined when it can. Pod names are DNS-1123 subdomains (the
 * apiserver's ValidatePodName): at most 253 characters of lower-case alphanumerics, '-' and '.', starting
 * and ending with an alphanumeric. The wording follows apimachinery's validation messages.
 */
export function podNameProblem(name: string): string | undefined {
  if (name.length > MAX_POD_NAME_LENGTH) {
    return `must be no more than ${MAX_POD_NAME_LENGTH} characters (it has ${name.length})`;
  }
  if (!DNS1123_SUBDOMAIN.test(name)) {
    return "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
  }
  return undefined;
}
