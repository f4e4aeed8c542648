/**
 * Would the apiserver's built-in admission refuse the pods a pass creates to REPLACE live pods it is about
 * to delete? A spec edit that changes resources makes drift delete the live pod and then create its
 * replacement; when the create is refused the user's VM is gone. The pass asks `namespaceLimitsRefusal`
 * before it deletes anything and, on a refusal, keeps the live pods and reports the returned message.
 *
 * What is predicted, in the order the apiserver applies it to one pod create (Kubernetes v1.34.4:
 * k8s.io/apiserver pkg/endpoints/handlers/create.go runs mutating admission, then the registry's
 * `BeforeCreate` validates, then validating admission runs in plugin order, LimitRanger before
 * ResourceQuota, k8s.io/kubernetes pkg/kubeapiserver/options/plugins.go):
 *
 * 1. Pod defaulting at decode (pkg/apis/core/v1/defaults.go `SetDefaults_Pod`): a resource with a limit
 *    and no request gets request = limit.
 * 2. LimitRanger mutation (plugin/pkg/admission/limitranger/admission.go `PodMutateLimitFunc`): for each
 *    LimitRange in list order, the `default` (limits) and `defaultRequest` (requests) of its `Container`
 *    items (a later item overriding an earlier one) fill the keys the container does not set yet.
 * 3. Pod validation (pkg/apis/core/validation/validation.go `validateResourceRequirements`): a request
 *    above its limit, a request unequal to its limit or without one for a resource that cannot be
 *    overcommitted (hugepages, extended resources). Refusal: `Pod "<pod>" is invalid: <errors>` (422).
 * 4. LimitRanger validation (`PodValidateLimitFunc`): for each LimitRange in order, every `Container` item
 *    against the container and every `Pod` item against the pod totals (one container here, so its
 *    values) with `minConstraint`, `maxConstraint`, `limitRequestRatioConstraint`; the first LimitRange
 *    with errors refuses: `pods "<pod>" is forbidden: <error, or [e1, e2, …]>` (403).
 *    Then PodSecurity (its plugin runs after LimitRanger): the namespace's `enforce` level
 *    (`podSecurityRefusal`).
 * 5. ResourceQuota (k8s.io/apiserver v0.34.4 pkg/admission/plugin/resourcequota/controller.go
 *    `CheckRequest`, pod evaluator pkg/quota/v1/evaluator/core/pods.go): each quota that applies to the pod
 *    (its status.hard names a resource the pod evaluator tracks, and every scope matches) must not miss
 *    a cpu or memory value it tracks (`failed quota: <q>: must specify …`) and must know its usage
 *    (`status unknown for quota: <q>, resources: …`); then the pods' usage must fit (`exceeded quota`).
 *
 * The quota check is over all replacements at once (ours: the apiserver sees one create at a time):
 * for each quota, new used = status.used − Σ usage of the replaced pods it counted + Σ usage of the
 * replacements it counts, for every resource in status.hard that some replacement uses (non-zero). A
 * refusal names the first replacement that quota counts, with the sums for the exceeded resources:
 * `pods "<pod>" is forbidden: exceeded quota: <q>, requested: <Σ new>, used: <used − Σ replaced>,
 * limited: <hard>` (each `name=value`, sorted, joined by `,`, as Go's `prettyPrint`). `pods` and
 * `count/pods` cancel out for a pod that replaces a counted one. Every replacement's own checks (steps
 * 1–4, quota constraints and status) run before this sum, so when a set fails both ways the message may
 * name a later pod's own refusal where the apiserver, creating in order, would first refuse an earlier pod
 * on the quota; whether the set is refused is the same either way.
 *
 * The pods are the operator's: one container, no init containers, no pod-level resources, no
 * RuntimeClass overhead, no activeDeadlineSeconds (scope `NotTerminating` matches, `Terminating` does
 * not), no priorityClassName (scope `PriorityClass`: `Exists` and `In` do not match, `NotIn` and
 * `DoesNotExist` do), no cross-namespace pod affinity; usage is the spec's (no in-place resize in
 * progress).
 *
 * Where several errors are reported in one message, Go's order is map iteration (random); ours is
 * deterministic: LimitRange items in order, within an item min, then max, then maxLimitRequestRatio, each
 * by resource name; validation errors by resource name. Go's message for a single error is reproduced
 * exactly; for several, the same errors in this order.
 *
 * A quantity that does not parse (`parseQuantity`) makes its input not refusable here: a LimitRange or
 * a ResourceQuota holding one is ignored (the apiserver never stores one), a replacement whose new or
 * replaced resources hold one is left out of every check (pod validation refuses it; src/cocoonset/
 * validate.ts reports that before this runs).
 *
 * Not predicted: admission webhooks, other plugins, `LimitedResources` admission configuration, and
 * quota used by other writers between this check and the create.
 *
 * Pure: no I/O, deterministic (safe in workflow code).
 */
import type { V1ResourceRequirements } from '@kubernetes/client-node';
import {
  addQuantities,
  compareQuantities,
  parseQuantity,
  type Quantity,
  quantityFromJSON,
  quantityIsZero,
  quantityToString,
  subtractQuantities,
} from './quantity.js';

/** One LimitRange as read from the apiserver (its spec.limits items, already API-defaulted). */
export interface LimitRangeView {
  name: string;
  limits: LimitRangeItemView[];
}

/** One item of a LimitRange's spec.limits; quantities as the apiserver returns them. */
export interface LimitRangeItemView {
  /** `Container`, `Pod`, `PersistentVolumeClaim`, …; only the first two constrain pods. */
  type: string;
  min?: Record<string, string>;
  max?: Record<string, string>;
  default?: Record<string, string>;
  defaultRequest?: Record<string, string>;
  maxLimitRequestRatio?: Record<string, string>;
}

/**
 * One ResourceQuota: spec scopes and scope selector, and its status (hard and used as the quota controller
 * / admission last wrote them). A quota whose status.hard names no resource the pod evaluator tracks
 * (none written yet included) does not apply to pods, as in Go (`generic.Matches`); a hard resource
 * missing from used makes the quota's status unknown (`hasUsageStats`).
 */
export interface QuotaView {
  name: string;
  scopes?: string[];
  scopeSelector?: { matchExpressions?: { scopeName: string; operator: string; values?: string[] }[] };
  hard?: Record<string, string>;
  used?: Record<string, string>;
}

/** The namespace's LimitRanges and ResourceQuotas, each in list order, and its Pod Security labels. */
export interface NamespaceLimits {
  limitRanges: LimitRangeView[];
  quotas: QuotaView[];
  /**
   * The namespace's `pod-security.kubernetes.io/enforce` and `…/enforce-version` labels (the PodSecurity
   * admission plugin's level for it); absent: none (the cluster default, `privileged` unless configured).
   */
  podSecurity?: { enforce: string; version?: string };
}

/**
 * The PodSecurity admission plugin's refusal of a pod the operator builds (k8s.io/pod-security-admission,
 * Pod Security Standards): `baseline` and `privileged` admit it (checked on the v1.34.4 apiserver: the
 * pods use no host namespaces, host paths, privileged mode or added capabilities); `restricted` refuses
 * it, for the four settings the pods never carry (they set no securityContext), in the plugin's words.
 * Undefined when admitted. A cluster-wide default level from the admission configuration is not seen.
 */
function podSecurityRefusal(ps: NamespaceLimits['podSecurity'], r: Replacement): string | undefined {
  if (ps?.enforce !== 'restricted') return undefined;
  const c = r.container;
  return (
    `pods ${quote(r.pod)} is forbidden: violates PodSecurity "restricted:${ps.version || 'latest'}": ` +
    `allowPrivilegeEscalation != false (container "${c}" must set securityContext.allowPrivilegeEscalation=false), ` +
    `unrestricted capabilities (container "${c}" must set securityContext.capabilities.drop=["ALL"]), ` +
    `runAsNonRoot != true (pod or container "${c}" must set securityContext.runAsNonRoot=true), ` +
    `seccompProfile (pod or container "${c}" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")`
  );
}

/** A pod the set would create in place of a live one. Single-container pods. */
export interface Replacement {
  /** Pod name, for messages. */
  pod: string;
  /** Container name (for `must specify … for: <container>`). */
  container: string;
  /** The new container's resources, as the operator builds them (before apiserver defaulting). */
  resources: V1ResourceRequirements;
  /**
   * The live pod's stored container resources (counted in quota used), undefined if none is counted. Pod
   * defaulting (request = limit) is applied to them too, as the apiserver does on reading a stored pod; it
   * changes nothing on resources already defaulted.
   */
  replaces?: V1ResourceRequirements;
}

/** Resource name → quantity (Go `ResourceList`). */
type ResourceList = Map<string, Quantity>;

/** A container's requests and limits. */
interface Resources {
  requests: ResourceList;
  limits: ResourceList;
}

interface ParsedItem {
  type: string;
  min: ResourceList;
  max: ResourceList;
  default: ResourceList;
  defaultRequest: ResourceList;
  maxLimitRequestRatio: ResourceList;
}

interface Selector {
  scopeName: string;
  operator: string;
  values: readonly string[];
}

interface ParsedQuota {
  name: string;
  selectors: Selector[];
  hard: ResourceList;
  used: ResourceList;
  /** `MatchingResources(status.hard names)`: the hard resources the pod evaluator tracks. */
  matching: string[];
}

/** A replacement that passed the per-pod checks, with what the quotas count of it and of its old pod. */
interface Counted {
  pod: string;
  usage: ResourceList;
  bestEffort: boolean;
  old?: { usage: ResourceList; bestEffort: boolean };
}

const ONE = parseQuantity('1');
const ZERO = parseQuantity('0');
/** Go `resource.MaxMilliValue`: the largest value whose milli-value fits an int64. */
const MAX_MILLI_VALUE = ((1n << 63n) - 1n) / 1000n;
/** Quota resources the pod evaluator tracks by name (pods.go `podResources`). */
const POD_RESOURCES = new Set([
  'count/pods',
  'cpu',
  'memory',
  'ephemeral-storage',
  'requests.cpu',
  'requests.memory',
  'requests.ephemeral-storage',
  'limits.cpu',
  'limits.memory',
  'limits.ephemeral-storage',
  'pods',
]);
/** Quota resources a pod must set when a quota tracks them (pods.go `validationSet`). */
const VALIDATION_SET = new Set([
  'cpu',
  'memory',
  'requests.cpu',
  'requests.memory',
  'limits.cpu',
  'limits.memory',
]);
const QUALIFIED_NAME_RE = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const DNS1123_SUBDOMAIN_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** Go `%q` of a name; for the DNS-1123 names of pods this is the JSON string. */
function quote(s: string): string {
  return JSON.stringify(s);
}

/** Go `utilerrors.NewAggregate(errs).Error()`: one error as is, several deduplicated as `[a, b]`. */
function aggregate(errs: readonly string[]): string {
  const unique = [...new Set(errs)];
  return unique.length === 1 ? unique[0]! : `[${unique.join(', ')}]`;
}

/** Go `prettyPrint`: `name=value` sorted by name, joined by `,`. */
function prettyPrint(list: ResourceList): string {
  return [...list.keys()]
    .sort()
    .map((k) => `${k}=${quantityToString(list.get(k)!)}`)
    .join(',');
}

/** Parses a resource list read from JSON; undefined when a value does not parse. */
function parseList(raw: Record<string, unknown> | undefined): ResourceList | undefined {
  const out: ResourceList = new Map();
  for (const [k, v] of Object.entries(raw ?? {})) {
    if (v === undefined || v === null) continue;
    try {
      out.set(k, quantityFromJSON(typeof v === 'number' ? v : String(v)));
    } catch {
      return undefined;
    }
  }
  return out;
}

function parseResources(r: V1ResourceRequirements): Resources | undefined {
  const requests = parseList(r.requests);
  const limits = parseList(r.limits);
  return requests && limits ? { requests, limits } : undefined;
}

function parseItem(item: LimitRangeItemView): ParsedItem | undefined {
  const min = parseList(item.min);
  const max = parseList(item.max);
  const def = parseList(item.default);
  const defaultRequest = parseList(item.defaultRequest);
  const ratio = parseList(item.maxLimitRequestRatio);
  if (!min || !max || !def || !defaultRequest || !ratio) return undefined;
  return { type: item.type, min, max, default: def, defaultRequest, maxLimitRequestRatio: ratio };
}

/** Go `IsQualifiedName`: `[prefix/]name`, prefix a DNS-1123 subdomain, name at most 63 characters. */
function isQualifiedName(s: string): boolean {
  const parts = s.split('/');
  if (parts.length > 2) return false;
  const name = parts[parts.length - 1]!;
  if (name.length === 0 || name.length > 63 || !QUALIFIED_NAME_RE.test(name)) return false;
  if (parts.length === 2) {
    const prefix = parts[0]!;
    return prefix.length > 0 && prefix.length <= 253 && DNS1123_SUBDOMAIN_RE.test(prefix);
  }
  return true;
}

/** Go `IsNativeResource`: unprefixed, or in the `kubernetes.io/` namespace. */
function isNativeResource(name: string): boolean {
  return !name.includes('/') || name.includes('kubernetes.io/');
}

/** Go `IsExtendedResourceName`: not native, not `requests.`-prefixed, and `requests.<name>` is qualified. */
function isExtendedResourceName(name: string): boolean {
  if (isNativeResource(name) || name.startsWith('requests.')) return false;
  return isQualifiedName(`requests.${name}`);
}

/** Go `IsOvercommitAllowed`: native and not hugepages. */
function isOvercommitAllowed(name: string): boolean {
  return isNativeResource(name) && !name.startsWith('hugepages-');
}

/** pods.go `MatchingResources`: the quota resources of `names` the pod evaluator tracks, in order. */
function matchingResources(names: readonly string[]): string[] {
  return names.filter(
    (n) =>
      POD_RESOURCES.has(n) ||
      n.startsWith('hugepages-') ||
      n.startsWith('requests.hugepages-') ||
      (!isNativeResource(n) && n.startsWith('requests.')),
  );
}

function parseQuota(q: QuotaView): ParsedQuota | undefined {
  const hard = parseList(q.hard);
  const used = parseList(q.used);
  if (!hard || !used) return undefined;
  const selectors: Selector[] = [
    ...(q.scopes ?? []).map((s) => ({ scopeName: s, operator: 'Exists', values: [] })),
    ...(q.scopeSelector?.matchExpressions ?? []).map((e) => ({
      scopeName: e.scopeName,
      operator: e.operator,
      values: e.values ?? [],
    })),
  ];
  return { name: q.name, selectors, hard, used, matching: matchingResources([...hard.keys()]) };
}

/** The container after pod defaulting (`SetDefaults_Pod`): each limit without a request becomes its request. */
function podDefaults(c: Resources): Resources {
  const requests = new Map(c.requests);
  for (const [k, v] of c.limits) if (!requests.has(k)) requests.set(k, v);
  return { requests, limits: new Map(c.limits) };
}

/**
 * LimitRanger's mutation by one LimitRange (`defaultContainerResourceRequirements` then
 * `mergeContainerResources`): the merged defaults of its Container items fill the unset keys, in place.
 */
function applyRangeDefaults(c: Resources, items: readonly ParsedItem[]): void {
  const limits: ResourceList = new Map();
  const requests: ResourceList = new Map();
  for (const item of items) {
    if (item.type !== 'Container') continue;
    for (const [k, v] of item.defaultRequest) requests.set(k, v);
    for (const [k, v] of item.default) limits.set(k, v);
  }
  for (const [k, v] of limits) if (!c.limits.has(k)) c.limits.set(k, v);
  for (const [k, v] of requests) if (!c.requests.has(k)) c.requests.set(k, v);
}

/**
 * The request/limit errors of pod validation (`validateResourceRequirements`), by resource name, with
 * the apiserver's field paths and wording.
 */
function requestLimitErrors(c: Resources): string[] {
  const reqPath = 'spec.containers[0].resources.requests';
  const limPath = 'spec.containers[0].resources.limits';
  const out: string[] = [];
  for (const name of [...c.requests.keys()].sort()) {
    const req = c.requests.get(name)!;
    const lim = c.limits.get(name);
    if (lim !== undefined) {
      const cmp = compareQuantities(req, lim);
      const value = quote(quantityToString(req));
      if (cmp !== 0 && !isOvercommitAllowed(name)) {
        out.push(
          `${reqPath}: Invalid value: ${value}: must be equal to ${name} limit of ${quantityToString(lim)}`,
        );
      } else if (cmp > 0) {
        out.push(
          `${reqPath}: Invalid value: ${value}: must be less than or equal to ${name} limit of ${quantityToString(lim)}`,
        );
      }
    } else if (!isOvercommitAllowed(name)) {
      out.push(`${limPath}: Required value: Limit must be set for non overcommitable resources`);
    }
  }
  return out;
}

/** Go `ScaledValue`: ceil(q / 10^scale) (scale 0 = `Value()`, -3 = `MilliValue()`); 0 for an absent quantity. */
function scaledValue(q: Quantity | undefined, scale: 0 | -3): bigint {
  if (q === undefined) return 0n;
  const shift = q.exp - scale;
  if (shift >= 0) return q.unscaled * 10n ** BigInt(shift);
  const div = 10n ** BigInt(-shift);
  const t = q.unscaled / div;
  return t * div < q.unscaled ? t + 1n : t;
}

/** Go `requestLimitEnforcedValues`: milli-values when all three fit, whole values otherwise. */
function enforcedValues(
  req: Quantity | undefined,
  lim: Quantity | undefined,
  enforced: Quantity,
): [bigint, bigint, bigint] {
  const whole: [bigint, bigint, bigint] = [
    scaledValue(req, 0),
    scaledValue(lim, 0),
    scaledValue(enforced, 0),
  ];
  if (whole.every((v) => v <= MAX_MILLI_VALUE)) {
    return [scaledValue(req, -3), scaledValue(lim, -3), scaledValue(enforced, -3)];
  }
  return whole;
}

/**
 * Go `fmt` `%f` of a finite non-negative float64: its exact binary value rounded half to even at six
 * decimals (strconv `bigFtoa`). `toFixed` differs on exact ties (1.0078125 → Go 1.007812).
 */
function formatGoF6(x: number): string {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const hi = view.getUint32(0);
  const lo = view.getUint32(4);
  const expBits = (hi >>> 20) & 0x7ff;
  let mant = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
  let exp = -1074;
  if (expBits !== 0) {
    mant |= 1n << 52n;
    exp = expBits - 1075;
  }
  const scaled = mant * 1_000_000n;
  let n: bigint;
  if (exp >= 0) {
    n = scaled << BigInt(exp);
  } else {
    const s = BigInt(-exp);
    const q = scaled >> s;
    const rem = scaled - (q << s);
    const half = 1n << (s - 1n);
    n = rem > half || (rem === half && (q & 1n) === 1n) ? q + 1n : q;
  }
  const digits = n.toString().padStart(7, '0');
  return `${digits.slice(0, -6)}.${digits.slice(-6)}`;
}

/** limitranger `minConstraint`. */
function minConstraint(
  type: string,
  name: string,
  enforced: Quantity,
  requests: ResourceList,
  limits: ResourceList,
): string | undefined {
  const req = requests.get(name);
  const lim = limits.get(name);
  const [reqV, limV, enfV] = enforcedValues(req, lim, enforced);
  const e = quantityToString(enforced);
  if (req === undefined) return `minimum ${name} usage per ${type} is ${e}.  No request is specified`;
  if (reqV < enfV)
    return `minimum ${name} usage per ${type} is ${e}, but request is ${quantityToString(req)}`;
  if (lim !== undefined && limV < enfV)
    return `minimum ${name} usage per ${type} is ${e}, but limit is ${quantityToString(lim)}`;
  return undefined;
}

/** limitranger `maxConstraint`. */
function maxConstraint(
  type: string,
  name: string,
  enforced: Quantity,
  requests: ResourceList,
  limits: ResourceList,
): string | undefined {
  const req = requests.get(name);
  const lim = limits.get(name);
  const [reqV, limV, enfV] = enforcedValues(req, lim, enforced);
  const e = quantityToString(enforced);
  if (lim === undefined) return `maximum ${name} usage per ${type} is ${e}.  No limit is specified`;
  if (limV > enfV) return `maximum ${name} usage per ${type} is ${e}, but limit is ${quantityToString(lim)}`;
  if (req !== undefined && reqV > enfV)
    return `maximum ${name} usage per ${type} is ${e}, but request is ${quantityToString(req)}`;
  return undefined;
}

/** limitranger `limitRequestRatioConstraint` (float64 arithmetic as Go's). */
function ratioConstraint(
  type: string,
  name: string,
  enforced: Quantity,
  requests: ResourceList,
  limits: ResourceList,
): string | undefined {
  const req = requests.get(name);
  const lim = limits.get(name);
  const [reqV, limV] = enforcedValues(req, lim, enforced);
  const e = quantityToString(enforced);
  const head = `${name} max limit to request ratio per ${type} is ${e}`;
  if (req === undefined || reqV === 0n) return `${head}, but no request is specified or request is 0`;
  if (lim === undefined || limV === 0n) return `${head}, but no limit is specified or limit is 0`;
  const display = Number(limV) / Number(reqV);
  let observed = display;
  const enforcedValue = scaledValue(enforced, 0);
  let max = Number(enforcedValue);
  if (enforcedValue <= MAX_MILLI_VALUE) {
    observed = observed * 1000;
    max = Number(scaledValue(enforced, -3));
  }
  return observed > max ? `${head}, but provided ratio is ${formatGoF6(display)}` : undefined;
}

/** The errors of one LimitRange for the pod (`PodValidateLimitFunc`), in a deterministic order. */
function rangeErrors(items: readonly ParsedItem[], c: Resources): string[] {
  const out: string[] = [];
  for (const item of items) {
    // Container items apply to the container, Pod items to the pod totals: the same lists here.
    if (item.type !== 'Container' && item.type !== 'Pod') continue;
    const checks = [
      [item.min, minConstraint],
      [item.max, maxConstraint],
      [item.maxLimitRequestRatio, ratioConstraint],
    ] as const;
    for (const [list, check] of checks) {
      for (const name of [...list.keys()].sort()) {
        const err = check(item.type, name, list.get(name)!, c.requests, c.limits);
        if (err !== undefined) out.push(err);
      }
    }
  }
  return out;
}

/** pods.go `podComputeUsageHelper`: the quota usage of one container's requests and limits (with `pods`). */
function computeUsage(c: Resources): ResourceList {
  const out: ResourceList = new Map([['pods', ONE]]);
  const pairs = [
    ['cpu', 'requests.cpu', 'limits.cpu'],
    ['memory', 'requests.memory', 'limits.memory'],
    ['ephemeral-storage', 'requests.ephemeral-storage', 'limits.ephemeral-storage'],
  ] as const;
  for (const [name, req, lim] of pairs) {
    const r = c.requests.get(name);
    if (r !== undefined) {
      out.set(name, r);
      out.set(req, r);
    }
    const l = c.limits.get(name);
    if (l !== undefined) out.set(lim, l);
  }
  for (const [name, r] of c.requests) {
    if (name.startsWith('hugepages-')) {
      out.set(name, r);
      out.set(`requests.${name}`, r);
    }
    if (isExtendedResourceName(name)) out.set(`requests.${name}`, r);
  }
  return out;
}

/** pods.go `PodUsageFunc` of a live, non-terminal pod: `count/pods` plus the compute usage. */
function podUsage(c: Resources): ResourceList {
  const out = computeUsage(c);
  out.set('count/pods', ONE);
  return out;
}

/** qos `ComputePodQOS` = BestEffort: no cpu or memory request or limit above zero. */
function isBestEffort(c: Resources): boolean {
  for (const list of [c.requests, c.limits]) {
    for (const name of ['cpu', 'memory']) {
      const q = list.get(name);
      if (q !== undefined && compareQuantities(q, ZERO) > 0) return false;
    }
  }
  return true;
}

/**
 * pods.go `podMatchesScopeFunc` for the operator's pods (see the module comment). An operator
 * `ScopedResourceSelectorRequirementsAsSelector` rejects, or values it rejects, do not match (ResourceQuota
 * validation refuses such a quota, so the apiserver never holds one).
 */
function scopeMatches(s: Selector, bestEffort: boolean): boolean {
  switch (s.scopeName) {
    case 'Terminating':
      return false;
    case 'NotTerminating':
      return true;
    case 'BestEffort':
      return bestEffort;
    case 'NotBestEffort':
      return !bestEffort;
    case 'PriorityClass':
      // No priorityClassName: the label set is empty (podMatchesSelector).
      switch (s.operator) {
        case 'Exists':
          return false;
        case 'In':
          return false;
        case 'NotIn':
          return s.values.length > 0;
        case 'DoesNotExist':
          return s.values.length === 0;
        default:
          return false;
      }
    case 'CrossNamespacePodAffinity':
      return false;
    default:
      return false;
  }
}

/** Whether every scope of the quota matches (`generic.Matches`, the scope half). */
function scopesMatch(q: ParsedQuota, bestEffort: boolean): boolean {
  return q.selectors.every((s) => scopeMatches(s, bestEffort));
}

/** pods.go `Constraints` for one container: the missing cpu/memory values a quota tracks, or undefined. */
function constraintError(matching: readonly string[], c: Resources, container: string): string | undefined {
  const have = computeUsage(c);
  const missing = [...new Set(matching.filter((n) => VALIDATION_SET.has(n) && !have.has(n)))].sort();
  if (missing.length === 0) return undefined;
  return `must specify ${missing.map((n) => `${n} for: ${container}`).join('; ')}`;
}

/** controller.go `hasUsageStats`: every tracked hard resource has a used value. */
function hasUsageStats(q: ParsedQuota): boolean {
  return q.matching.every((n) => q.used.has(n));
}

function sumInto(acc: ResourceList, add: ResourceList): void {
  for (const [k, v] of add) {
    const cur = acc.get(k);
    acc.set(k, cur === undefined ? v : addQuantities(cur, v));
  }
}

/**
 * The per-pod part for one replacement (steps 1–4 and the quota constraints and status), or the
 * refusal message; the `Counted` carries what the quota sum needs.
 */
function checkPod(
  r: Replacement,
  built: Resources,
  old: Resources | undefined,
  ranges: readonly ParsedItem[][],
  quotas: readonly ParsedQuota[],
  podSecurity: NamespaceLimits['podSecurity'],
): Counted | string {
  const c = podDefaults(built);
  for (const items of ranges) applyRangeDefaults(c, items);

  const invalid = requestLimitErrors(c);
  if (invalid.length > 0) return `Pod ${quote(r.pod)} is invalid: ${aggregate(invalid)}`;

  const forbidden = `pods ${quote(r.pod)} is forbidden`;
  for (const items of ranges) {
    const errs = rangeErrors(items, c);
    if (errs.length > 0) return `${forbidden}: ${aggregate(errs)}`;
  }
  const insecure = podSecurityRefusal(podSecurity, r);
  if (insecure !== undefined) return insecure;

  const bestEffort = isBestEffort(c);
  const stored = old && podDefaults(old);
  for (const q of quotas) {
    if (q.matching.length === 0 || !scopesMatch(q, bestEffort)) continue;
    const missing = constraintError(q.matching, c, r.container);
    if (missing !== undefined) return `${forbidden}: failed quota: ${q.name}: ${missing}`;
    if (!hasUsageStats(q)) {
      return `${forbidden}: status unknown for quota: ${q.name}, resources: ${[...q.matching].sort().join(',')}`;
    }
  }
  return {
    pod: r.pod,
    usage: podUsage(c),
    bestEffort,
    ...(stored ? { old: { usage: podUsage(stored), bestEffort: isBestEffort(stored) } } : {}),
  };
}

/** The `exceeded quota` refusal of one quota over all counted replacements, or undefined. */
function quotaExceeded(q: ParsedQuota, counted: readonly Counted[]): string | undefined {
  if (q.matching.length === 0) return undefined;
  let first: string | undefined;
  const added: ResourceList = new Map();
  const removed: ResourceList = new Map();
  for (const p of counted) {
    if (scopesMatch(q, p.bestEffort)) {
      first ??= p.pod;
      sumInto(added, p.usage);
    }
    if (p.old && scopesMatch(q, p.old.bestEffort)) sumInto(removed, p.old.usage);
  }
  if (first === undefined) return undefined;
  const requested: ResourceList = new Map();
  const used: ResourceList = new Map();
  const limited: ResourceList = new Map();
  for (const [name, hard] of q.hard) {
    const add = added.get(name);
    if (add === undefined || quantityIsZero(add)) continue;
    const current = q.used.get(name) ?? ZERO;
    const minus = removed.get(name);
    const base = minus === undefined ? current : subtractQuantities(current, minus);
    if (compareQuantities(addQuantities(base, add), hard) > 0) {
      requested.set(name, add);
      used.set(name, base);
      limited.set(name, hard);
    }
  }
  if (requested.size === 0) return undefined;
  return (
    `pods ${quote(first)} is forbidden: exceeded quota: ${q.name}, requested: ${prettyPrint(requested)}, ` +
    `used: ${prettyPrint(used)}, limited: ${prettyPrint(limited)}`
  );
}

/**
 * The apiserver's refusal message for the first replacement pod it would refuse, or undefined when all
 * fit. Replacements are checked in order, each through pod defaulting, LimitRanger defaults, pod
 * validation of requests against limits, LimitRanger validation, PodSecurity (`podSecurityRefusal`) and the
 * quota constraints and status
 * (the first refusal is returned: `Pod "<pod>" is invalid: …` or `pods "<pod>" is forbidden: …`); then
 * every quota, in order, against the sum of the replacements minus the pods they replace (see the module
 * comment). Inputs holding a malformed quantity are left out (module comment).
 */
export function namespaceLimitsRefusal(
  limits: NamespaceLimits,
  replacements: readonly Replacement[],
): string | undefined {
  const ranges: ParsedItem[][] = [];
  for (const lr of limits.limitRanges) {
    const items = lr.limits.map(parseItem);
    if (items.every((i): i is ParsedItem => i !== undefined)) ranges.push(items);
  }
  const quotas = limits.quotas.map(parseQuota).filter((q): q is ParsedQuota => q !== undefined);

  const counted: Counted[] = [];
  for (const r of replacements) {
    const built = parseResources(r.resources);
    const old = r.replaces === undefined ? undefined : parseResources(r.replaces);
    if (built === undefined || (r.replaces !== undefined && old === undefined)) continue;
    const result = checkPod(r, built, old, ranges, quotas, limits.podSecurity);
    if (typeof result === 'string') return result;
    counted.push(result);
  }
  for (const q of quotas) {
    const refusal = quotaExceeded(q, counted);
    if (refusal !== undefined) return refusal;
  }
  return undefined;
}
