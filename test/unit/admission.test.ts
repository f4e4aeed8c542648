/**
 * The admission prediction (src/cocoonset/admission.ts): whether the apiserver's LimitRanger and
 * ResourceQuota admission (and the pod validation between them) would refuse the pods a pass creates to
 * replace live ones, with the apiserver's exact message. Every expected message of a single replacement
 * was produced by the Kubernetes v1.34.4 code itself (a Go program over `SetDefaults_Pod`,
 * `limitranger.PodMutateLimitFunc`, the pod strategy's `PrepareForCreate` and `Validate`,
 * `limitranger.PodValidateLimitFunc`, `resourcequota.CheckRequest` with the pod evaluator), run over these
 * inputs with the replaced pods' usage taken out of `status.used`. The multi-pod quota messages are ours
 * (a sum over the replacements; the apiserver, creating one at a time, refuses the same set).
 */
import type { V1ResourceRequirements } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import {
  type LimitRangeItemView,
  type LimitRangeView,
  type NamespaceLimits,
  namespaceLimitsRefusal,
  type QuotaView,
  type Replacement,
} from '../../src/cocoonset/admission.js';
import {
  addQuantities,
  parseQuantity,
  quantityToString,
  subtractQuantities,
} from '../../src/cocoonset/quantity.js';

function range(name: string, ...limits: LimitRangeItemView[]): LimitRangeView {
  return { name, limits };
}

function quota(
  name: string,
  hard: Record<string, string> | undefined,
  used: Record<string, string> | undefined,
  scopes?: Pick<QuotaView, 'scopes' | 'scopeSelector'>,
): QuotaView {
  return { name, ...scopes, ...(hard ? { hard } : {}), ...(used ? { used } : {}) };
}

/** A replacement of pod `pod` (container `agent`) with `resources`, replacing a pod with `replaces`. */
function rep(pod: string, resources: V1ResourceRequirements, replaces?: V1ResourceRequirements): Replacement {
  return { pod, container: 'agent', resources, ...(replaces ? { replaces } : {}) };
}

const NONE: NamespaceLimits = { limitRanges: [], quotas: [] };
const limitsOnly = (...limitRanges: LimitRangeView[]): NamespaceLimits => ({ limitRanges, quotas: [] });
const quotasOnly = (...quotas: QuotaView[]): NamespaceLimits => ({ limitRanges: [], quotas });

const MEM = (limit: string, request?: string): V1ResourceRequirements => ({
  limits: { memory: limit },
  ...(request ? { requests: { memory: request } } : {}),
});
/** cpu and memory limits (requests default to them): a Guaranteed pod. */
const GUARANTEED = (cpu: string, memory: string): V1ResourceRequirements => ({ limits: { cpu, memory } });

interface Case {
  name: string;
  limits: NamespaceLimits;
  replacements: Replacement[];
  want: string | undefined;
}

const FORBIDDEN = 'pods "demo-0" is forbidden: ';

const LIMIT_RANGE_CASES: Case[] = [
  {
    name: 'no LimitRange and no quota: admitted',
    limits: NONE,
    replacements: [rep('demo-0', GUARANTEED('64', '1Ti'))],
    want: undefined,
  },
  {
    name: 'Container max memory below the limit',
    limits: limitsOnly(range('lr', { type: 'Container', max: { memory: '4Gi' } })),
    replacements: [rep('demo-0', MEM('8Gi'))],
    want: `${FORBIDDEN}maximum memory usage per Container is 4Gi, but limit is 8Gi`,
  },
  {
    name: 'Container max with no limit set and no default: no limit is specified',
    limits: limitsOnly(range('lr', { type: 'Container', max: { memory: '4Gi' } })),
    replacements: [rep('demo-0', { limits: { cpu: '1' } })],
    want: `${FORBIDDEN}maximum memory usage per Container is 4Gi.  No limit is specified`,
  },
  {
    name: 'Container max with no limit set: the LimitRange default fills it',
    limits: limitsOnly(
      range('lr', {
        type: 'Container',
        max: { memory: '4Gi' },
        default: { memory: '2Gi' },
        defaultRequest: { memory: '1Gi' },
      }),
    ),
    replacements: [rep('demo-0', { limits: { cpu: '1' } })],
    want: undefined,
  },
  {
    name: 'Container max on the request (limit within, request defaulted from a larger default)',
    limits: limitsOnly(
      range('lr', {
        type: 'Container',
        max: { cpu: '2' },
        defaultRequest: { cpu: '3' },
        default: { cpu: '2' },
      }),
    ),
    replacements: [rep('demo-0', { limits: { memory: '1Gi' } })],
    want: 'Pod "demo-0" is invalid: spec.containers[0].resources.requests: Invalid value: "3": must be less than or equal to cpu limit of 2',
  },
  {
    name: 'Container min cpu above the request',
    limits: limitsOnly(range('lr', { type: 'Container', min: { cpu: '500m' } })),
    replacements: [rep('demo-0', { requests: { cpu: '250m' }, limits: { cpu: '1' } })],
    want: `${FORBIDDEN}minimum cpu usage per Container is 500m, but request is 250m`,
  },
  {
    name: 'Container min with no request',
    limits: limitsOnly(range('lr', { type: 'Container', min: { cpu: '500m' } })),
    replacements: [rep('demo-0', MEM('1Gi'))],
    want: `${FORBIDDEN}minimum cpu usage per Container is 500m.  No request is specified`,
  },
  {
    name: 'maxLimitRequestRatio exceeded',
    limits: limitsOnly(range('lr', { type: 'Container', maxLimitRequestRatio: { memory: '2' } })),
    replacements: [rep('demo-0', MEM('4Gi', '1Gi'))],
    want: `${FORBIDDEN}memory max limit to request ratio per Container is 2, but provided ratio is 4.000000`,
  },
  {
    name: 'maxLimitRequestRatio: the ratio printed as Go %f (an exact tie rounds to even)',
    limits: limitsOnly(range('lr', { type: 'Container', maxLimitRequestRatio: { cpu: '1' } })),
    replacements: [rep('demo-0', { requests: { cpu: '128m' }, limits: { cpu: '129m' } })],
    want: `${FORBIDDEN}cpu max limit to request ratio per Container is 1, but provided ratio is 1.007812`,
  },
  {
    name: 'maxLimitRequestRatio met exactly',
    limits: limitsOnly(range('lr', { type: 'Container', maxLimitRequestRatio: { memory: '2' } })),
    replacements: [rep('demo-0', MEM('2Gi', '1Gi'))],
    want: undefined,
  },
  {
    name: 'Pod max cpu on the pod totals',
    limits: limitsOnly(range('lr', { type: 'Pod', max: { cpu: '2' } })),
    replacements: [rep('demo-0', GUARANTEED('4', '1Gi'))],
    want: `${FORBIDDEN}maximum cpu usage per Pod is 2, but limit is 4`,
  },
  {
    name: 'PersistentVolumeClaim items do not apply to pods',
    limits: limitsOnly(range('lr', { type: 'PersistentVolumeClaim', max: { storage: '1Gi' } })),
    replacements: [rep('demo-0', GUARANTEED('4', '1Gi'))],
    want: undefined,
  },
  {
    name: 'a default limit below our request: pod validation refuses (422)',
    limits: limitsOnly(
      range('lr', { type: 'Container', default: { memory: '1Gi' }, defaultRequest: { memory: '1Gi' } }),
    ),
    replacements: [rep('demo-0', { requests: { memory: '2Gi' } })],
    want: 'Pod "demo-0" is invalid: spec.containers[0].resources.requests: Invalid value: "2Gi": must be less than or equal to memory limit of 1Gi',
  },
  {
    name: 'several errors of one LimitRange aggregate as [a, b]',
    limits: limitsOnly(range('lr', { type: 'Container', max: { cpu: '1', memory: '1Gi' } })),
    replacements: [rep('demo-0', GUARANTEED('2', '2Gi'))],
    want: `${FORBIDDEN}[maximum cpu usage per Container is 1, but limit is 2, maximum memory usage per Container is 1Gi, but limit is 2Gi]`,
  },
  {
    name: 'the first LimitRange defaults, a later one does not override it; the first with errors refuses',
    limits: limitsOnly(
      range('a', { type: 'Container', default: { memory: '2Gi' }, defaultRequest: { memory: '2Gi' } }),
      range('b', {
        type: 'Container',
        max: { memory: '1Gi' },
        default: { memory: '512Mi' },
        defaultRequest: { memory: '512Mi' },
      }),
    ),
    replacements: [rep('demo-0', { limits: { cpu: '1' } })],
    want: `${FORBIDDEN}maximum memory usage per Container is 1Gi, but limit is 2Gi`,
  },
  {
    name: 'the second replacement refused: its own name',
    limits: limitsOnly(range('lr', { type: 'Container', max: { memory: '4Gi' } })),
    replacements: [rep('demo-0', MEM('4Gi')), rep('demo-1', MEM('5Gi'))],
    want: 'pods "demo-1" is forbidden: maximum memory usage per Container is 4Gi, but limit is 5Gi',
  },
  {
    name: 'mixed units: 1536Mi below a 2Gi min',
    limits: limitsOnly(range('lr', { type: 'Container', min: { memory: '2Gi' } })),
    replacements: [rep('demo-0', MEM('1536Mi'))],
    want: `${FORBIDDEN}minimum memory usage per Container is 2Gi, but request is 1536Mi`,
  },
  {
    name: 'mixed units: 1 cpu above a 500m max; values printed canonically (1024Mi as 1Gi)',
    limits: limitsOnly(range('lr', { type: 'Container', max: { cpu: '500m', memory: '1Gi' } })),
    replacements: [rep('demo-0', GUARANTEED('1', '1024Mi'))],
    want: `${FORBIDDEN}maximum cpu usage per Container is 500m, but limit is 1`,
  },
  {
    name: 'mixed units that fit: 2048Mi within 2Gi, 1000m within 1',
    limits: limitsOnly(range('lr', { type: 'Container', max: { cpu: '1', memory: '2Gi' } })),
    replacements: [rep('demo-0', GUARANTEED('1000m', '2048Mi'))],
    want: undefined,
  },
];

const OTHERS = { 'limits.memory': '4Gi' };

const QUOTA_CASES: Case[] = [
  {
    name: 'quota on limits.memory: fits once the replaced pod no longer counts',
    limits: quotasOnly(quota('compute', { 'limits.memory': '8Gi' }, { 'limits.memory': '6Gi' })),
    replacements: [rep('demo-0', MEM('4Gi'), MEM('2Gi'))],
    want: undefined,
  },
  {
    name: 'quota on limits.memory: refused when the replaced pod is not counted',
    limits: quotasOnly(quota('compute', { 'limits.memory': '8Gi' }, { 'limits.memory': '6Gi' })),
    replacements: [rep('demo-0', MEM('4Gi'))],
    want: `${FORBIDDEN}exceeded quota: compute, requested: limits.memory=4Gi, used: limits.memory=6Gi, limited: limits.memory=8Gi`,
  },
  {
    name: 'quota on limits.memory: refused even with the replaced pod subtracted',
    limits: quotasOnly(quota('compute', { 'limits.memory': '8Gi' }, { 'limits.memory': '6Gi' })),
    replacements: [rep('demo-0', MEM('5Gi'), MEM('2Gi'))],
    want: `${FORBIDDEN}exceeded quota: compute, requested: limits.memory=5Gi, used: limits.memory=4Gi, limited: limits.memory=8Gi`,
  },
  {
    name: 'two replacements aggregated: each fits alone, both do not',
    limits: quotasOnly(quota('compute', { 'requests.cpu': '4' }, { 'requests.cpu': '3' })),
    replacements: [
      rep('demo-0', { requests: { cpu: '2' } }, { requests: { cpu: '1' } }),
      rep('demo-1', { requests: { cpu: '2' } }, { requests: { cpu: '1' } }),
    ],
    want: `${FORBIDDEN}exceeded quota: compute, requested: requests.cpu=4, used: requests.cpu=1, limited: requests.cpu=4`,
  },
  {
    name: 'two replacements aggregated that fit together',
    limits: quotasOnly(quota('compute', { 'requests.cpu': '4' }, { 'requests.cpu': '3' })),
    replacements: [
      rep('demo-0', { requests: { cpu: '1500m' } }, { requests: { cpu: '1' } }),
      rep('demo-1', { requests: { cpu: '1500m' } }, { requests: { cpu: '1' } }),
    ],
    want: undefined,
  },
  {
    name: 'must specify: a quota on limits.memory and no memory limit',
    limits: quotasOnly(quota('compute', { 'limits.memory': '8Gi' }, { 'limits.memory': '0' })),
    replacements: [rep('demo-0', { requests: { cpu: '1', memory: '1Gi' } })],
    want: `${FORBIDDEN}failed quota: compute: must specify limits.memory for: agent`,
  },
  {
    name: 'must specify: several resources, sorted, joined by "; "',
    limits: quotasOnly(
      quota(
        'compute',
        { 'limits.memory': '8Gi', 'requests.cpu': '4', cpu: '4' },
        { 'limits.memory': '0', 'requests.cpu': '0', cpu: '0' },
      ),
    ),
    replacements: [rep('demo-0', { requests: { memory: '1Gi' } })],
    want: `${FORBIDDEN}failed quota: compute: must specify cpu for: agent; limits.memory for: agent; requests.cpu for: agent`,
  },
  {
    name: 'must specify: a LimitRange default satisfies it',
    limits: {
      limitRanges: [
        range('lr', { type: 'Container', default: { memory: '1Gi' }, defaultRequest: { memory: '1Gi' } }),
      ],
      quotas: [quota('compute', { 'limits.memory': '8Gi' }, { 'limits.memory': '0' })],
    },
    replacements: [rep('demo-0', { requests: { cpu: '1' } })],
    want: undefined,
  },
  {
    name: 'status unknown: a hard resource without a used value',
    limits: quotasOnly(
      quota('compute', { 'limits.memory': '8Gi', 'requests.cpu': '4' }, { 'requests.cpu': '0' }),
    ),
    replacements: [rep('demo-0', GUARANTEED('1', '1Gi'))],
    want: `${FORBIDDEN}status unknown for quota: compute, resources: limits.memory,requests.cpu`,
  },
  {
    name: 'no status.hard yet: the quota does not apply (generic.Matches)',
    limits: quotasOnly(quota('compute', undefined, undefined)),
    replacements: [rep('demo-0', GUARANTEED('1', '1Gi'))],
    want: undefined,
  },
  {
    name: 'a quota on resources pods do not use (services, requests.storage) does not apply',
    limits: quotasOnly(quota('objects', { services: '0', 'requests.storage': '0' }, {})),
    replacements: [rep('demo-0', GUARANTEED('1', '1Gi'))],
    want: undefined,
  },
  {
    name: 'scope NotBestEffort applies to a Burstable pod',
    limits: quotasOnly(quota('nbe', OTHERS, OTHERS, { scopes: ['NotBestEffort'] })),
    replacements: [rep('demo-0', MEM('1Gi'))],
    want: `${FORBIDDEN}exceeded quota: nbe, requested: limits.memory=1Gi, used: limits.memory=4Gi, limited: limits.memory=4Gi`,
  },
  {
    name: 'scope BestEffort does not apply to a Burstable pod',
    limits: quotasOnly(quota('be', { pods: '0' }, { pods: '0' }, { scopes: ['BestEffort'] })),
    replacements: [rep('demo-0', MEM('1Gi'))],
    want: undefined,
  },
  {
    name: 'scope BestEffort: a BestEffort pod replacing a Burstable one (not counted there) adds a pod',
    limits: quotasOnly(quota('be', { pods: '2' }, { pods: '2' }, { scopes: ['BestEffort'] })),
    replacements: [rep('demo-0', {}, MEM('1Gi', '1Gi'))],
    want: `${FORBIDDEN}exceeded quota: be, requested: pods=1, used: pods=2, limited: pods=2`,
  },
  {
    name: 'scope Terminating does not apply (no activeDeadlineSeconds)',
    limits: quotasOnly(quota('t', OTHERS, OTHERS, { scopes: ['Terminating'] })),
    replacements: [rep('demo-0', MEM('1Gi'))],
    want: undefined,
  },
  {
    name: 'scope NotTerminating applies',
    limits: quotasOnly(quota('nt', OTHERS, OTHERS, { scopes: ['NotTerminating'] })),
    replacements: [rep('demo-0', MEM('1Gi'))],
    want: `${FORBIDDEN}exceeded quota: nt, requested: limits.memory=1Gi, used: limits.memory=4Gi, limited: limits.memory=4Gi`,
  },
  {
    name: 'scope PriorityClass In does not apply (no priorityClassName)',
    limits: quotasOnly(
      quota('pc', OTHERS, OTHERS, {
        scopeSelector: {
          matchExpressions: [{ scopeName: 'PriorityClass', operator: 'In', values: ['high'] }],
        },
      }),
    ),
    replacements: [rep('demo-0', MEM('1Gi'))],
    want: undefined,
  },
  {
    name: 'scope PriorityClass NotIn applies',
    limits: quotasOnly(
      quota('pc', OTHERS, OTHERS, {
        scopeSelector: {
          matchExpressions: [{ scopeName: 'PriorityClass', operator: 'NotIn', values: ['high'] }],
        },
      }),
    ),
    replacements: [rep('demo-0', MEM('1Gi'))],
    want: `${FORBIDDEN}exceeded quota: pc, requested: limits.memory=1Gi, used: limits.memory=4Gi, limited: limits.memory=4Gi`,
  },
  {
    name: 'scope PriorityClass Exists does not apply, DoesNotExist does',
    limits: quotasOnly(
      quota('exists', OTHERS, OTHERS, {
        scopeSelector: { matchExpressions: [{ scopeName: 'PriorityClass', operator: 'Exists' }] },
      }),
      quota('absent', OTHERS, OTHERS, {
        scopeSelector: { matchExpressions: [{ scopeName: 'PriorityClass', operator: 'DoesNotExist' }] },
      }),
    ),
    replacements: [rep('demo-0', MEM('1Gi'))],
    want: `${FORBIDDEN}exceeded quota: absent, requested: limits.memory=1Gi, used: limits.memory=4Gi, limited: limits.memory=4Gi`,
  },
  {
    name: 'every scope must match: NotBestEffort and Terminating',
    limits: quotasOnly(quota('both', OTHERS, OTHERS, { scopes: ['NotBestEffort', 'Terminating'] })),
    replacements: [rep('demo-0', MEM('1Gi'))],
    want: undefined,
  },
  {
    name: 'pods and count/pods at their hard limit: a 1-for-1 replacement fits',
    limits: quotasOnly(quota('count', { pods: '3', 'count/pods': '3' }, { pods: '3', 'count/pods': '3' })),
    replacements: [
      rep('demo-0', GUARANTEED('1', '1Gi'), GUARANTEED('2', '2Gi')),
      rep('demo-1', GUARANTEED('1', '1Gi'), GUARANTEED('2', '2Gi')),
    ],
    want: undefined,
  },
  {
    name: 'pods and count/pods at their hard limit: a pod replacing none is refused',
    limits: quotasOnly(quota('count', { pods: '3', 'count/pods': '3' }, { pods: '3', 'count/pods': '3' })),
    replacements: [rep('demo-0', GUARANTEED('1', '1Gi'))],
    want: `${FORBIDDEN}exceeded quota: count, requested: count/pods=1,pods=1, used: count/pods=3,pods=3, limited: count/pods=3,pods=3`,
  },
  {
    name: 'extended resource: requests.nvidia.com/gpu (request defaulted from the limit)',
    limits: quotasOnly(quota('gpu', { 'requests.nvidia.com/gpu': '2' }, { 'requests.nvidia.com/gpu': '1' })),
    replacements: [rep('demo-0', { limits: { 'nvidia.com/gpu': '2' } }, MEM('1Gi'))],
    want: `${FORBIDDEN}exceeded quota: gpu, requested: requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=2`,
  },
  {
    name: 'extended resource: the replaced pod’s gpu no longer counts',
    limits: quotasOnly(quota('gpu', { 'requests.nvidia.com/gpu': '2' }, { 'requests.nvidia.com/gpu': '2' })),
    replacements: [
      rep('demo-0', { limits: { 'nvidia.com/gpu': '2' } }, { limits: { 'nvidia.com/gpu': '1' } }),
    ],
    want: `${FORBIDDEN}exceeded quota: gpu, requested: requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=2`,
  },
  {
    name: 'mixed units: 2 × 1536Mi replacing 2 × 1Gi fits 3Gi',
    limits: quotasOnly(quota('compute', { 'limits.memory': '3Gi' }, { 'limits.memory': '2Gi' })),
    replacements: [rep('demo-0', MEM('1536Mi'), MEM('1Gi')), rep('demo-1', MEM('1536Mi'), MEM('1Gi'))],
    want: undefined,
  },
  {
    name: 'mixed units: 2 × 1536Mi replacing 2 × 1Gi exceeds 2560Mi (sums printed canonically)',
    limits: quotasOnly(quota('compute', { 'limits.memory': '2560Mi' }, { 'limits.memory': '2Gi' })),
    replacements: [rep('demo-0', MEM('1536Mi'), MEM('1Gi')), rep('demo-1', MEM('1536Mi'), MEM('1Gi'))],
    want: `${FORBIDDEN}exceeded quota: compute, requested: limits.memory=3Gi, used: limits.memory=0, limited: limits.memory=2560Mi`,
  },
  {
    name: 'mixed units: 1 cpu on top of 500m used exceeds 1',
    limits: quotasOnly(quota('compute', { 'limits.cpu': '1' }, { 'limits.cpu': '500m' })),
    replacements: [rep('demo-0', { limits: { cpu: '1' } })],
    want: `${FORBIDDEN}exceeded quota: compute, requested: limits.cpu=1, used: limits.cpu=500m, limited: limits.cpu=1`,
  },
  {
    name: 'mixed units: 500m replacing 1 on top of 1500m used fits 1',
    limits: quotasOnly(quota('compute', { 'limits.cpu': '1' }, { 'limits.cpu': '1500m' })),
    replacements: [
      rep('demo-0', { limits: { cpu: '500m' } }, { limits: { cpu: '1' }, requests: { cpu: '1' } }),
    ],
    want: undefined,
  },
  {
    name: 'only the exceeded resources are printed; the first quota in order refuses',
    limits: quotasOnly(
      quota(
        'a',
        { 'limits.memory': '8Gi', 'limits.cpu': '8' },
        { 'limits.memory': '8Gi', 'limits.cpu': '0' },
      ),
      quota('b', { 'limits.memory': '1Gi' }, { 'limits.memory': '1Gi' }),
    ),
    replacements: [rep('demo-0', GUARANTEED('1', '1Gi'))],
    want: `${FORBIDDEN}exceeded quota: a, requested: limits.memory=1Gi, used: limits.memory=8Gi, limited: limits.memory=8Gi`,
  },
  {
    name: 'a LimitRange refusal comes before a quota refusal',
    limits: {
      limitRanges: [range('lr', { type: 'Container', max: { memory: '4Gi' } })],
      quotas: [quota('compute', { 'limits.memory': '1Gi' }, { 'limits.memory': '1Gi' })],
    },
    replacements: [rep('demo-0', MEM('8Gi'))],
    want: `${FORBIDDEN}maximum memory usage per Container is 4Gi, but limit is 8Gi`,
  },
];

const CASES: Case[] = [...LIMIT_RANGE_CASES, ...QUOTA_CASES];

describe('namespaceLimitsRefusal', () => {
  it.each(CASES)('$name', ({ limits, replacements, want }) => {
    expect(namespaceLimitsRefusal(limits, replacements)).toBe(want);
  });

  it('leaves a malformed quantity to pod validation: not refused here', () => {
    const lr = limitsOnly(range('lr', { type: 'Container', max: { memory: '4Gi' } }));
    expect(namespaceLimitsRefusal(lr, [rep('demo-0', MEM('8 Gi'))])).toBeUndefined();
    const bad = limitsOnly(range('lr', { type: 'Container', max: { memory: '4 Gi' } }));
    expect(namespaceLimitsRefusal(bad, [rep('demo-0', MEM('8Gi'))])).toBeUndefined();
    const q = quotasOnly(quota('compute', { 'limits.memory': 'lots' }, { 'limits.memory': '0' }));
    expect(namespaceLimitsRefusal(q, [rep('demo-0', MEM('8Gi'))])).toBeUndefined();
  });

  it('does not change its inputs', () => {
    const limits = limitsOnly(
      range('lr', { type: 'Container', default: { cpu: '1' }, defaultRequest: { cpu: '500m' } }),
    );
    const r = rep('demo-0', MEM('1Gi'));
    const before = JSON.stringify([limits, r]);
    expect(namespaceLimitsRefusal(limits, [r])).toBeUndefined();
    expect(JSON.stringify([limits, r])).toBe(before);
  });
});

describe('namespaceLimitsRefusal: PodSecurity', () => {
  const r = rep('demo-0', MEM('1Gi'));
  const withLevel = (enforce: string, version?: string) => ({
    limitRanges: [],
    quotas: [],
    podSecurity: { enforce, ...(version ? { version } : {}) },
  });

  it('restricted refuses the pods the operator builds (no securityContext), in the plugin words the v1.34.4 apiserver gave for such a pod', () => {
    expect(namespaceLimitsRefusal(withLevel('restricted'), [r])).toBe(
      'pods "demo-0" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "agent" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "agent" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "agent" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "agent" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',
    );
    expect(namespaceLimitsRefusal(withLevel('restricted', 'v1.30'), [r])).toContain('"restricted:v1.30"');
  });

  it('baseline, privileged or no label admit them; a LimitRange refusal comes first (its plugin runs before)', () => {
    expect(namespaceLimitsRefusal(withLevel('baseline'), [r])).toBeUndefined();
    expect(namespaceLimitsRefusal(withLevel('privileged'), [r])).toBeUndefined();
    const both = {
      ...withLevel('restricted'),
      limitRanges: [range('lr', { type: 'Container', max: { memory: '512Mi' } })],
    };
    expect(namespaceLimitsRefusal(both, [r])).toContain('maximum memory usage per Container is 512Mi');
  });
});

describe('addQuantities / subtractQuantities', () => {
  const q = parseQuantity;
  it.each([
    ['1536Mi', '2Gi', '3584Mi', '-512Mi'],
    ['500m', '1', '1500m', '-500m'],
    ['1', '500m', '1500m', '500m'],
    ['6Gi', '2Gi', '8Gi', '4Gi'],
    ['0', '2Gi', '2Gi', '-2Gi'],
    ['1Gi', '1Gi', '2Gi', '0'],
    ['1G', '1Gi', '2073741824', '-73741824'],
  ])('%s and %s: sum %s, difference %s', (a, b, sum, diff) => {
    expect(quantityToString(addQuantities(q(a), q(b)))).toBe(sum);
    expect(quantityToString(subtractQuantities(q(a), q(b)))).toBe(diff);
  });
});
