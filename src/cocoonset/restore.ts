/**
 * Restore intent: whether a pod about to be (re)created must restore its VM from the `:hibernate`
 * snapshot instead of cold-booting (operator cocoonset/restore.go;
 * docs/cocoonset.md#restore-from-hibernation, docs/cocoonset.md#suspend). Pure functions over
 * already-fetched data: the CocoonHibernation List and the registry probe are the caller's I/O. The List
 * happens lazily, only when a pod is actually built, and at most once per pass (`lazyOnce` gives the Go
 * `sync.OnceValues` memo, error included).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { Annotations } from '../api/keys.js';
import { vmNameForPod, vmNameOf } from '../api/pod.js';
import type { CocoonHibernation, CocoonSet } from '../api/types.js';
import { tagSpent } from '../hibernation/rules.js';

/**
 * `podsRestorableByCR` (docs/cocoonset.md#restore-from-hibernation): pod names (`spec.podRef.name`,
 * non-empty) of CRs whose `status.phase` is `Hibernated` or `Waking`. `spec.desire` is ignored; Hibernating /
 * Active / Pending / Failed give no intent (the phase reaches Hibernated only once the push is confirmed).
 */
export function podsRestorableByCR(crs: readonly CocoonHibernation[]): Set<string> {
  const out = new Set<string>();
  for (const cr of crs) {
    const name = cr.spec?.podRef?.name ?? '';
    const phase = cr.status?.phase;
    if (name !== '' && (phase === 'Hibernated' || phase === 'Waking')) out.add(name);
  }
  return out;
}

/** A pod whose VM's `:hibernate` tag is spent, and the CocoonHibernation that says so. */
export interface SpentTag {
  pod: string;
  vmName: string;
  cr: string;
}

/**
 * Pods whose VM's `:hibernate` tag is spent (ours, docs/cocoonset.md#restore-from-hibernation), by pod name
 * (`spec.podRef.name`): a CocoonHibernation says so (src/hibernation/rules.ts `tagSpent`: its wake ran the
 * VM and the tag's DELETE failed), one being deleted only with `deleting` (its deletion retries that DELETE
 * before it lets go). vk-cocoon restores any create of a VM whose `:hibernate` tag exists (its evidence
 * check, marked or not): a pod created now would bring the VM back as it was at the hibernate. `vmName` is
 * the CR's recorded `status.vmName`.
 */
export function podsWithSpentTagByCR(
  crs: readonly CocoonHibernation[],
  deleting = false,
): Map<string, SpentTag> {
  const out = new Map<string, SpentTag>();
  for (const cr of crs) {
    const pod = cr.spec?.podRef?.name ?? '';
    const gone = cr.metadata?.deletionTimestamp != null && !deleting;
    if (pod === '' || gone || !tagSpent(cr.status) || out.has(pod)) continue;
    out.set(pod, { pod, vmName: cr.status?.vmName ?? '', cr: cr.metadata?.name ?? '' });
  }
  return out;
}

/**
 * `podsHibernatedByCR` (un-suspend, docs/cocoonset.md#a-pass-in-order step 7): pod names of CRs with
 * `spec.desire == Hibernate` **or** `status.phase == Hibernating` (the reverse-desire window). Un-suspend
 * must not clear these pods' hibernate annotation: the hibernation side owns it.
 */
export function podsHibernatedByCR(crs: readonly CocoonHibernation[]): Set<string> {
  const out = new Set<string>();
  for (const cr of crs) {
    const name = cr.spec?.podRef?.name ?? '';
    if (name !== '' && (cr.spec?.desire === 'Hibernate' || cr.status?.phase === 'Hibernating')) out.add(name);
  }
  return out;
}

/**
 * VM names whose `:hibernate` tag a live CocoonHibernation of `namespace` still needs: CRs not being deleted
 * with `spec.desire == Hibernate` or `status.phase` in Hibernating / Hibernated / Waking, by their recorded
 * `status.vmName` and by the VM name of their pod (`vk-<ns>-<podRef>`). The CocoonSet's deletion GC keeps
 * these tags (docs/cocoonset.md#deletion-and-registry-gc): a deliberate deviation, the reference drops
 * every `:hibernate`, and a set re-applied later can no longer restore a VM its CR still shows Hibernated.
 * The CR's own deletion drops the tag later.
 */
export function vmsHeldByCR(namespace: string, crs: readonly CocoonHibernation[]): Set<string> {
  const out = new Set<string>();
  for (const cr of crs) {
    if (cr.metadata?.deletionTimestamp) continue;
    const phase = cr.status?.phase;
    const wants =
      cr.spec?.desire === 'Hibernate' ||
      phase === 'Hibernating' ||
      phase === 'Hibernated' ||
      phase === 'Waking';
    if (!wants) continue;
    if (cr.status?.vmName) out.add(cr.status.vmName);
    const pod = cr.spec?.podRef?.name ?? '';
    if (pod !== '') out.add(vmNameForPod(namespace, pod));
  }
  return out;
}

/**
 * The VM names the deletion GC must clean (reference `stashDeleteVMNames`): the union of the status's agent and
 * toolbox VM names, the names already stashed in `cocoonset.cocoonstack.io/delete-vm-names` (comma-split,
 * trimmed) and the VM names of `pods`; ascending, de-duplicated. Shared by the deletion flow and the seat
 * release, which stash them before deleting pods.
 */
export function stashedVMNames(cs: CocoonSet, pods: readonly V1Pod[]): string[] {
  const names = new Set<string>();
  for (const a of cs.status?.agents ?? []) if (a.vmName) names.add(a.vmName);
  for (const t of cs.status?.toolboxes ?? []) if (t.vmName) names.add(t.vmName);
  for (const n of (cs.metadata.annotations?.[Annotations.deleteVMNames] ?? '').split(','))
    if (n.trim() !== '') names.add(n.trim());
  for (const p of pods) if (vmNameOf(p) !== '') names.add(vmNameOf(p));
  return [...names].sort();
}

/** Outcome of `HasManifest(<vm>, "hibernate")`: present/absent, or the probe's error text. */
export type HibernateProbe = { present: boolean } | { error: string };

/** What `markRestoreIfHibernated` needs or decided for one pod. */
export type RestoreDecision =
  /** No intent, or no registry configured: create as built, do not probe. */
  | { kind: 'asBuilt' }
  /** Intent and a registry: probe `<vmName>:hibernate` first. */
  | { kind: 'probe'; vmName: string }
  /** Tag present: the pod was marked `restore-from-hibernate: "true"`. */
  | { kind: 'restore' }
  /** Tag absent: create as built (fresh boot). */
  | { kind: 'fresh' }
  /** The probe failed: fail closed, do **not** create (a fresh boot could later overwrite the snapshot). */
  | { kind: 'error'; message: string };

/**
 * `markRestoreIfHibernated(pod, intent)` (docs/cocoonset.md#restore-from-hibernation) over a probe result the
 * caller already has. `intent` false or `registryConfigured` false → `asBuilt` (no probe). Otherwise without
 * `probe` → `probe` (ask for it); with it: present → marks the pod in place and returns `restore`; absent →
 * `fresh`; error → `error` with Go's text `probe hibernate snapshot <vm>: <err>`.
 */
export function markRestoreIfHibernated(
  pod: V1Pod,
  intent: boolean,
  registryConfigured: boolean,
  probe?: HibernateProbe,
): RestoreDecision {
  if (!intent || !registryConfigured) return { kind: 'asBuilt' };
  const vmName = vmNameOf(pod);
  if (probe === undefined) return { kind: 'probe', vmName };
  if ('error' in probe)
    return { kind: 'error', message: `probe hibernate snapshot ${vmName}: ${probe.error}` };
  if (!probe.present) return { kind: 'fresh' };
  pod.metadata ??= {};
  pod.metadata.annotations ??= {};
  pod.metadata.annotations[Annotations.restoreFromHibernate] = 'true';
  return { kind: 'restore' };
}

/**
 * Call-at-most-once wrapper (Go `sync.OnceValues`): the first call runs `fn`; every later call returns
 * the same promise, so both the value and a rejection are cached and never retried within its lifetime.
 * Create one per reconcile pass around the CocoonHibernation List.
 */
export function lazyOnce<T>(fn: () => Promise<T>): () => Promise<T> {
  let memo: Promise<T> | undefined;
  return () => {
    memo ??= fn();
    return memo;
  };
}
