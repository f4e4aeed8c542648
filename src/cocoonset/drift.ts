/**
 * Drift detection: can this live pod still be what the current spec would build? (operator
 * cocoonset/pods.go `podSpecMatches*`; docs/cocoonset.md#drift). A mismatch is answered by deleting
 * the pod and recreating it later (pod specs are immutable). Pure.
 *
 * Deliberately not compared (docs/cocoonset.md#drift): affinity, `spec.nodeName`, tolerations, labels,
 * container name/image, grace period, ephemeral-storage, the generation / hibernate / restore / dead-letter
 * annotations and the runtime annotations (except static toolboxes, docs/cocoonset.md#drift).
 */
import type { V1EnvFromSource, V1ResourceRequirements } from '@kubernetes/client-node';
import { DEFAULT_NODE_POOL, Labels, LIMIT_RANGER_ANNOTATION } from '../api/keys.js';
import type { PodLike } from '../api/pod.js';
import type { CocoonSet, ToolboxSpec } from '../api/types.js';
import { isTerminal } from './classify.js';
import { nodePoolOf } from './pods.js';
import { compareQuantities, parseQuantity, quantityFromJSON } from './quantity.js';
import { parseVMRuntime, parseVMSpec, vmSpecFromAgent, vmSpecFromToolbox, vmSpecsEqual } from './vmspec.js';

/**
 * The resources drift compares; ephemeral-storage and extended resources are ignored
 * (docs/cocoonset.md#drift).
 */
const COMPARED_RESOURCES = ['cpu', 'memory'] as const;

/**
 * `meta.PodNodePool`: the first non-empty of `spec.nodeSelector`, labels, annotations under
 * `cocoonstack.io/pool`, else `default`.
 */
export function podNodePool(pod: PodLike): string {
  const key = Labels.nodePool;
  return (
    pod.spec?.nodeSelector?.[key] ||
    pod.metadata?.labels?.[key] ||
    pod.metadata?.annotations?.[key] ||
    DEFAULT_NODE_POOL
  );
}

/**
 * `schedulingMatches` (docs/cocoonset.md#drift): the pod's pool equals the spec's (empty → default), and its
 * snapshot CPU class equals the spec's, except that a pod **without** a class is adopted while it is not
 * terminal (pre-feature pods keep running; a terminal one drifts so its recreate picks the selector up).
 */
export function schedulingMatches(pod: PodLike, cs: CocoonSet): boolean {
  if (podNodePool(pod) !== nodePoolOf(cs)) return false;
  const podClass = pod.spec?.nodeSelector?.[Labels.snapshotCPUClass] ?? '';
  const want = cs.spec.snapshotCompatibilityClass ?? '';
  if (podClass === want) return true;
  return podClass === '' && !isTerminal(pod);
}

/** Both absent → equal; one absent → differ; both present → numeric equality (`1000m` == `1`). */
function quantityEqual(have: string | undefined, want: string | undefined): boolean {
  if (have === undefined || want === undefined) return have === want;
  return compareQuantities(parseQuantity(have), quantityFromJSON(want)) === 0;
}

/** How the drift rules read a pod (the workflow sets each behind `patched()`). */
export interface DriftOptions {
  /**
   * Compare the pod with the spec as the apiserver admits it: a request the spec leaves unset defaults to
   * that resource's limit, per resource (k8s.io/kubernetes pkg/apis/core/v1 `SetDefaults_Pod`), and a cpu
   * or memory request or limit the spec leaves unset that the LimitRanger set from the namespace's
   * LimitRange defaults (`limitRangerDefaults`) is not drift. Without it (as the reference: requests fall
   * back to the limits only when empty as a whole, and the LimitRanger is unknown), a spec with a request
   * for one resource and only a limit for another, or a namespace whose LimitRange has defaults, saw every
   * pod the set created drift and deleted it again, on every pass: no VM ever stayed up.
   */
  admittedResources?: boolean;
}

/**
 * The resources of container `container` that the LimitRanger admission plugin defaulted, read from the
 * pod's `kubernetes.io/limit-ranger` annotation (`LimitRanger plugin set: cpu, memory request for
 * container agent; cpu limit for container agent`; k8s.io/kubernetes plugin/pkg/admission/limitranger
 * `mergeContainerResources`). Empty sets when the pod has no such annotation or it does not parse.
 */
export function limitRangerDefaults(
  pod: PodLike,
  container: string,
): { requests: ReadonlySet<string>; limits: ReadonlySet<string> } {
  const out = { requests: new Set<string>(), limits: new Set<string>() };
  const raw = pod.metadata?.annotations?.[LIMIT_RANGER_ANNOTATION] ?? '';
  const prefix = 'LimitRanger plugin set: ';
  if (!raw.startsWith(prefix)) return out;
  for (const entry of raw.slice(prefix.length).split('; ')) {
    const m = /^(.+) (request|limit) for container (.+)$/.exec(entry);
    if (!m || m[3] !== container) continue;
    const into = m[2] === 'request' ? out.requests : out.limits;
    for (const name of m[1]!.split(', ')) into.add(name);
  }
  return out;
}

/**
 * `resourcesMatch(pod, want)` (docs/cocoonset.md#drift): for cpu and memory, container 0's limit equals
 * `want.limits`, and its request equals `want.requests` — or `want.limits` when `want.requests` is empty as a
 * whole (the reference's reading of the apiserver's defaulting). With `opts.admittedResources` (ours), a
 * request `want` leaves unset is that resource's limit, and a value `want` still leaves unset that the
 * LimitRanger set (`limitRangerDefaults`) matches. A pod without containers never matches. Throws
 * QuantityParseError on a malformed quantity.
 */
export function resourcesMatch(
  pod: PodLike,
  want: V1ResourceRequirements | undefined,
  opts: DriftOptions = {},
): boolean {
  const container = pod.spec?.containers?.[0];
  if (!container) return false;
  const have = container.resources ?? {};
  const wantLimits = want?.limits ?? {};
  const wantRequests = opts.admittedResources
    ? { ...wantLimits, ...(want?.requests ?? {}) }
    : want?.requests && Object.keys(want.requests).length > 0
      ? want.requests
      : wantLimits;
  const defaulted = opts.admittedResources
    ? limitRangerDefaults(pod, container.name ?? '')
    : { requests: new Set<string>(), limits: new Set<string>() };
  const matches = (have: string | undefined, want: string | undefined, byLimitRanger: boolean) =>
    (want === undefined && byLimitRanger) || quantityEqual(have, want);
  return COMPARED_RESOURCES.every(
    (r) =>
      matches(have.limits?.[r], wantLimits[r], defaulted.limits.has(r)) &&
      matches(have.requests?.[r], wantRequests[r], defaulted.requests.has(r)),
  );
}

/** Normal form of one EnvFromSource with Go zero values (absent string = ''; nil pointer kept distinct). */
function normalizeEnvFrom(e: V1EnvFromSource): unknown {
  const ref = (r: { name?: string; optional?: boolean } | undefined) =>
    r === undefined || r === null ? null : { name: r.name ?? '', optional: r.optional ?? null };
  return { prefix: e.prefix ?? '', configMapRef: ref(e.configMapRef), secretRef: ref(e.secretRef) };
}

/** `equality.Semantic.DeepEqual` of two envFrom lists, nil ≡ empty. */
export function envFromEqual(a: V1EnvFromSource[] | undefined, b: V1EnvFromSource[] | undefined): boolean {
  const na = (a ?? []).map(normalizeEnvFrom);
  const nb = (b ?? []).map(normalizeEnvFrom);
  return JSON.stringify(na) === JSON.stringify(nb);
}

/**
 * `podSpecMatchesAgent(pod, cs, slot)` (docs/cocoonset.md#drift); false = drift. The wanted VMSpec reuses the
 * pod's own VM name and, for sub-agents (slot > 0), its own fork-from, so neither can drift; a main with a
 * fork-from does. Then resources (cpu/memory), service account (empty ≡ `default`), envFrom and scheduling.
 */
export function podSpecMatchesAgent(
  pod: PodLike,
  cs: CocoonSet,
  slot: number,
  opts: DriftOptions = {},
): boolean {
  const agent = cs.spec.agent;
  const current = parseVMSpec(pod);
  const want = vmSpecFromAgent(
    agent,
    current.vmName,
    cs.spec.snapshotPolicy,
    slot > 0 ? current.forkFrom : '',
  );
  if (!vmSpecsEqual(current, want)) return false;
  if (!resourcesMatch(pod, agent.resources, opts)) return false;
  const podSA = pod.spec?.serviceAccountName || 'default';
  const wantSA = agent.serviceAccountName || 'default';
  if (podSA !== wantSA) return false;
  if (!envFromEqual(pod.spec?.containers?.[0]?.envFrom, agent.envFrom)) return false;
  return schedulingMatches(pod, cs);
}

/**
 * `podSpecMatchesToolbox(pod, cs, tb)` (docs/cocoonset.md#drift); false = drift. Full VMSpec (fork-from must
 * be empty), resources, scheduling, and for `static` mode the runtime id / ip / vnc-port must equal the
 * spec's. Service account and envFrom are not compared.
 */
export function podSpecMatchesToolbox(
  pod: PodLike,
  cs: CocoonSet,
  tb: ToolboxSpec,
  opts: DriftOptions = {},
): boolean {
  const current = parseVMSpec(pod);
  const want = vmSpecFromToolbox(tb, current.vmName, cs.spec.snapshotPolicy);
  if (!vmSpecsEqual(current, want)) return false;
  if (!resourcesMatch(pod, tb.resources, opts)) return false;
  if (!schedulingMatches(pod, cs)) return false;
  if (tb.mode === 'static') {
    const rt = parseVMRuntime(pod);
    if (
      rt.vmID !== (tb.staticVMID ?? '') ||
      rt.ip !== (tb.staticIP ?? '') ||
      rt.vncPort !== (tb.vncPort ?? 0)
    ) {
      return false;
    }
  }
  return true;
}
