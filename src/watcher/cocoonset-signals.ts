/**
 * Signals the watcher sends to the CocoonSet entity workflow (id cocoonSetWorkflowId(ns, name)), and the
 * trimmed observations they carry. The workflow itself is written by a later issue; until then the
 * watcher only sends these when started with `cocoonSets: true`.
 *
 * What is relevant mirrors the Go operator's cocoonset controller
 * (docs/configuration.md#notes-on-some-settings): `For(CocoonSet)` with GenerationChangedPredicate,
 * `Owns(Pod)` passing create, delete, phase change, Ready flip, label or annotation change and a deletion
 * timestamp appearing.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { defineSignal } from '@temporalio/workflow';
import { podReady } from '../api/pod.js';
import type { CocoonSet } from '../api/types.js';

/** What the CocoonSet workflow learns about its CocoonSet. `exists: false` = it is gone. */
export interface CocoonSetObservation {
  exists: boolean;
  namespace: string;
  name: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  deleting?: boolean;
}

/** What the CocoonSet workflow learns about one pod it owns (controller owner reference). */
export interface OwnedPodObservation {
  exists: boolean;
  namespace: string;
  name: string;
  uid?: string;
  resourceVersion?: string;
  phase?: string;
  ready?: boolean;
  deleting?: boolean;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/**
 * Start argument of the CocoonSet workflow as the watcher starts it (a subset of CocoonSetWorkflowInput in
 * src/workflows/cocoonset.ts). `kubeIO: 'local'`: the run's Kubernetes I/O runs as local activities;
 * `searchAttributes: 'identity'`: the start sets the identity search attributes; `patches`: the count of
 * patched branches added since runs stopped asking `patched()` that the run takes (messages.ts
 * `LEVELED_PATCHES`).
 */
export interface CocoonSetWorkflowStart {
  namespace: string;
  name: string;
  kubeIO: 'local';
  searchAttributes: 'identity';
  patches: number;
}

/** The CocoonSet's generation changed, it started deleting, or it is gone (`exists: false`). */
export const cocoonSetObservedSignal = defineSignal<[CocoonSetObservation]>('cocoonSetObserved');
/** A pod the CocoonSet owns was created, deleted, or changed phase, readiness, labels or annotations. */
export const ownedPodObservedSignal = defineSignal<[OwnedPodObservation]>('ownedPodObserved');

/** Trims a CocoonSet to the fields its workflow wakes on (pure). Spec is read by the workflow itself. */
export function observeCocoonSet(cs: CocoonSet): CocoonSetObservation {
  return {
    exists: true,
    namespace: cs.metadata.namespace ?? '',
    name: cs.metadata.name ?? '',
    uid: cs.metadata.uid,
    resourceVersion: cs.metadata.resourceVersion,
    generation: cs.metadata.generation,
    deleting: cs.metadata.deletionTimestamp != null,
  };
}

/** Trims an owned pod to the fields the CocoonSet predicate compares (pure). */
/**
 * The part of an owned pod's observation the CocoonSet workflow reads (identity and resourceVersion: a
 * pass re-reads the pods itself). The signal carries only this; the watcher decides relevance on the full
 * observation. Full observations in every signal made a 1000-pod pass's history ~6 MB (each annotation
 * echoed back, `last-applied-configuration` included), too long to replay within a workflow task.
 */
export function ownedPodSignal(obs: OwnedPodObservation): OwnedPodObservation {
  return {
    exists: obs.exists,
    namespace: obs.namespace,
    name: obs.name,
    uid: obs.uid,
    resourceVersion: obs.resourceVersion,
  };
}

/** Trims an owned pod to the fields whose change is worth a signal (pure; see `ownedPodSignal`). */
export function observeOwnedPod(pod: V1Pod): OwnedPodObservation {
  return {
    exists: true,
    namespace: pod.metadata?.namespace ?? '',
    name: pod.metadata?.name ?? '',
    uid: pod.metadata?.uid,
    resourceVersion: pod.metadata?.resourceVersion,
    phase: pod.status?.phase,
    ready: podReady(pod),
    deleting: pod.metadata?.deletionTimestamp != null,
    labels: { ...(pod.metadata?.labels ?? {}) },
    annotations: { ...(pod.metadata?.annotations ?? {}) },
  };
}
