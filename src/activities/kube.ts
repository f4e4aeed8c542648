/**
 * Kubernetes activities of the VM workflow: reads of the world (pod + the CocoonHibernations targeting it),
 * the hibernate-annotation merge patch, finalizer add/remove, status merge patches and Events. Each is
 * idempotent, so Temporal may retry it (docs/architecture.md#activities-and-task-queues). Writes go to the
 * API server.
 */
import { createHash } from 'node:crypto';
import type { CoreV1Api, CoreV1Event, V1Pod } from '@kubernetes/client-node';
import { Context } from '@temporalio/activity';
import { type TemporalUi, vmWorkflowId, workflowAnnotations } from '../api/ids.js';
import {
  API_VERSION,
  EVENT_KEYS_ANNOTATION,
  EVENT_SOURCE,
  Finalizers,
  GROUP,
  KIND_COCOONHIBERNATION,
  PLURAL_COCOONHIBERNATIONS,
  PLURAL_COCOONSETS,
  VERSION,
} from '../api/keys.js';
import {
  type HibernationObservation,
  observeHibernation,
  observePod,
  type PodObservation,
} from '../api/observe.js';
import { podNameProblem } from '../api/pod.js';
import type { CocoonHibernation } from '../api/types.js';
import { type KubeClients, mergePatch, statusCodeOf } from '../kube/client.js';
import { notFound } from '../kube/errors.js';
import type { OwnWrites } from '../kube/own-writes.js';

/** Observer of the phase-duration histograms (src/metrics.ts implements it). */
export interface PhaseDurationObserver {
  observePhaseDuration(kind: 'hibernate' | 'wake', result: 'ok' | 'timeout', seconds: number): void;
}

export interface KubeActivityDeps {
  kube: KubeClients;
  metrics?: PhaseDurationObserver;
  /** Temporal UI for the workflow-link annotation; absent = the workflow id annotation only. */
  temporalUi?: TemporalUi;
  /** Where the writes of pods and CocoonHibernations are recorded for the watcher's echo filter. */
  ownWrites?: OwnWrites;
  log?: {
    info(o: object, m?: string): void;
    warn(o: object, m?: string): void;
    error(o: object, m?: string): void;
  };
}

/** Input of setHibernationFinalizer: which CR, add or remove, and the CR as the caller last saw it. */
export interface FinalizerInput {
  namespace: string;
  name: string;
  present: boolean;
  seen?: FinalizerSeen;
}

/** The CR as a workflow last saw it, for a finalizer write the server refuses if the CR changed since. */
export interface FinalizerSeen {
  resourceVersion?: string;
  finalizers?: string[];
  podRef?: string;
}

/**
 * Input of emitEvent / recordEvent. `key` identifies one occurrence: it is counted once, however often the
 * activity is retried.
 */
export interface EventInput {
  namespace: string;
  involved: { kind: string; name: string; uid?: string; apiVersion: string };
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
  key: string;
  /** Observed once, when this key is first counted. */
  phaseDuration?: { kind: 'hibernate' | 'wake'; result: 'ok' | 'timeout'; seconds: number };
}

/**
 * An Event object name (a DNS subdomain, ≤ 253 characters): the involved object's name, a dot and the first
 * 16 hex digits of the SHA-256 of `key`.
 */
export function eventName(involvedName: string, key: string): string {
  const h = createHash('sha256').update(key).digest('hex').slice(0, 16);
  return `${involvedName.slice(0, 253 - 17)}.${h}`;
}

function truncate(s: string, max: number): string {
  return Buffer.byteLength(s) <= max
    ? s
    : `${Buffer.from(s)
        .subarray(0, max - 3)
        .toString()}...`;
}

/**
 * Identical Events whose last occurrence lies within this window fold into one (client-go's
 * EventCorrelator aggregates over 10 minutes; the apiserver drops Events after its 1 h event TTL).
 */
export const EVENT_FOLD_WINDOW_MS = 10 * 60_000;
/** How many occurrence keys a folded Event remembers (a retry comes right after its first attempt). */
const EVENT_KEYS_KEPT = 20;
/** Event messages are cut to this many bytes. */
const EVENT_MESSAGE_MAX_BYTES = 1024;
/** Re-reads after a conflicting concurrent fold of the same Event. */
const EVENT_FOLD_ATTEMPTS = 5;

/** metav1.Time text (RFC 3339, seconds). */
function metaTime(ms: number): string {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function timeMs(t: Date | string | undefined): number {
  if (t === undefined || t === null) return Number.NaN;
  return t instanceof Date ? t.getTime() : Date.parse(t);
}

/** The occurrence keys recorded on an Event (EVENT_KEYS_ANNOTATION), [] when absent or unreadable. */
export function eventKeysOf(ev: CoreV1Event): string[] {
  const raw = ev.metadata?.annotations?.[EVENT_KEYS_ANNOTATION];
  if (!raw) return [];
  try {
    const keys = JSON.parse(raw) as unknown;
    return Array.isArray(keys) ? keys.filter((k): k is string => typeof k === 'string') : [];
  } catch {
    return [];
  }
}

/** What this process last wrote of one folded Event: its name, version, count and occurrence keys. */
interface CachedEvent {
  name: string;
  resourceVersion?: string;
  count: number;
  keys: string[];
  /** Epoch ms of its last occurrence. */
  lastMs: number;
}

/**
 * The Events this process wrote, per involved object, type, reason and message (as client-go's
 * EventCorrelator keeps them in memory), so a repeat is folded without reading the Event first. Bounded:
 * the least recently used entries beyond `max` go.
 */
export class EventCache {
  private readonly entries = new Map<string, CachedEvent>();
  constructor(private readonly max = 4096) {}

  get(key: string): CachedEvent | undefined {
    const e = this.entries.get(key);
    if (e) {
      this.entries.delete(key);
      this.entries.set(key, e);
    }
    return e;
  }

  set(key: string, e: CachedEvent): void {
    this.entries.delete(key);
    this.entries.set(key, e);
    for (const k of this.entries.keys()) {
      if (this.entries.size <= this.max) break;
      this.entries.delete(k);
    }
  }

  delete(key: string): void {
    this.entries.delete(key);
  }
}

function cachedEvent(ev: CoreV1Event): CachedEvent {
  return {
    name: ev.metadata?.name ?? '',
    resourceVersion: ev.metadata?.resourceVersion,
    count: ev.count ?? 1,
    keys: eventKeysOf(ev),
    lastMs: timeMs(ev.lastTimestamp ?? ev.firstTimestamp),
  };
}

/**
 * Records one occurrence (`input.key`, at `nowMs` epoch ms) of an Event, folded as client-go's recorder
 * folds them: this operator's occurrences on the same involved object with the same type, reason and
 * message (the fold key) are one Event whose `count` grows while each comes within EVENT_FOLD_WINDOW_MS of
 * the last. The Event's name is derived from the fold key (`eventName`), so finding it is one GET by name,
 * never a listing whose cost grows with the namespace's Events:
 *
 * - a repeat of an Event this process wrote (`cache`) is folded from memory: a merge patch of count + 1,
 *   lastTimestamp and the occurrence keys, carrying the resourceVersion last written, so a concurrent fold
 *   conflicts instead of being lost;
 * - otherwise the Event is created with count 1; if it exists (an earlier process, or a concurrent
 *   attempt, wrote it), it is read: an occurrence key it already counted is not counted again (the last
 *   EVENT_KEYS_KEPT keys are kept on the Event, so a retried activity never counts twice, across a
 *   restart too); a last occurrence within the window is folded; an older one starts a new series on the
 *   same object (count 1, firstTimestamp now), where client-go would create an Event of another name;
 * - a conflicting concurrent write (409) or an Event expired meanwhile (404) is re-read, at most
 *   EVENT_FOLD_ATTEMPTS times.
 *
 * Returns true when this call counted the key, false when it had been counted before. Errors: API errors
 * other than those are thrown. An Event an operator version before this naming wrote (named after the
 * occurrence key) is not found, so a new occurrence starts an Event beside it.
 */
export async function recordEvent(
  core: CoreV1Api,
  input: EventInput,
  nowMs: number,
  cache?: EventCache,
): Promise<boolean> {
  const message = truncate(input.message, EVENT_MESSAGE_MAX_BYTES);
  const foldKey = [
    input.namespace,
    input.involved.uid ?? input.involved.name,
    input.type,
    input.reason,
    message,
  ].join('\u0000');
  const name = eventName(input.involved.name, foldKey);
  /** Patches `ev` with this occurrence: folded into its count, or the first of a new series. */
  const count = async (ev: Omit<CachedEvent, 'lastMs'>, series: 'fold' | 'new') => {
    const keys = [...ev.keys, input.key].slice(-EVENT_KEYS_KEPT);
    const out = await core.patchNamespacedEvent(
      {
        name: ev.name,
        namespace: input.namespace,
        body: {
          metadata: {
            resourceVersion: ev.resourceVersion,
            annotations: { [EVENT_KEYS_ANNOTATION]: JSON.stringify(keys) },
          },
          ...(series === 'fold' ? { count: ev.count + 1 } : { count: 1, firstTimestamp: metaTime(nowMs) }),
          lastTimestamp: metaTime(nowMs),
        },
      },
      mergePatch,
    );
    cache?.set(foldKey, cachedEvent(out));
  };
  const create = async () => {
    const out = await core.createNamespacedEvent({
      namespace: input.namespace,
      body: {
        metadata: {
          name,
          namespace: input.namespace,
          annotations: { [EVENT_KEYS_ANNOTATION]: JSON.stringify([input.key]) },
        },
        involvedObject: { ...input.involved, namespace: input.namespace },
        reason: input.reason,
        message,
        type: input.type,
        source: { component: EVENT_SOURCE },
        reportingComponent: EVENT_SOURCE,
        reportingInstance: process.env.HOSTNAME || EVENT_SOURCE,
        firstTimestamp: new Date(metaTime(nowMs)),
        lastTimestamp: new Date(metaTime(nowMs)),
        count: 1,
      },
    });
    cache?.set(foldKey, cachedEvent(out));
  };
  const retryable = (err: unknown) => {
    const code = statusCodeOf(err);
    return code === 409 || code === 404;
  };

  const cached = cache?.get(foldKey);
  if (cached && nowMs - cached.lastMs <= EVENT_FOLD_WINDOW_MS) {
    if (cached.keys.includes(input.key)) return false;
    try {
      await count(cached, 'fold');
      return true;
    } catch (err) {
      if (!retryable(err)) throw err;
      cache?.delete(foldKey);
    }
  }
  for (let attempt = 1; ; attempt++) {
    try {
      await create();
      return true;
    } catch (err) {
      if (statusCodeOf(err) !== 409) throw err;
    }
    try {
      const ev = cachedEvent(await core.readNamespacedEvent({ name, namespace: input.namespace }));
      if (ev.keys.includes(input.key)) {
        cache?.set(foldKey, ev);
        return false;
      }
      await count(ev, nowMs - ev.lastMs <= EVENT_FOLD_WINDOW_MS ? 'fold' : 'new');
      return true;
    } catch (err) {
      if (!retryable(err) || attempt >= EVENT_FOLD_ATTEMPTS) throw err;
    }
  }
}

/**
 * Builds the Kubernetes activities from injected clients. Errors: `NotFound` application failures
 * (non-retryable) when the target object is gone; other API errors are thrown as-is and retried by Temporal.
 */
export function createKubeActivities(deps: KubeActivityDeps) {
  const { core, custom } = deps.kube;
  const events = new EventCache();

  async function emit(input: EventInput): Promise<void> {
    const counted = await recordEvent(core, input, Date.now(), events);
    if (counted && input.phaseDuration) {
      const d = input.phaseDuration;
      deps.metrics?.observePhaseDuration(d.kind, d.result, d.seconds);
    }
  }

  /**
   * Runs `write` of `kind` `namespace/name` as the calling workflow's own write (src/kube/own-writes.ts):
   * marked in flight until it answers, then recorded with the answered object's resourceVersion.
   */
  function owned<T extends { exists: boolean; resourceVersion?: string }>(
    kind: 'pod' | 'cocoonhibernation',
    namespace: string,
    name: string,
    write: () => Promise<T>,
  ): Promise<T> {
    if (!deps.ownWrites) return write();
    return deps.ownWrites.around(kind, namespace, name, callingWorkflowId(), write, (obs) =>
      obs.exists ? obs.resourceVersion : undefined,
    );
  }

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

  /** `setHibernationFinalizer` (documented there), also run first by a status write carrying it. */
  async function setFinalizer(input: FinalizerInput): Promise<HibernationObservation> {
    const gone = (uid?: string): HibernationObservation => ({
      exists: false,
      namespace: input.namespace,
      name: input.name,
      uid,
    });
    const target = { group: GROUP, version: VERSION, namespace: input.namespace, name: input.name };
    const change = (finalizers: string[], podRef: string | undefined) => ({
      finalizers: input.present
        ? [...finalizers, Finalizers.cocoonHibernation]
        : finalizers.filter((f) => f !== Finalizers.cocoonHibernation),
      annotations:
        input.present && podRef
          ? workflowAnnotations(vmWorkflowId(input.namespace, podRef), deps.temporalUi)
          : undefined,
    });
    // Removing the last finalizer of a deleting object deletes it.
    const answer = (updated: CocoonHibernation, uid?: string): HibernationObservation =>
      !input.present &&
      updated.metadata?.deletionTimestamp &&
      (updated.metadata.finalizers ?? []).length === 0
        ? gone(uid)
        : observeHibernation(updated);
    return owned('cocoonhibernation', input.namespace, input.name, async () => {
      const seen = input.seen;
      if (
        seen?.resourceVersion &&
        (seen.finalizers ?? []).includes(Finalizers.cocoonHibernation) !== input.present
      ) {
        const { finalizers, annotations } = change(seen.finalizers ?? [], seen.podRef);
        try {
          const updated = (await custom.patchNamespacedCustomObject(
            {
              ...target,
              plural: PLURAL_COCOONHIBERNATIONS,
              body: { metadata: { resourceVersion: seen.resourceVersion, finalizers, annotations } },
            },
            mergePatch,
          )) as CocoonHibernation;
          return answer(updated);
        } catch (err) {
          const code = statusCodeOf(err);
          if (code === 404) return gone();
          // 422 to an add: the object is being deleted, which the caller's view may not have shown (the
          // read below says so); 409: it changed since that view.
          if (code !== 409 && !(code === 422 && input.present)) throw err;
        }
      }
      for (let attempt = 0; ; attempt++) {
        const cr = await getHibernation(input.namespace, input.name);
        if (!cr) return gone();
        const has = (cr.metadata.finalizers ?? []).includes(Finalizers.cocoonHibernation);
        // An object being deleted cannot gain a finalizer (the apiserver refuses it).
        if (has === input.present || (input.present && cr.metadata.deletionTimestamp))
          return observeHibernation(cr);
        const { finalizers, annotations } = change(cr.metadata.finalizers ?? [], cr.spec?.podRef?.name);
        cr.metadata.finalizers = finalizers;
        if (annotations) cr.metadata.annotations = { ...cr.metadata.annotations, ...annotations };
        try {
          const updated = (await custom.replaceNamespacedCustomObject({
            ...target,
            plural: PLURAL_COCOONHIBERNATIONS,
            body: cr,
          })) as CocoonHibernation;
          return answer({
            ...updated,
            metadata: { ...updated.metadata, uid: updated.metadata?.uid ?? cr.metadata.uid },
          });
        } catch (err) {
          const code = statusCodeOf(err);
          if (code === 404) return gone();
          if (code === 409 && attempt < 5) continue;
          throw err;
        }
      }
    });
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
      // A name no pod can have (the workflow marks its CRs Failed) is not asked for: the answer could be
      // a 400 instead of a 404, or another object's path (a name with a '/').
      if (podNameProblem(input.pod) === undefined) {
        try {
          pod = observePod(await core.readNamespacedPod({ name: input.pod, namespace: input.namespace }));
        } catch (err) {
          if (statusCodeOf(err) !== 404) throw err;
        }
      }
      const items = await listHibernationObjects(input.namespace);
      return {
        pod,
        hibernations: items.filter((cr) => cr.spec?.podRef?.name === input.pod).map(observeHibernation),
      };
    },

    /**
     * Whether CocoonSet `<namespace>/<name>` exists: `live`, `deleting` (deletionTimestamp set) or `gone`
     * (404). The deletion flow asks before it keeps a tag for a set that would restore a VM from it
     * (docs/hibernation.md#deletion-and-tag-gc). Other errors are thrown (retryable unless a 4xx).
     */
    async cocoonSetLiveness(input: {
      namespace: string;
      name: string;
    }): Promise<'live' | 'deleting' | 'gone'> {
      try {
        const cs = (await custom.getNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace: input.namespace,
          plural: PLURAL_COCOONSETS,
          name: input.name,
        })) as { metadata?: { deletionTimestamp?: string } };
        return cs.metadata?.deletionTimestamp ? 'deleting' : 'live';
      } catch (err) {
        if (statusCodeOf(err) === 404) return 'gone';
        throw err;
      }
    },

    /**
     * Every CocoonHibernation in a namespace, trimmed (the deletion flow's holder check,
     * docs/hibernation.md#deletion-and-tag-gc).
     */
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
      return owned('pod', input.namespace, input.pod, async () => {
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
      });
    },

    /**
     * Adds (`present: true`) or removes our finalizer. With `seen` (the object as the caller last saw it),
     * first as one JSON merge patch carrying that resourceVersion (the server refuses it if the object
     * changed since); otherwise, and after such a conflict, with a full Update guarded by the
     * resourceVersion just read, re-reading on conflict. Adding it also writes the workflow-link
     * annotations (src/api/ids.ts); an object being deleted cannot gain a finalizer, so it is returned as
     * read. Returns the object after the write, or exists:false when it is gone.
     */
    setHibernationFinalizer: setFinalizer,

    /**
     * JSON merge patch of the status subresource (no resourceVersion precondition,
     * docs/hibernation.md#status-and-conditions). With `finalizer` (a CR never written before, as the
     * workflow last saw it), our finalizer is added first, as `setHibernationFinalizer` does; a CR gone or
     * being deleted by then gets neither the Event nor the status, and the call fails with NotFound (the
     * workflow re-reads). Throws NotFound when the CR is gone.
     */
    async patchHibernationStatus(input: {
      namespace: string;
      name: string;
      patch: { status: object };
      /** An Event announcing the change, recorded first (as `emitEvent`; a retry counts it once). */
      event?: EventInput;
      finalizer?: FinalizerSeen;
    }): Promise<HibernationObservation> {
      const { namespace, name } = input;
      if (input.finalizer) {
        const added = await setFinalizer({ namespace, name, present: true, seen: input.finalizer });
        // Being deleted without our finalizer, the CR goes once the others' finalizers do: as good as gone.
        if (!added.exists || added.deleting) throw notFound(`cocoonhibernation ${namespace}/${name}`);
      }
      if (input.event) await emit(input.event);
      return owned('cocoonhibernation', input.namespace, input.name, async () => {
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
      });
    },

    /**
     * Records one occurrence of a core/v1 Event, folded (`recordEvent`: one Event per object, type, reason
     * and message within 10 minutes, whose count grows; each `key` counted once however often retried),
     * and observes the phase-duration histogram when this call counted the key.
     */
    async emitEvent(input: EventInput): Promise<void> {
      await emit(input);
    },
  };
}

export type KubeActivities = ReturnType<typeof createKubeActivities>;

/** The workflow id of the activity running now (regular or local), or undefined outside an activity. */
export function callingWorkflowId(): string | undefined {
  try {
    return Context.current().info.workflowExecution?.workflowId;
  } catch {
    return undefined;
  }
}

/** The involved-object reference of a CocoonHibernation event. */
export function hibernationRef(name: string, uid?: string): EventInput['involved'] {
  return { kind: KIND_COCOONHIBERNATION, name, uid, apiVersion: API_VERSION };
}
