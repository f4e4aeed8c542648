/**
 * Builders of the objects tests put in a cluster (real or in-memory), so every test file builds a pod or
 * a CocoonHibernation the same way. Workflow-test worlds take observations (VM pods' annotations);
 * end-to-end tests take full objects the simulator runs.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { AGENT_CONTAINER_NAME, Annotations, Labels, TOLERATION_KEY } from '../../src/api/keys.js';

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
