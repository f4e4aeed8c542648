/**
 * The compact form in which a CocoonSet pass receives its pods: a V1Pod holding only what the planner,
 * drift, status and deletion read (src/cocoonset/plan.ts, drift.ts, status.ts, classify.ts). A pod as the
 * apiserver returns it is 3–5 KB (managed fields, full status, volumes, tolerations…); the pass's read
 * crosses into workflow history as an activity result, whose payload Temporal caps at 2 MB, so a set of a
 * few hundred full pods could no longer be read at all. The summary keeps:
 *
 * - metadata: name, uid, resourceVersion (the VM workflow asked by the pass compares them), a failed pod's
 *   creationTimestamp (a failed toolbox's age), deletionTimestamp, the controller owner reference (uid), labels and annotations under
 *   the cocoonstack.io domains (VM spec, runtime, lifecycle, generation, hibernate, restore, dead letter,
 *   pool) except the post-clone reports and clone-from-dir, which no pass reads; the lifecycle message is
 *   cut to LIFECYCLE_MESSAGE_MAX characters (it only goes into an Event, itself cut at 1 KiB); and the
 *   LimitRanger's `kubernetes.io/limit-ranger` (which resources admission defaulted: drift ignores them);
 * - spec: nodeName, a required hostname affinity (the main's pin, in the form the set writes it), the pool
 *   and CPU-class node selector, serviceAccountName, container 0's name, resources (limits/requests) and
 *   envFrom;
 * - status: phase, the Ready condition, a `PodScheduled=False Unschedulable` condition with its message (the
 *   released-seat wake's `WakeNoCapacity`), and one container status with `state.running` when any runs.
 *
 * Pure; `summarizePod(summarizePod(p))` equals `summarizePod(p)`.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { Annotations, Labels, LIMIT_RANGER_ANNOTATION } from '../api/keys.js';
import { containerRunning } from '../api/pod.js';
import { isTerminal } from './classify.js';
import { requiredHostname, requiredHostnameAffinity } from './pods.js';

/**
 * Longest lifecycle-state message kept: it only feeds the `PodLifecycleFailed` Event, whose message is cut
 * at 1 KiB anyway (src/activities/cocoonset.ts).
 */
export const LIFECYCLE_MESSAGE_MAX = 1024;

/** Annotations vk-cocoon writes that no pass reads (and that can be long). */
const UNREAD_ANNOTATIONS = new Set<string>([
  Annotations.postCloneErrors,
  Annotations.postCloneHint,
  Annotations.postCloneState,
  Annotations.cloneFromDir,
]);

/** `cocoonstack.io/…`, `vm.cocoonstack.io/…`, `cocoonset.cocoonstack.io/…`. */
function cocoonKey(key: string): boolean {
  const slash = key.indexOf('/');
  if (slash < 0) return false;
  const prefix = key.slice(0, slash);
  return prefix === 'cocoonstack.io' || prefix.endsWith('.cocoonstack.io');
}

function pick(m: Record<string, string> | undefined, keep: (k: string) => boolean): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(m ?? {})) if (keep(k)) out[k] = v;
  return out;
}

/** The compact pod a pass reads (see the module comment). */
export function summarizePod(pod: V1Pod): V1Pod {
  const m = pod.metadata ?? {};
  const annotations = pick(
    m.annotations,
    (k) => (cocoonKey(k) && !UNREAD_ANNOTATIONS.has(k)) || k === LIMIT_RANGER_ANNOTATION,
  );
  const msg = annotations[Annotations.lifecycleStateMessage];
  if (msg !== undefined && msg.length > LIFECYCLE_MESSAGE_MAX) {
    annotations[Annotations.lifecycleStateMessage] = msg.slice(0, LIFECYCLE_MESSAGE_MAX);
  }
  // A failed pod's age decides a toolbox's recreate (plan.ts `recreateWaitMs`); a healthy pod's is not read.
  const failed = isTerminal(pod);
  const controller = m.ownerReferences?.find((o) => o.controller === true);
  const c0 = pod.spec?.containers?.[0];
  const out: V1Pod = {
    metadata: {
      name: m.name,
      ...(m.uid !== undefined ? { uid: m.uid } : {}),
      ...(m.resourceVersion !== undefined ? { resourceVersion: m.resourceVersion } : {}),
      labels: pick(m.labels, cocoonKey),
      annotations,
      ...(m.creationTimestamp != null && failed ? { creationTimestamp: m.creationTimestamp } : {}),
      ...(m.deletionTimestamp != null ? { deletionTimestamp: m.deletionTimestamp } : {}),
      ...(controller
        ? {
            ownerReferences: [
              {
                apiVersion: controller.apiVersion,
                kind: controller.kind,
                name: controller.name,
                uid: controller.uid,
                controller: true,
              },
            ],
          }
        : {}),
    },
  };
  if (pod.spec) {
    out.spec = {
      containers: c0
        ? [
            {
              name: c0.name,
              ...(c0.resources
                ? {
                    resources: {
                      ...(c0.resources.limits ? { limits: c0.resources.limits } : {}),
                      ...(c0.resources.requests ? { requests: c0.resources.requests } : {}),
                    },
                  }
                : {}),
              ...(c0.envFrom ? { envFrom: c0.envFrom } : {}),
            },
          ]
        : [],
      ...(pod.spec.nodeName ? { nodeName: pod.spec.nodeName } : {}),
      ...(requiredHostname(pod) ? { affinity: requiredHostnameAffinity(requiredHostname(pod)) } : {}),
      ...(pod.spec.serviceAccountName ? { serviceAccountName: pod.spec.serviceAccountName } : {}),
      ...(pod.spec.nodeSelector
        ? {
            nodeSelector: pick(
              pod.spec.nodeSelector,
              (k) => k === Labels.nodePool || k === Labels.snapshotCPUClass,
            ),
          }
        : {}),
    };
  }
  if (pod.status) {
    const ready = pod.status.conditions?.find((c) => c.type === 'Ready');
    const unschedulable = pod.status.conditions?.find(
      (c) => c.type === 'PodScheduled' && c.status === 'False' && c.reason === 'Unschedulable',
    );
    const conditions = [
      ...(ready ? [{ type: 'Ready', status: ready.status }] : []),
      ...(unschedulable
        ? [
            {
              type: 'PodScheduled',
              status: 'False',
              reason: 'Unschedulable',
              message: (unschedulable.message ?? '').slice(0, LIFECYCLE_MESSAGE_MAX),
            },
          ]
        : []),
    ];
    out.status = {
      ...(pod.status.phase ? { phase: pod.status.phase } : {}),
      ...(conditions.length > 0 ? { conditions } : {}),
      ...(containerRunning(pod)
        ? {
            containerStatuses: [
              {
                name: c0?.name ?? '',
                image: '',
                imageID: '',
                ready: false,
                restartCount: 0,
                state: { running: {} },
              },
            ],
          }
        : {}),
    };
  }
  return out;
}
