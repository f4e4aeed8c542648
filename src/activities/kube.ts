/**
 * Kubernetes activities of the VM workflow: reads of the world (pod + the CocoonHibernations targeting it),
 * the hibernate-annotation merge patch, finalizer add/remove, status merge patches and Events. Each is
 * idempotent, so Temporal may retry it (DESIGN.md §3.1). Writes go to the API server.
 */
import { randomUUID } from 'node:crypto';
import type { CoreV1Event, V1Pod } from '@kubernetes/client-node';
import { ApplicationFailure } from '@temporalio/common';
import { type TemporalUi, vmWorkflowId, workflowAnnotations } from '../api/ids.js';
import {
  API_VERSION,
  EVENT_SOURCE,
  Finalizers,
  GROUP,
  KIND_COCOONHIBERNATION,
  PLURAL_COCOONHIBERNATIONS,
  VERSION,
} from '../api/keys.js';
import {
  type HibernationObservation,
  observeHibernation,
  observePod,
  type PodObservation,
} from '../api/observe.js';
import type { CocoonHibernation } from '../api/types.js';
import { type KubeClients, mergePatch, statusCodeOf } from '../kube/client.js';

/** Observer of the phase-duration histograms (src/metrics.ts implements it). */
export interface PhaseDurationObserver {
  observePhaseDuration(kind: 'hibernate' | 'wake', result: 'ok' | 'timeout', seconds: number): void;
}

export interface KubeActivityDeps {
  kube: KubeClients;
  metrics?: PhaseDurationObserver;
  /** Temporal UI for the workflow-link annotation; absent = the workflow id annotation only. */
  temporalUi?: TemporalUi;
  log?: {
    info(o: object, m?: string): void;
    warn(o: object, m?: string): void;
    error(o: object, m?: string): void;
  };
}

/** Input of emitEvent. `key` makes the Event idempotent: one Event per key, however often retried. */
export interface EventInput {
  namespace: string;
  involved: { kind: string; name: string; uid?: string; apiVersion: string };
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
  key: string;
  /** Observed once, when the Event is first created. */
  phaseDuration?: { kind: 'hibernate' | 'wake'; result: 'ok' | 'timeout'; seconds: number };
}

function notFound(what: string): ApplicationFailure {
  return ApplicationFailure.create({ type: 'NotFound', message: `${what} not found`, nonRetryable: true });
}

/** Event object names are DNS subdomains; keys are hashed into a short stable suffix. */
function eventName(involvedName: string, key: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return `${involvedName}.${h.toString(16).padStart(8, '0')}`;
}

function truncate(s: string, max: number): string {
  return Buffer.byteLength(s) <= max
    ? s
    : `${Buffer.from(s)
        .subarray(0, max - 3)
        .toString()}...`;
}

/**
 * Builds the Kubernetes activities from injected clients. Errors: `NotFound` application failures
 * (non-retryable) when the target object is gone; other API errors are thrown as-is and retried by Temporal.
 */
export function createKubeActivities(deps: KubeActivityDeps) {
  const { core, custom } = deps.kube;

  async function getHibernation(namespace: string, name: string): Promise<CocoonHibernation | undefined> {
    try {
      return (await custom.getNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: PLURAL_COCOONHIBERNATIONS,
        name,
      })) as CocoonHibernation;
    } catch (err) {
      if (statusCodeOf(err) === 404) return undefined;
      throw err;
    }
  }

  async function listHibernationObjects(namespace: string): Promise<CocoonHibernation[]> {
    const list = (await custom.listNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural: PLURAL_COCOONHIBERNATIONS,
    })) as { items: CocoonHibernation[] };
    return list.items;
  }

  return {
    /**
     * Reads the VM's world from the API: its pod (exists:false when absent) and every CocoonHibernation
     * in the namespace whose spec.podRef.name is the pod. Used at workflow start, after errors and as the
     * slow fallback, never on the steady path.
     */
    async readVMWorld(input: { namespace: string; pod: string }): Promise<{
      pod: PodObservation;
      hibernations: HibernationObservation[];
    }> {
      let pod: PodObservation = { exists: false, namespace: input.namespace, name: input.pod };
      try {
        pod = observePod(await core.readNamespacedPod({ name: input.pod, namespace: input.namespace }));
      } catch (err) {
        if (statusCodeOf(err) !== 404) throw err;
      }
      const items = await listHibernationObjects(input.namespace);
      return {
        pod,
        hibernations: items.filter((cr) => cr.spec?.podRef?.name === input.pod).map(observeHibernation),
      };
    },

    /** Every CocoonHibernation in a namespace, trimmed (the deletion flow's holder check, spec §8). */
    async listHibernations(input: { namespace: string }): Promise<HibernationObservation[]> {
      return (await listHibernationObjects(input.namespace)).map(observeHibernation);
    },

    /**
     * JSON merge patch of pod annotations (null deletes a key). With `uid`, the patch carries
     * metadata.uid so a different pod incarnation with the same name rejects it. Returns the patched pod.
     */
    async patchPodAnnotations(input: {
      namespace: string;
      pod: string;
      uid?: string;
      annotations: Record<string, string | null>;
    }): Promise<PodObservation> {
      const body: { metadata: { annotations: Record<string, string | null>; uid?: string } } = {
        metadata: { annotations: input.annotations },
      };
      if (input.uid) body.metadata.uid = input.uid;
      try {
        const pod: V1Pod = await core.patchNamespacedPod(
          { name: input.pod, namespace: input.namespace, body },
          mergePatch,
        );
        return observePod(pod);
      } catch (err) {
        const code = statusCodeOf(err);
        if (code === 404 || code === 409) throw notFound(`pod ${input.namespace}/${input.pod}`);
        throw err;
      }
    },

    /**
     * Adds (`present: true`) or removes our finalizer with a full Update guarded by resourceVersion,
     * re-reading on conflict. Adding it also writes the workflow-link annotations (src/api/ids.ts). Returns the object after the write, or exists:false when it is gone.
     */
    async setHibernationFinalizer(input: {
      namespace: string;
      name: string;
      present: boolean;
    }): Promise<HibernationObservation> {
      for (let attempt = 0; ; attempt++) {
        const cr = await getHibernation(input.namespace, input.name);
        if (!cr) return { exists: false, namespace: input.namespace, name: input.name };
        const finalizers = cr.metadata.finalizers ?? [];
        const has = finalizers.includes(Finalizers.cocoonHibernation);
        if (has === input.present) return observeHibernation(cr);
        cr.metadata.finalizers = input.present
          ? [...finalizers, Finalizers.cocoonHibernation]
          : finalizers.filter((f) => f !== Finalizers.cocoonHibernation);
        const pod = cr.spec?.podRef?.name;
        if (input.present && pod) {
          const links = workflowAnnotations(vmWorkflowId(input.namespace, pod), deps.temporalUi);
          cr.metadata.annotations = { ...cr.metadata.annotations, ...links };
        }
        try {
          const updated = (await custom.replaceNamespacedCustomObject({
            group: GROUP,
            version: VERSION,
            namespace: input.namespace,
            plural: PLURAL_COCOONHIBERNATIONS,
            name: input.name,
            body: cr,
          })) as CocoonHibernation;
          // Removing the last finalizer of a deleting object deletes it.
          if (
            !input.present &&
            updated.metadata?.deletionTimestamp &&
            (updated.metadata.finalizers ?? []).length === 0
          ) {
            return { exists: false, namespace: input.namespace, name: input.name, uid: cr.metadata.uid };
          }
          return observeHibernation(updated);
        } catch (err) {
          const code = statusCodeOf(err);
          if (code === 404) return { exists: false, namespace: input.namespace, name: input.name };
          if (code === 409 && attempt < 5) continue;
          throw err;
        }
      }
    },

    /** JSON merge patch of the status subresource (no resourceVersion precondition, spec §4). */
    async patchHibernationStatus(input: {
      namespace: string;
      name: string;
      patch: { status: object };
    }): Promise<HibernationObservation> {
      try {
        const cr = (await custom.patchNamespacedCustomObjectStatus(
          {
            group: GROUP,
            version: VERSION,
            namespace: input.namespace,
            plural: PLURAL_COCOONHIBERNATIONS,
            name: input.name,
            body: input.patch,
          },
          mergePatch,
        )) as CocoonHibernation;
        return observeHibernation(cr);
      } catch (err) {
        if (statusCodeOf(err) === 404) throw notFound(`cocoonhibernation ${input.namespace}/${input.name}`);
        throw err;
      }
    },

    /**
     * Records a core/v1 Event once per `key` (a retried activity finds it already there and stops), and
     * observes the phase-duration histogram only on that first creation.
     */
    async emitEvent(input: EventInput): Promise<void> {
      const now = new Date();
      const event: CoreV1Event = {
        metadata: { name: eventName(input.involved.name, input.key), namespace: input.namespace },
        involvedObject: {
          kind: input.involved.kind,
          name: input.involved.name,
          namespace: input.namespace,
          uid: input.involved.uid,
          apiVersion: input.involved.apiVersion,
        },
        reason: input.reason,
        message: truncate(input.message, 1024),
        type: input.type,
        source: { component: EVENT_SOURCE },
        reportingComponent: EVENT_SOURCE,
        reportingInstance: process.env.HOSTNAME || randomUUID(),
        firstTimestamp: now,
        lastTimestamp: now,
        count: 1,
      };
      try {
        await core.createNamespacedEvent({ namespace: input.namespace, body: event });
      } catch (err) {
        if (statusCodeOf(err) === 409) return; // already recorded by an earlier attempt
        throw err;
      }
      if (input.phaseDuration) {
        const d = input.phaseDuration;
        deps.metrics?.observePhaseDuration(d.kind, d.result, d.seconds);
      }
    },
  };
}

export type KubeActivities = ReturnType<typeof createKubeActivities>;

/** The involved-object reference of a CocoonHibernation event. */
export function hibernationRef(name: string, uid?: string): EventInput['involved'] {
  return { kind: KIND_COCOONHIBERNATION, name, uid, apiVersion: API_VERSION };
}
