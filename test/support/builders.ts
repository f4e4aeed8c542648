/**
 * Builders of the objects tests put in a cluster (real or in-memory), so every test file builds a pod or
 * a CocoonHibernation the same way. Workflow-test worlds take observations (VM pods' annotations);
 * end-to-end tests take full objects the simulator runs.
 */
import type { V1Pod } from '@kubernetes/client-node';
import {
  AGENT_CONTAINER_NAME,
  Annotations,
  Finalizers,
  Labels,
  LifecycleStates,
  TOLERATION_KEY,
} from '../../src/api/keys.js';
import { cocoonSetGenerationOf, vmNameOf } from '../../src/api/pod.js';
import type { CocoonHibernation, CocoonSet, HibernationPhase } from '../../src/api/types.js';
import { buildAgentPod, buildToolboxPod } from '../../src/cocoonset/pods.js';

/** The image the simulator's run-mode pods name (run mode needs no base image in the registry). */
export const SIM_IMAGE = 'ghcr.io/cocoonstack/ubuntu:24.04';

/**
 * A pod the vk-cocoon simulator binds and runs: its pool's nodeSelector, the provider toleration,
 * `managed=true`, run mode, the image and the VM name; `app` labels it for clean-up, `annotations` adds to
 * (or overrides) the defaults.
 */
export function simPod(opts: {
  namespace: string;
  name: string;
  vmName: string;
  pool: string;
  app: string;
  annotations?: Record<string, string>;
}): V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: opts.name,
      namespace: opts.namespace,
      labels: { [Labels.appName]: opts.app },
      annotations: {
        [Annotations.vmName]: opts.vmName,
        [Annotations.managed]: 'true',
        [Annotations.mode]: 'run',
        [Annotations.image]: SIM_IMAGE,
        [Annotations.os]: 'linux',
        ...opts.annotations,
      },
    },
    spec: {
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 1,
      nodeSelector: { [Labels.nodePool]: opts.pool },
      tolerations: [{ key: TOLERATION_KEY, operator: 'Exists' }],
      containers: [{ name: AGENT_CONTAINER_NAME, image: SIM_IMAGE }],
    },
  };
}

/** Annotations of a managed VM pod named `vm` (plus `extra`), as the VM workflow's world observes it. */
export function vmPodAnnotations(vm: string, extra: Record<string, string> = {}): Record<string, string> {
  return { [Annotations.vmName]: vm, [Annotations.managed]: 'true', ...extra };
}

/** Annotations of a VM pod vk-cocoon has hibernated: hibernate requested, lifecycle `hibernated`. */
export function hibernatedPodAnnotations(vm: string): Record<string, string> {
  return vmPodAnnotations(vm, {
    [Annotations.hibernate]: 'true',
    [Annotations.lifecycleState]: 'hibernated',
  });
}

// ---- CocoonSets, their pods and CocoonHibernations (planner, workflow and replay tests) ----

/** Namespace and uid of the CocoonSet fixtures, and the agent image they name. */
export const NS = 'ns';
export const UID = 'test-uid';
export const IMAGE = 'ghcr.io/cocoonstack/cocoon/ubuntu:24.04';

/** `newCocoonSet(name, mods…)`: ns `ns`, UID `test-uid`, the ubuntu image, generation 0, no finalizer. */
export function newCocoonSet(name = 'demo', ...mods: ((cs: CocoonSet) => void)[]): CocoonSet {
  const cs: CocoonSet = {
    apiVersion: 'cocoonset.cocoonstack.io/v1',
    kind: 'CocoonSet',
    metadata: { name, namespace: NS, uid: UID, generation: 0 },
    spec: { agent: { image: IMAGE } },
  };
  for (const m of mods) m(cs);
  return cs;
}

/** Adds the CocoonSet finalizer (a set past its first pass). */
export function withFinalizer(cs: CocoonSet): void {
  cs.metadata.finalizers = [Finalizers.cocoonSet];
}

/** `readyPod(p)`: phase Running plus a Ready=True condition. */
export function readyPod(p: V1Pod): V1Pod {
  p.status = { ...(p.status ?? {}), phase: 'Running' };
  p.status.conditions = [...(p.status.conditions ?? []), { type: 'Ready', status: 'True' }];
  return p;
}

/**
 * Every pod of `cs` as earlier passes and vk-cocoon left them: built from the spec (main, sub-agents
 * forked from the main, toolboxes), all bound to `mainNode` and Ready.
 */
export function convergedPods(cs: CocoonSet, mainNode = CONVERGED_NODE): V1Pod[] {
  const bind = (p: V1Pod) => {
    p.spec!.nodeName = mainNode;
    return p;
  };
  const main = bind(readyPod(buildAgentPod(cs, 0, '', '')));
  const pods = [main];
  for (let slot = 1; slot <= (cs.spec.agent.replicas ?? 0); slot++) {
    pods.push(readyPod(buildAgentPod(cs, slot, vmNameOf(main), mainNode)));
  }
  for (const tb of cs.spec.toolboxes ?? []) pods.push(bind(readyPod(buildToolboxPod(cs, tb))));
  return pods;
}

/** The node `convergedPods` and the workflow tests' scheduler bind pods to (a Ready pod is bound). */
export const CONVERGED_NODE = 'node-a';

/** `liveOn(p, node, vmID)`: the pod's VM runs on `node` (VM id `vmID`, a running container). */
export function liveOn(p: V1Pod, node: string, vmID: string): V1Pod {
  p.spec = { ...(p.spec ?? { containers: [] }), nodeName: node };
  annotate(p, { [Annotations.vmID]: vmID });
  p.status = {
    ...(p.status ?? {}),
    containerStatuses: [
      { name: 'agent', image: '', imageID: '', ready: true, restartCount: 0, state: { running: {} } },
    ],
  };
  return p;
}

/** A CocoonSet `demo` with its finalizer, then `mods` applied. */
export function finalizedSet(...mods: ((cs: CocoonSet) => void)[]): CocoonSet {
  return newCocoonSet('demo', withFinalizer, ...mods);
}

/** Sets arbitrary pod annotations (merging). */
export function annotate(p: V1Pod, ann: Record<string, string>): V1Pod {
  p.metadata ??= {};
  p.metadata.annotations = { ...(p.metadata.annotations ?? {}), ...ann };
  return p;
}

/** `lifecycleHibernated(p)`: lifecycle `hibernated`, observed generation = the pod's own stamp. */
export function lifecycleHibernated(p: V1Pod): V1Pod {
  annotate(p, {
    [Annotations.lifecycleState]: LifecycleStates.hibernated,
    [Annotations.lifecycleObservedGeneration]: String(cocoonSetGenerationOf(p)),
  });
  delete p.metadata!.annotations![Annotations.lifecycleStateMessage];
  return p;
}

/** A CocoonHibernation naming `pod`. */
export function hibernation(
  pod: string,
  desire: 'Hibernate' | 'Wake',
  phase?: HibernationPhase,
): CocoonHibernation {
  return {
    metadata: { name: `h-${pod}`, namespace: NS },
    spec: { podRef: { name: pod }, desire },
    status: phase ? { phase } : undefined,
  };
}
