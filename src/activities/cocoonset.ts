/**
 * Kubernetes activities of the CocoonSet workflow: the reads a pass starts from (the CocoonSet and the
 * pods labelled with its name) and one idempotent write per `PassAction` type (src/cocoonset/plan.ts
 * `PassAction`; docs/cocoonset.md#a-pass-in-order, docs/cocoonset.md#generation-stamp,
 * docs/cocoonset.md#deletion-and-registry-gc). Expected API answers are returned as values (AlreadyExists on
 * create, NotFound on delete); a gone target of a patch is a non-retryable `NotFound` failure; any other API
 * error becomes `kubeFailure` (src/kube/errors.ts): the apiserver's message, not the HTTP dump, and
 * non-retryable for 4xx answers a retry cannot change (a 422 on create), so Temporal retries only 5xx,
 * 408/409/429 and transport errors.
 *
 * Names carry a `cocoonSet` prefix so they can be merged into one activity object with the VM
 * workflow's Kubernetes activities (src/activities/kube.ts) on the main worker.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { Context } from '@temporalio/activity';
import { cocoonSetWorkflowId, type TemporalUi, vmWorkflowId, workflowAnnotations } from '../api/ids.js';
import {
  API_VERSION,
  GROUP,
  KIND_COCOONSET,
  Labels,
  PLURAL_COCOONHIBERNATIONS,
  PLURAL_COCOONSETS,
  VERSION,
} from '../api/keys.js';
import type { CocoonHibernation, CocoonSet } from '../api/types.js';
import type { NamespaceLimits } from '../cocoonset/admission.js';
import type { PassMetric } from '../cocoonset/plan.js';
import { summarizePod } from '../cocoonset/summary.js';
import { type KubeClients, mergePatch, statusCodeOf, stripManagedFields } from '../kube/client.js';
import { kubeFailure, notFound } from '../kube/errors.js';
import type { OwnWrites } from '../kube/own-writes.js';
import type { OperatorMetrics } from '../metrics.js';
import { type SetDesire, setDesireSignal, VM_WORKFLOW_TYPE, vmWorkflowInput } from '../workflows/messages.js';
import { identityAttributes } from '../workflows/search-attributes.js';
import { callingWorkflowId, EventCache, recordEvent } from './kube.js';

/** Dependencies of the CocoonSet activities. `metrics` absent = counters are not incremented. */
export interface CocoonSetActivityDeps {
  kube: KubeClients;
  metrics?: Pick<OperatorMetrics, PassMetric>;
  /** Temporal UI for the workflow-link annotation; absent = the workflow id annotation only. */
  temporalUi?: TemporalUi;
  /** Pods per page of a pass's pod read (default POD_PAGE_SIZE; tests lower it). */
  podPageSize?: number;
  /**
   * Where the pod writes (create, delete, annotation patch) are recorded as the calling set workflow's own,
   * so the watcher does not signal their echoes back to it (src/kube/own-writes.ts); absent = not recorded.
   */
  ownWrites?: OwnWrites;
}

/**
 * Pods per page of a pass's pod read. A summary is ~1 KB (src/cocoonset/summary.ts), so a page stays far
 * below Temporal's 2 MB payload limit whatever the set's size.
 */
export const POD_PAGE_SIZE = 250;

/** The namespace label that sets the PodSecurity admission plugin's enforced level (Pod Security Standards). */
const POD_SECURITY_ENFORCE = 'pod-security.kubernetes.io/enforce';

/** The longest label value the apiserver accepts (the set's name is its pods' `cocoonSet` label value). */
const LABEL_VALUE_MAX = 63;

/** One page of a set's pods (compact summaries); `continue` set = more pages follow. */
export interface PodPage {
  pods: V1Pod[];
  continue?: string;
}

/** What a pass starts from: the CocoonSet (null when gone) and the first page of its pods. */
export interface CocoonSetWorld extends PodPage {
  cs: CocoonSet | null;
}

/**
 * Builds the CocoonSet activities from injected clients. Every activity is idempotent: a retry after a
 * lost answer converges (create → alreadyExists, delete → notFound, merge patches re-apply, the
 * finalizer update re-reads and stops when already done, events are keyed).
 */
export function createCocoonSetActivities(deps: CocoonSetActivityDeps) {
  const { core, custom } = deps.kube;

  /**
   * Runs `write` of pod `namespace/name` as the calling set workflow's own write (`deps.ownWrites`), recorded
   * with the resourceVersion of the pod it answers.
   */
  function ownPodWrite(namespace: string, name: string, write: () => Promise<V1Pod>): Promise<V1Pod> {
    if (!deps.ownWrites) return write();
    return deps.ownWrites.around(
      'pod',
      namespace,
      name,
      callingWorkflowId(),
      write,
      (pod) => pod.metadata?.resourceVersion,
    );
  }
  const events = new EventCache();

  async function listPodPage(namespace: string, name: string, token: string | undefined): Promise<PodPage> {
    // A label value is at most 63 characters, so a set with a longer name (the CRD admits 253) owns no pod:
    // the selector would fail every pass before its status is written. With no pods the pass goes on to the
    // validation gate, which names the label its pods cannot carry (`InvalidSpec`).
    if (name.length > LABEL_VALUE_MAX) return { pods: [] };
    try {
      const list = await core.listNamespacedPod({
        namespace,
        labelSelector: `${Labels.cocoonSet}=${name}`,
        limit: deps.podPageSize ?? POD_PAGE_SIZE,
        _continue: token,
      });
      const next = list.metadata?._continue;
      return { pods: list.items.map(summarizePod), ...(next ? { continue: next } : {}) };
    } catch (err) {
      throw kubeFailure(err, `list pods of cocoonset ${namespace}/${name}`);
    }
  }

  async function getCocoonSet(namespace: string, name: string): Promise<CocoonSet | null> {
    try {
      return (await custom.getNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: PLURAL_COCOONSETS,
        name,
      })) as CocoonSet;
    } catch (err) {
      if (statusCodeOf(err) === 404) return null;
      throw kubeFailure(err);
    }
  }

  return {
    /**
     * Reads the CocoonSet and the first page of the pods in its namespace labelled
     * `cocoonset.cocoonstack.io/name=<name>` (ownership is filtered by the planner), each as its compact
     * summary (src/cocoonset/summary.ts). `cs: null` when the CocoonSet is gone. `continue` set = more
     * pages: read them with `cocoonSetListPods`. Used at the start of every pass and of the deletion flow.
     */
    async cocoonSetReadWorld(input: { namespace: string; name: string }): Promise<CocoonSetWorld> {
      const cs = await getCocoonSet(input.namespace, input.name);
      if (!cs) return { cs: null, pods: [] };
      return { cs: stripManagedFields(cs), ...(await listPodPage(input.namespace, input.name, undefined)) };
    },

    /**
     * The next page of the pods `cocoonSetReadWorld` started listing (`continue` from its answer or the
     * previous page's). Errors: an expired token (410 Gone) is non-retryable; the pass starts over.
     */
    async cocoonSetListPods(input: { namespace: string; name: string; continue: string }): Promise<PodPage> {
      return listPodPage(input.namespace, input.name, input.continue);
    },

    /**
     * The CocoonSet's current `metadata.generation`, or null when it is gone: a pass asks before its first pod
     * delete whether the spec it planned from is still the current one (docs/cocoonset.md#a-pass-in-order).
     */
    async cocoonSetGeneration(input: { namespace: string; name: string }): Promise<number | null> {
      const cs = await getCocoonSet(input.namespace, input.name);
      return cs ? (cs.metadata.generation ?? 0) : null;
    },

    /** Creates a pod (docs/cocoonset.md#a-pass-in-order): `ok`, or `alreadyExists` on 409. */
    async cocoonSetCreatePod(input: { namespace: string; pod: V1Pod }): Promise<'ok' | 'alreadyExists'> {
      try {
        const name = input.pod.metadata?.name ?? '';
        await ownPodWrite(input.namespace, name, () =>
          core.createNamespacedPod({ namespace: input.namespace, body: input.pod }),
        );
        return 'ok';
      } catch (err) {
        if (statusCodeOf(err) === 409) return 'alreadyExists';
        throw kubeFailure(err);
      }
    },

    /**
     * Deletes a pod: `ok`, or `notFound` on 404 (docs/cocoonset.md#sub-agent-rebuild-and-dead-letter,
     * docs/cocoonset.md#deletion-and-registry-gc). With `ifSetGeneration`, first reads that CocoonSet and
     * answers `stale` without deleting when its generation is another or it is gone: the pass planned the
     * delete from a spec an edit has replaced (docs/cocoonset.md#a-pass-in-order).
     */
    async cocoonSetDeletePod(input: {
      namespace: string;
      pod: string;
      ifSetGeneration?: { name: string; generation: number };
    }): Promise<'ok' | 'notFound' | 'stale'> {
      if (input.ifSetGeneration) {
        const cs = await getCocoonSet(input.namespace, input.ifSetGeneration.name);
        if ((cs?.metadata.generation ?? null) !== input.ifSetGeneration.generation) return 'stale';
      }
      try {
        await ownPodWrite(input.namespace, input.pod, () =>
          core.deleteNamespacedPod({ name: input.pod, namespace: input.namespace }),
        );
        return 'ok';
      } catch (err) {
        if (statusCodeOf(err) === 404) return 'notFound';
        throw kubeFailure(err);
      }
    },

    /**
     * Reads one pod (the toolbox name-collision check, docs/cocoonset.md#a-pass-in-order). Errors: `NotFound`
     * (non-retryable) when absent.
     */
    async cocoonSetGetPod(input: { namespace: string; pod: string }): Promise<V1Pod> {
      try {
        return stripManagedFields(
          await core.readNamespacedPod({ name: input.pod, namespace: input.namespace }),
        );
      } catch (err) {
        if (statusCodeOf(err) === 404) throw notFound(`pods "${input.pod}"`);
        throw kubeFailure(err);
      }
    },

    /** JSON merge patch of pod annotations (`null` deletes a key). Errors: `NotFound` when the pod is gone. */
    async cocoonSetPatchPodAnnotations(input: {
      namespace: string;
      pod: string;
      annotations: Record<string, string | null>;
    }): Promise<void> {
      try {
        await ownPodWrite(input.namespace, input.pod, () =>
          core.patchNamespacedPod(
            {
              name: input.pod,
              namespace: input.namespace,
              body: { metadata: { annotations: input.annotations } },
            },
            mergePatch,
          ),
        );
      } catch (err) {
        if (statusCodeOf(err) === 404) throw notFound(`pods "${input.pod}"`);
        throw kubeFailure(err);
      }
    },

    /**
     * JSON merge patch of the CocoonSet's annotations, no resourceVersion
     * (docs/cocoonset.md#sub-agent-rebuild-and-dead-letter, docs/cocoonset.md#deletion-and-registry-gc).
     */
    async cocoonSetPatchAnnotations(input: {
      namespace: string;
      name: string;
      annotations: Record<string, string | null>;
    }): Promise<void> {
      try {
        await custom.patchNamespacedCustomObject(
          {
            group: GROUP,
            version: VERSION,
            namespace: input.namespace,
            plural: PLURAL_COCOONSETS,
            name: input.name,
            body: { metadata: { annotations: input.annotations } },
          },
          mergePatch,
        );
      } catch (err) {
        if (statusCodeOf(err) === 404) throw notFound(`cocoonset ${input.namespace}/${input.name}`);
        throw kubeFailure(err);
      }
    },

    /**
     * Adds (`present: true`) or removes `finalizer` with a full Update guarded by resourceVersion,
     * re-reading on 409 (at most 5 times). Adding it also writes the workflow-link annotations. Returns false
     * when the CocoonSet is gone (docs/cocoonset.md#a-pass-in-order,
     * docs/cocoonset.md#deletion-and-registry-gc).
     */
    async cocoonSetSetFinalizer(input: {
      namespace: string;
      name: string;
      finalizer: string;
      present: boolean;
    }): Promise<boolean> {
      for (let attempt = 0; ; attempt++) {
        const cs = await getCocoonSet(input.namespace, input.name);
        if (!cs) return false;
        const finalizers = cs.metadata.finalizers ?? [];
        if (finalizers.includes(input.finalizer) === input.present) return true;
        cs.metadata.finalizers = input.present
          ? [...finalizers, input.finalizer]
          : finalizers.filter((f) => f !== input.finalizer);
        if (input.present) {
          const links = workflowAnnotations(
            cocoonSetWorkflowId(input.namespace, input.name),
            deps.temporalUi,
          );
          cs.metadata.annotations = { ...cs.metadata.annotations, ...links };
        }
        try {
          await custom.replaceNamespacedCustomObject({
            group: GROUP,
            version: VERSION,
            namespace: input.namespace,
            plural: PLURAL_COCOONSETS,
            name: input.name,
            body: cs,
          });
          return true;
        } catch (err) {
          const code = statusCodeOf(err);
          if (code === 404) return false;
          if (code === 409 && attempt < 5) continue;
          throw kubeFailure(err);
        }
      }
    },

    /**
     * JSON merge patch on `/status` (docs/cocoonset.md#status-roll-up). Errors: `NotFound` when the CocoonSet
     * is gone.
     */
    async cocoonSetPatchStatus(input: {
      namespace: string;
      name: string;
      body: { status: Record<string, unknown> };
    }): Promise<void> {
      try {
        await custom.patchNamespacedCustomObjectStatus(
          {
            group: GROUP,
            version: VERSION,
            namespace: input.namespace,
            plural: PLURAL_COCOONSETS,
            name: input.name,
            body: input.body,
          },
          mergePatch,
        );
      } catch (err) {
        if (statusCodeOf(err) === 404) throw notFound(`cocoonset ${input.namespace}/${input.name}`);
        throw kubeFailure(err);
      }
    },

    /**
     * Whether any Node carries every label of `labelSelector` (`k=v,k2=v2`): the placement a main pod the
     * pass would replace its live main with (docs/cocoonset.md#a-pass-in-order, step 3). One List with
     * `limit: 1`. Errors: the apiserver's, non-retryable for a 403 (a role without nodes: the pass then
     * goes on as if a node matched).
     */
    async cocoonSetAnyNode(input: { labelSelector: string }): Promise<boolean> {
      try {
        const list = await core.listNode({ labelSelector: input.labelSelector, limit: 1 });
        return list.items.length > 0;
      } catch (err) {
        throw kubeFailure(err, `list nodes matching ${input.labelSelector}`);
      }
    },

    /**
     * The namespace's LimitRanges and ResourceQuotas, trimmed to what the admission prediction reads
     * (src/cocoonset/admission.ts), and its Pod Security `enforce` labels: a pass asks before it deletes a
     * live pod to replace it (docs/cocoonset.md#a-pass-in-order). Two Lists and a GET of the Namespace.
     * Errors: the apiserver's (a 403 is non-retryable: the pass then fails with it, deleting nothing).
     */
    async cocoonSetNamespaceLimits(input: { namespace: string }): Promise<NamespaceLimits> {
      try {
        const [ranges, quotas, ns] = await Promise.all([
          core.listNamespacedLimitRange({ namespace: input.namespace }),
          core.listNamespacedResourceQuota({ namespace: input.namespace }),
          core.readNamespace({ name: input.namespace }),
        ]);
        const enforce = ns.metadata?.labels?.[POD_SECURITY_ENFORCE];
        const version = ns.metadata?.labels?.[`${POD_SECURITY_ENFORCE}-version`];
        return {
          ...(enforce ? { podSecurity: { enforce, ...(version ? { version } : {}) } } : {}),
          limitRanges: ranges.items.map((lr) => ({
            name: lr.metadata?.name ?? '',
            limits: (lr.spec?.limits ?? []).map((l) => ({
              type: l.type,
              ...(l.min ? { min: l.min } : {}),
              ...(l.max ? { max: l.max } : {}),
              ...(l._default ? { default: l._default } : {}),
              ...(l.defaultRequest ? { defaultRequest: l.defaultRequest } : {}),
              ...(l.maxLimitRequestRatio ? { maxLimitRequestRatio: l.maxLimitRequestRatio } : {}),
            })),
          })),
          quotas: quotas.items.map((q) => ({
            name: q.metadata?.name ?? '',
            ...(q.spec?.scopes ? { scopes: q.spec.scopes } : {}),
            ...(q.spec?.scopeSelector ? { scopeSelector: q.spec.scopeSelector } : {}),
            ...(q.status?.hard ? { hard: q.status.hard } : {}),
            ...(q.status?.used ? { used: q.status.used } : {}),
          })),
        };
      } catch (err) {
        throw kubeFailure(err, `list limitranges and resourcequotas in ${input.namespace}`);
      }
    },

    /**
     * Every CocoonHibernation in the namespace (restore intent, docs/cocoonset.md#restore-from-hibernation;
     * asked only when pods are built).
     */
    async cocoonSetListHibernations(input: { namespace: string }): Promise<CocoonHibernation[]> {
      try {
        const list = (await custom.listNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace: input.namespace,
          plural: PLURAL_COCOONHIBERNATIONS,
        })) as { items: CocoonHibernation[] };
        return list.items.map(stripManagedFields);
      } catch (err) {
        throw kubeFailure(err);
      }
    },

    /**
     * Records an Event on the CocoonSet (docs/cocoonset.md#events) with the operator's one Event writer,
     * `recordEvent` of src/activities/kube.ts: folded like client-go's recorder (same object, type, reason
     * and message within 10 minutes → one Event whose count grows), each `key` counted once however often
     * retried.
     */
    async cocoonSetEmitEvent(input: {
      namespace: string;
      name: string;
      uid?: string;
      type: 'Normal' | 'Warning';
      reason: string;
      message: string;
      key: string;
    }): Promise<void> {
      await recordEvent(
        core,
        {
          namespace: input.namespace,
          involved: { kind: KIND_COCOONSET, name: input.name, uid: input.uid, apiVersion: API_VERSION },
          type: input.type,
          reason: input.reason,
          message: input.message,
          key: input.key,
        },
        Date.now(),
        events,
      );
    },

    /**
     * Tells the VM workflow of pod `<namespace>/<pod>` what its set wants (docs/cocoonset.md#suspend):
     * signal-with-start `setDesire` through the worker's own client, on this activity's task queue (the
     * workflows' queue). Idempotent: the VM workflow ignores a repeated desire.
     */
    async cocoonSetAskVM(input: { namespace: string; pod: string; desire: SetDesire }): Promise<void> {
      const ctx = Context.current();
      await ctx.client.workflow.signalWithStart(VM_WORKFLOW_TYPE, {
        workflowId: vmWorkflowId(input.namespace, input.pod),
        taskQueue: ctx.info.taskQueue,
        args: [vmWorkflowInput(input.namespace, input.pod)],
        typedSearchAttributes: identityAttributes({ namespace: input.namespace, vmName: '', kind: 'VM' }),
        signal: setDesireSignal,
        signalArgs: [input.desire],
      });
    },

    /**
     * Increments one of the pass's counters (docs/cocoonset.md#events). Not idempotent across a retry after a
     * lost answer (a counter may then count twice); it cannot fail, so Temporal has no reason to retry it.
     */
    async cocoonSetCountMetric(input: { metric: PassMetric; labels: Record<string, string> }): Promise<void> {
      const counter = deps.metrics?.[input.metric] as
        | { inc(labels: Record<string, string>): void }
        | undefined;
      counter?.inc(input.labels);
    },
  };
}

/** The activity interface the CocoonSet workflow proxies (tests implement it in memory). */
export type CocoonSetActivities = ReturnType<typeof createCocoonSetActivities>;
