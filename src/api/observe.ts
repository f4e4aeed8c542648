/**
 * Trimmed observations the watcher sends to entity workflows and activities return to them. They carry
 * only fields a gate, a builder or a status reads, so signal payloads stay small and the watcher can
 * decide relevance by comparing two trimmed copies (a change outside them is churn nothing reads).
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { CocoonHibernation } from './types.js';

/** What the VM workflow knows about its pod. `exists: false` = the pod is gone (or never seen). */
export interface PodObservation {
  exists: boolean;
  namespace: string;
  name: string;
  uid?: string;
  resourceVersion?: string;
  /** All annotations (small, and the contract lives in them). */
  annotations?: Record<string, string>;
  labels?: Record<string, string>;
  phase?: string;
  deleting?: boolean;
  /** Any container with state.running. */
  containerRunning?: boolean;
  ready?: boolean;
  nodeName?: string;
  /** The controller owner reference's uid and kind (`CocoonSet` for a set's pod). */
  ownerUID?: string;
  ownerKind?: string;
}

/** What the VM workflow knows about one CocoonHibernation targeting its pod. */
export interface HibernationObservation {
  exists: boolean;
  namespace: string;
  name: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deleting?: boolean;
  /** RFC 3339, when deleting. */
  deletionTimestamp?: string;
  finalizers?: string[];
  podRef?: string;
  desire?: string;
  status?: CocoonHibernation['status'];
}

/** Trims a pod to a PodObservation (pure). */
export function observePod(pod: V1Pod): PodObservation {
  const owner = pod.metadata?.ownerReferences?.find((o) => o.controller);
  return {
    exists: true,
    namespace: pod.metadata?.namespace ?? '',
    name: pod.metadata?.name ?? '',
    uid: pod.metadata?.uid,
    resourceVersion: pod.metadata?.resourceVersion,
    annotations: { ...(pod.metadata?.annotations ?? {}) },
    labels: { ...(pod.metadata?.labels ?? {}) },
    phase: pod.status?.phase,
    deleting: pod.metadata?.deletionTimestamp != null,
    containerRunning: (pod.status?.containerStatuses ?? []).some((c) => c.state?.running != null),
    ready: (pod.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True'),
    nodeName: pod.spec?.nodeName,
    ownerUID: owner?.uid,
    ownerKind: owner?.kind,
  };
}

/** Trims a CocoonHibernation to a HibernationObservation (pure). */
export function observeHibernation(cr: CocoonHibernation): HibernationObservation {
  return {
    exists: true,
    namespace: cr.metadata.namespace ?? '',
    name: cr.metadata.name ?? '',
    uid: cr.metadata.uid,
    resourceVersion: cr.metadata.resourceVersion,
    generation: cr.metadata.generation,
    creationTimestamp: isoOf(cr.metadata.creationTimestamp),
    deleting: cr.metadata.deletionTimestamp != null,
    deletionTimestamp: isoOf(cr.metadata.deletionTimestamp),
    finalizers: [...(cr.metadata.finalizers ?? [])],
    podRef: cr.spec?.podRef?.name,
    desire: cr.spec?.desire,
    status: cr.status ? structuredClone(cr.status) : undefined,
  };
}

/** client-node deserializes timestamps to Date; observations carry RFC 3339 strings. */
function isoOf(t: unknown): string | undefined {
  if (t == null) return undefined;
  return t instanceof Date ? t.toISOString() : String(t);
}
