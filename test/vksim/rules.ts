/**
 * Pure decisions of the vk-cocoon simulator, kept free of I/O so they are unit tested on their own:
 * lifecycle intent rules (docs/wire-contract.md#vk-cocoon), snapshot policy and role (cocoon-common
 * meta.ShouldSnapshotVM / meta.RoleForPod), placement, the CPU-class gate,
 * the framework's "running" test for deletions and its retry backoff.
 */
import type { V1OwnerReference, V1Pod, V1Taint, V1Toleration } from '@kubernetes/client-node';
import {
  Annotations,
  KIND_COCOONSET,
  Labels,
  type LifecycleState,
  LifecycleStates,
  type Role,
  Roles,
} from '../../src/api/keys.js';
import { extractAgentSlot, lifecycleOf, type PodLike } from '../../src/api/pod.js';

/** Byte caps of vk-cocoon: event messages and lifecycle messages. */
export const EVENT_MESSAGE_MAX_BYTES = 512;
export const LIFECYCLE_MESSAGE_MAX_BYTES = 4096;

/** One lifecycle write as vk-cocoon stages it in memory: the triple plus the pod incarnation it is for. */
export interface Intent {
  uid: string;
  state: LifecycleState;
  /** Observed generation (the max stamp seen). */
  gen: number;
  /** Non-empty only for `failed`. */
  message: string;
}

export type IntentVerdict = 'accept' | 'old-incarnation' | 'lower-generation' | 'sticky-failed';

/**
 * Whether a lifecycle write may replace the current intent:
 * writes for another pod incarnation (uid ≠ the tracked uid) are dropped; a lower generation than the
 * current intent is dropped; at the same generation a `failed` intent can only be replaced by
 * `creating`, `hibernating` or another `failed`.
 */
export function judgeIntent(current: Intent | undefined, next: Intent, trackedUid: string): IntentVerdict {
  if (next.uid !== trackedUid) return 'old-incarnation';
  if (!current || current.uid !== next.uid) return 'accept';
  if (next.gen < current.gen) return 'lower-generation';
  if (
    next.gen === current.gen &&
    current.state === LifecycleStates.failed &&
    next.state !== LifecycleStates.creating &&
    next.state !== LifecycleStates.hibernating &&
    next.state !== LifecycleStates.failed
  ) {
    return 'sticky-failed';
  }
  return 'accept';
}

const KNOWN_STATES = new Set<string>(Object.values(LifecycleStates));

/**
 * Re-seeds an intent from the pod's own lifecycle annotations (what vk-cocoon does at restart), or
 * undefined when the pod carries no valid state.
 */
export function seedIntent(pod: PodLike & { metadata?: { uid?: string } }): Intent | undefined {
  const lc = lifecycleOf(pod);
  const uid = pod.metadata?.uid ?? '';
  if (!uid || !KNOWN_STATES.has(lc.state)) return undefined;
  return {
    uid,
    state: lc.state as LifecycleState,
    gen: lc.observedGeneration,
    message: lc.state === LifecycleStates.failed ? lc.message : '',
  };
}

/** Name of the first CocoonSet owner reference, or '' (cocoon-common meta.CocoonSetOwnerName). */
export function cocoonSetOwnerName(refs: V1OwnerReference[] | undefined): string {
  return refs?.find((r) => r.kind === KIND_COCOONSET)?.name ?? '';
}

/**
 * Role used for the snapshot policy (cocoon-common meta.RoleForPod): the agent slot of `vmName` under the
 * CocoonSet owner — slot 0 is main, slot > 0 sub-agent, no slot (toolbox names, no owner) toolbox.
 */
export function roleForPod(pod: Pick<V1Pod, 'metadata'>, vmName: string): Role {
  const cs = cocoonSetOwnerName(pod.metadata?.ownerReferences);
  const slot = extractAgentSlot(pod.metadata?.namespace ?? '', cs, vmName);
  if (slot < 0) return Roles.toolbox;
  return slot === 0 ? Roles.main : Roles.subAgent;
}

/**
 * Whether DeletePod of a running VM pushes `:latest` (cocoon-common meta.ShouldSnapshotVM with role):
 * `never` → no; `main-only` → only the main; anything else, including unset, → yes.
 */
export function shouldSnapshotVM(policy: string | undefined, role: Role): boolean {
  if (policy === 'never') return false;
  if (policy === 'main-only') return role === Roles.main;
  return true;
}

/** Kubernetes toleration semantics for one taint (operator Exists/Equal, empty key = all, empty effect = all). */
export function toleratesTaint(tolerations: V1Toleration[] | undefined, taint: V1Taint): boolean {
  return (tolerations ?? []).some((t) => {
    if (t.effect && t.effect !== taint.effect) return false;
    const op = t.operator ?? 'Equal';
    if (op === 'Exists') return !t.key || t.key === taint.key;
    return t.key === taint.key && (t.value ?? '') === (taint.value ?? '');
  });
}

interface SelectorRequirement {
  key: string;
  operator: string;
  values?: string[];
}

function requirementMatches(req: SelectorRequirement, value: string | undefined): boolean {
  const values = req.values ?? [];
  switch (req.operator) {
    case 'In':
      return value !== undefined && values.includes(value);
    case 'NotIn':
      return value === undefined || !values.includes(value);
    case 'Exists':
      return value !== undefined;
    case 'DoesNotExist':
      return value === undefined;
    case 'Gt':
    case 'Lt': {
      if (value === undefined || values.length !== 1 || !/^-?\d+$/.test(value)) return false;
      const a = Number(value);
      const b = Number(values[0]);
      return req.operator === 'Gt' ? a > b : a < b;
    }
    default:
      return false;
  }
}

/**
 * Whether a pod may be placed on the node: every nodeSelector entry equals a node label, and the required
 * node affinity (OR of terms; each term an AND of matchExpressions over labels and matchFields over
 * `metadata.name`) matches. Preferred affinity and resources are ignored (no scheduler is simulated).
 */
export function podFitsNode(
  pod: Pick<V1Pod, 'spec'>,
  nodeName: string,
  labels: Record<string, string>,
): boolean {
  for (const [k, v] of Object.entries(pod.spec?.nodeSelector ?? {})) {
    if (labels[k] !== v) return false;
  }
  const terms =
    pod.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
  if (!terms || terms.length === 0) return true;
  return terms.some((term) => {
    const exprs = term.matchExpressions ?? [];
    const fields = term.matchFields ?? [];
    if (exprs.length === 0 && fields.length === 0) return false;
    return (
      exprs.every((r) => requirementMatches(r, labels[r.key])) &&
      fields.every((r) => r.key === 'metadata.name' && requirementMatches(r, nodeName))
    );
  });
}

/**
 * The CPU-class gate of CreatePod and UpdatePod (docs/wire-contract.md#on-pods): a pod selecting
 * `cocoonstack.io/snapshot-cpu-class` runs only on a node of exactly that class. Returns the provider
 * error message, or undefined when allowed. Terminal pods are exempt.
 */
export function cpuClassRejection(
  pod: Pick<V1Pod, 'spec' | 'status' | 'metadata'>,
  nodeClass: string,
): string | undefined {
  const want = pod.spec?.nodeSelector?.[Labels.snapshotCPUClass];
  if (!want) return undefined;
  const phase = pod.status?.phase;
  if (phase === 'Succeeded' || phase === 'Failed') return undefined;
  const who = `${pod.metadata?.namespace}/${pod.metadata?.name}`;
  if (!nodeClass) return `pod ${who} requires snapshot CPU class "${want}" but this node has no CPU class`;
  if (nodeClass !== want)
    return `pod ${who} requires snapshot CPU class "${want}" but this node is "${nodeClass}"`;
  return undefined;
}

/**
 * virtual-kubelet's test for "running" at deletion time: at least one container
 * status that is neither terminated nor waiting. No container statuses → not running.
 */
export function podRunningForDeletion(pod: Pick<V1Pod, 'status'>): boolean {
  return (pod.status?.containerStatuses ?? []).some((c) => !c.state?.terminated && !c.state?.waiting);
}

/** Base and default cap of the provider retry backoff. The framework caps at 1000 s; the simulator at
 * a few seconds so tests converge quickly (documented deviation). */
export const BACKOFF_BASE_MS = 5;
export const DEFAULT_BACKOFF_CAP_MS = 2_000;

/** Delay before retry number `failures` (1-based): 5 ms doubling, capped at `capMs`. */
export function providerBackoffMs(failures: number, capMs = DEFAULT_BACKOFF_CAP_MS): number {
  if (failures <= 0) return 0;
  const exp = Math.min(failures - 1, 30);
  return Math.min(BACKOFF_BASE_MS * 2 ** exp, capMs);
}

/** Truncates a string to at most `maxBytes` UTF-8 bytes without splitting a character. */
export function truncateBytes(s: string, maxBytes: number): string {
  if (Buffer.byteLength(s, 'utf8') <= maxBytes) return s;
  let out = '';
  let used = 0;
  for (const ch of s) {
    const n = Buffer.byteLength(ch, 'utf8');
    if (used + n > maxBytes) break;
    out += ch;
    used += n;
  }
  return out;
}

/** Annotations the simulator itself writes; changes to them do not count as operator input. */
const OWN_ANNOTATIONS = new Set<string>([
  Annotations.lifecycleState,
  Annotations.lifecycleObservedGeneration,
  Annotations.lifecycleStateMessage,
  Annotations.vmID,
  Annotations.ip,
  Annotations.postCloneState,
  Annotations.postCloneHint,
  Annotations.postCloneErrors,
]);

/**
 * A fingerprint of what the framework compares to decide that a pod changed in a way the provider must
 * see (labels, annotations, containers, tolerations, deletion), minus the
 * simulator's own annotation writes. A changed fingerprint lets a retry run before its backoff expires,
 * like an informer event re-enqueueing the key.
 */
export function operatorFingerprint(pod: Pick<V1Pod, 'metadata' | 'spec'>): string {
  const ann = Object.entries(pod.metadata?.annotations ?? {})
    .filter(([k]) => !OWN_ANNOTATIONS.has(k))
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const labels = Object.entries(pod.metadata?.labels ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify([
    pod.metadata?.uid ?? '',
    ann,
    labels,
    pod.metadata?.deletionTimestamp ? 'deleting' : '',
    pod.spec?.containers?.map((c) => [c.name, c.image]) ?? [],
    pod.spec?.tolerations ?? [],
  ]);
}

/** Splits a registry-relative image reference `repo[:tag]` (tag default `latest`). A leading
 * `<registry>/` equal to `registryBase` is stripped. */
export function parseImageRef(image: string, registryBase: string): { repo: string; tag: string } {
  let ref = image;
  const prefix = `${registryBase.replace(/^https?:\/\//, '')}/`;
  if (ref.startsWith(prefix)) ref = ref.slice(prefix.length);
  const at = ref.indexOf('@');
  if (at >= 0) return { repo: ref.slice(0, at), tag: ref.slice(at + 1) };
  const slash = ref.lastIndexOf('/');
  const colon = ref.lastIndexOf(':');
  if (colon > slash) return { repo: ref.slice(0, colon), tag: ref.slice(colon + 1) };
  return { repo: ref, tag: 'latest' };
}
