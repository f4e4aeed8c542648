/**
 * Pod builders for CocoonSet agents and toolboxes (operator cocoonset/pods.go; docs/cocoonset.md#pods).
 * The objects are what the Go operator sends on Create, so pods it created are adopted without drift and
 * vk-cocoon reads the same annotations. Pure: no I/O; each call returns a fresh object.
 */
import type { V1Affinity, V1Pod, V1ResourceRequirements, V1Toleration } from '@kubernetes/client-node';
import {
  AGENT_CONTAINER_NAME,
  Annotations,
  API_VERSION,
  DEFAULT_NODE_POOL,
  EPHEMERAL_STORAGE,
  KIND_COCOONSET,
  Labels,
  PLACEHOLDER_IMAGE,
  type Role,
  Roles,
  TaintKeys,
  TOLERATION_KEY,
} from '../api/keys.js';
import { vmNameForAgent, vmNameForPod } from '../api/pod.js';
import type { CocoonSet, ToolboxSpec, VMOptions } from '../api/types.js';
import { canonicalQuantity, quantityFromJSON, quantityIsZero, quantityToString } from './quantity.js';
import { applyVMRuntime, applyVMSpec, vmSpecFromAgent, vmSpecFromToolbox } from './vmspec.js';

/**
 * Grace period of every managed pod: vk-cocoon may push a final snapshot within it (docs/cocoonset.md#pods).
 */
export const POD_TERMINATION_GRACE_SECONDS = 1;

/** Deep copy of plain JSON data (workflow-safe; no structuredClone in the Temporal sandbox). */
function jsonClone<T>(v: T): T {
  return JSON.parse(JSON.stringify(v)) as T;
}

/** Pod name of agent slot `slot`: `<cs>-<slot>` (slot 0 is the main). */
export function agentPodName(cs: CocoonSet, slot: number): string {
  return `${cs.metadata.name}-${slot}`;
}

/** Pod name of toolbox `tbName`: `<cs>-<tbName>`. */
export function toolboxPodName(cs: CocoonSet, tbName: string): string {
  return `${cs.metadata.name}-${tbName}`;
}

/** VM name of agent slot `slot`: `vk-<ns>-<cs>-<slot>`. */
export function agentVMName(cs: CocoonSet, slot: number): string {
  return vmNameForAgent(cs.metadata.namespace ?? '', cs.metadata.name ?? '', slot);
}

/** VM name of toolbox `tbName`: `vk-<ns>-<cs>-<tbName>`. */
export function toolboxVMName(cs: CocoonSet, tbName: string): string {
  return vmNameForPod(cs.metadata.namespace ?? '', toolboxPodName(cs, tbName));
}

/** `spec.nodePool`, or `default` when empty. */
export function nodePoolOf(cs: CocoonSet): string {
  return cs.spec.nodePool ? cs.spec.nodePool : DEFAULT_NODE_POOL;
}

/**
 * The three tolerations of every managed pod: the vk provider key (all effects), and not-ready /
 * unreachable NoExecute **without** tolerationSeconds, so a node flap never evicts (and destroys) a VM.
 */
export function managedTolerations(): V1Toleration[] {
  return [
    { key: TOLERATION_KEY, operator: 'Exists' },
    { key: TaintKeys.notReady, operator: 'Exists', effect: 'NoExecute' },
    { key: TaintKeys.unreachable, operator: 'Exists', effect: 'NoExecute' },
  ];
}

/**
 * `newManagedPod(cs, podName, role, slotLabel)` (docs/cocoonset.md#pods): metadata (labels name/role/slot/app
 * name, the generation stamp, a controller owner reference with blockOwnerDeletion), grace period 1 s, the
 * three tolerations, the pool (and snapshot CPU class when set) node selector, one `agent` container with the
 * placeholder image. Callers add the VM annotations and resources.
 */
export function newManagedPod(cs: CocoonSet, podName: string, role: Role, slotLabel: string): V1Pod {
  const name = cs.metadata.name ?? '';
  const nodeSelector: Record<string, string> = { [Labels.nodePool]: nodePoolOf(cs) };
  if (cs.spec.snapshotCompatibilityClass)
    nodeSelector[Labels.snapshotCPUClass] = cs.spec.snapshotCompatibilityClass;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: podName,
      namespace: cs.metadata.namespace,
      labels: {
        [Labels.cocoonSet]: name,
        [Labels.role]: role,
        [Labels.slot]: slotLabel,
        [Labels.appName]: name,
      },
      annotations: { [Annotations.cocoonSetGeneration]: String(cs.metadata.generation ?? 0) },
      ownerReferences: [
        {
          apiVersion: API_VERSION,
          kind: KIND_COCOONSET,
          name,
          uid: cs.metadata.uid ?? '',
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    },
    spec: {
      terminationGracePeriodSeconds: POD_TERMINATION_GRACE_SECONDS,
      tolerations: managedTolerations(),
      nodeSelector,
      containers: [{ name: AGENT_CONTAINER_NAME, image: PLACEHOLDER_IMAGE }],
    },
  };
}

/** Copies a quantity map with every value in Go's `Quantity.String()` form (what the Go client sends). */
function canonicalMap(m: Record<string, string> | undefined): Record<string, string> | undefined {
  if (!m) return undefined;
  return Object.fromEntries(Object.entries(m).map(([k, v]) => [k, canonicalQuantity(v)]));
}

/**
 * Container resources: a copy of `opts.resources` plus, when `storage` is set and non-zero,
 * `ephemeral-storage` = storage in both requests and limits (docs/cocoonset.md#pods). Never aliases the
 * spec's maps.
 */
export function containerResources(opts: VMOptions): V1ResourceRequirements {
  const src = opts.resources ?? {};
  const out: V1ResourceRequirements = {};
  const limits = canonicalMap(src.limits);
  const requests = canonicalMap(src.requests);
  if (limits) out.limits = limits;
  if (requests) out.requests = requests;
  if (src.claims) out.claims = jsonClone(src.claims);
  if (opts.storage !== undefined && opts.storage !== null) {
    const q = quantityFromJSON(opts.storage);
    if (!quantityIsZero(q)) {
      const s = quantityToString(q);
      out.requests = { ...(out.requests ?? {}), [EPHEMERAL_STORAGE]: s };
      out.limits = { ...(out.limits ?? {}), [EPHEMERAL_STORAGE]: s };
    }
  }
  return out;
}

/** Required node affinity `kubernetes.io/hostname In [node]` (the main's pin, docs/cocoonset.md#pods). */
export function requiredHostnameAffinity(node: string): V1Affinity {
  return {
    nodeAffinity: {
      requiredDuringSchedulingIgnoredDuringExecution: {
        nodeSelectorTerms: [{ matchExpressions: [{ key: Labels.hostname, operator: 'In', values: [node] }] }],
      },
    },
  };
}

/**
 * The node a pod's required hostname affinity pins it to (the form `requiredHostnameAffinity` writes: a
 * single term whose `kubernetes.io/hostname In` lists one node), or '' when it has no such pin.
 */
export function requiredHostname(pod: V1Pod): string {
  const terms =
    pod.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms ?? [];
  if (terms.length !== 1) return '';
  const e = (terms[0]!.matchExpressions ?? []).find((x) => x.key === Labels.hostname && x.operator === 'In');
  return e?.values?.length === 1 ? e.values[0]! : '';
}

/**
 * Preferred node affinity `kubernetes.io/hostname In [node]`, weight 100: the released-seat wake's hint
 * (docs/cocoonset.md#seat-release). It never relaxes the pool and CPU-class selectors, which are hard.
 */
export function preferredHostnameAffinity(node: string): V1Affinity {
  return {
    nodeAffinity: {
      preferredDuringSchedulingIgnoredDuringExecution: [
        {
          weight: 100,
          preference: { matchExpressions: [{ key: Labels.hostname, operator: 'In', values: [node] }] },
        },
      ],
    },
  };
}

/**
 * `buildAgentPod(cs, slot, mainVMName, bindNodeName)` (docs/cocoonset.md#pods). Slot 0 is the main (role
 * `main`, no fork-from); slot ≥ 1 is a sub-agent forking from `mainVMName`. VM annotations from
 * `vmSpecFromAgent`, resources + storage, envFrom, service account when set. A non-empty
 * `bindNodeName` hard-binds `spec.nodeName`; otherwise slot 0 with `spec.nodeName` set gets the required
 * hostname affinity. Throws QuantityParseError when a quantity in the spec is malformed.
 */
export function buildAgentPod(cs: CocoonSet, slot: number, mainVMName: string, bindNodeName: string): V1Pod {
  const agent = cs.spec.agent;
  const isMain = slot === 0;
  const pod = newManagedPod(cs, agentPodName(cs, slot), isMain ? Roles.main : Roles.subAgent, String(slot));
  const vmName = agentVMName(cs, slot);
  applyVMSpec(pod, vmSpecFromAgent(agent, vmName, cs.spec.snapshotPolicy, isMain ? '' : mainVMName));
  const spec = pod.spec!;
  const container = spec.containers[0]!;
  container.resources = containerResources(agent);
  if (agent.envFrom && agent.envFrom.length > 0) container.envFrom = jsonClone(agent.envFrom);
  if (agent.serviceAccountName) spec.serviceAccountName = agent.serviceAccountName;
  if (bindNodeName !== '') {
    spec.nodeName = bindNodeName;
  } else if (isMain && cs.spec.nodeName) {
    spec.affinity = requiredHostnameAffinity(cs.spec.nodeName);
  }
  return pod;
}

/**
 * `buildToolboxPod(cs, tb)` (docs/cocoonset.md#pods): pod `<cs>-<tb>`, role `toolbox`, slot label = toolbox
 * name, VM annotations from `vmSpecFromToolbox` (managed absent for static), and for `static` mode only the
 * pre-written runtime id / ip / vnc-port. Resources + storage; no envFrom, service account, nodeName or
 * affinity. Throws QuantityParseError when a quantity in the spec is malformed.
 */
export function buildToolboxPod(cs: CocoonSet, tb: ToolboxSpec): V1Pod {
  const pod = newManagedPod(cs, toolboxPodName(cs, tb.name), Roles.toolbox, tb.name);
  applyVMSpec(pod, vmSpecFromToolbox(tb, toolboxVMName(cs, tb.name), cs.spec.snapshotPolicy));
  if (tb.mode === 'static') {
    applyVMRuntime(pod, { vmID: tb.staticVMID ?? '', ip: tb.staticIP ?? '', vncPort: tb.vncPort ?? 0 });
  }
  pod.spec!.containers[0]!.resources = containerResources(tb);
  return pod;
}
