/**
 * The event → signal mapping (docs/architecture.md#the-watcher), pure and synchronous: a {@link Router} runs
 * a list of {@link Route}s over each informer event and passes their candidate signals through one relevance
 * filter. No I/O; the dispatcher delivers what comes out.
 *
 * Relevance: per (workflow, signal, object) the router remembers the last trimmed payload it let through
 * and drops a candidate whose payload is JSON-equal to it, ignoring `resourceVersion`. The payloads are
 * the trimmed observations (src/api/observe.ts), which carry only fields a gate, a builder or a status
 * reads, so churn in anything else is dropped here. This fixes the reference's pod predicate, which lets
 * every pod update through (docs/hibernation.md#watches-and-the-fan-out). The memory is per process: after a
 * restart everything is sent once, which is the resync a fresh workflow needs.
 */
import type { KubernetesObject, V1Pod } from '@kubernetes/client-node';
import type { SearchAttributePair } from '@temporalio/common';
import { cocoonSetWorkflowId, vmWorkflowId } from '../api/ids.js';
import { Annotations, API_VERSION, GROUP, KIND_COCOONSET } from '../api/keys.js';
import { observeHibernation, observePod } from '../api/observe.js';
import type { CocoonHibernation, CocoonSet } from '../api/types.js';
import type { OwnWrites } from '../kube/own-writes.js';
import {
  COCOONSET_WORKFLOW_TYPE,
  hibernationObservedSignal,
  podObservedSignal,
  RUN_MODES,
  VM_WORKFLOW_TYPE,
  type VMWorldObservation,
  vmWorkflowInput,
} from '../workflows/messages.js';
import { identityAttributes } from '../workflows/search-attributes.js';
import {
  type CocoonSetWorkflowStart,
  cocoonSetObservedSignal,
  observeCocoonSet,
  observeOwnedPod,
  ownedPodObservedSignal,
  ownedPodSignal,
} from './cocoonset-signals.js';

/** The resource kinds the watcher informs on. */
export type ResourceKind = 'pod' | 'cocoonhibernation' | 'cocoonset';
export type EventType = 'add' | 'update' | 'delete';

/** One informer event. On `delete`, `obj` is the last known object. */
export interface ObjectEvent {
  kind: ResourceKind;
  type: EventType;
  obj: KubernetesObject;
  old?: KubernetesObject;
}

/** How to start the target workflow if it is not running (signal-with-start). */
export interface WorkflowStart {
  workflowType: string;
  args: unknown[];
  /** The run's identity search attributes, set by the start (src/workflows/search-attributes.ts). */
  searchAttributes: SearchAttributePair[];
}

/** A signal a route wants to send, before the relevance filter. */
export interface Candidate {
  workflowId: string;
  signalName: string;
  payload: unknown;
  /** What the relevance fingerprint is taken from when the payload is a smaller part of it. */
  relevance?: unknown;
  start: WorkflowStart;
  /** `namespace/name` of the object the payload describes (part of the relevance key). */
  objectKey: string;
  /** The object is gone: send, then forget its memory (keeps the memory bounded to live objects). */
  gone?: boolean;
  /** Send even if equal to the last one sent (a workflow that may be fresh must learn of the object). */
  force?: boolean;
  /**
   * Other objects the payload also carries (signal name, object key, relevance): sending it counts as
   * sending each of them, so their next unchanged event is dropped.
   */
  carries?: Array<{ signalName: string; objectKey: string; relevance: unknown }>;
}

/** A signal that passed the filter. `key` identifies its relevance memory (see {@link Router.forget}). */
export interface RoutedSignal {
  workflowId: string;
  signalName: string;
  payload: unknown;
  start: WorkflowStart;
  key: string;
}

/** What routes may read and do besides returning candidates. */
export interface RouteContext {
  /** A cached pod, if the pod informer runs. */
  pod(namespace: string, name: string): V1Pod | undefined;
  /** A cached CocoonHibernation. */
  hibernation(namespace: string, name: string): CocoonHibernation | undefined;
  /**
   * True when the pod and CocoonHibernation caches each hold a complete list (listed at least once), so
   * what they lack does not exist: only then may a start carry the world read from them.
   */
  cachesListed(): boolean;
  /** Drops the memory of what was last sent for one object to one workflow. */
  forget(workflowId: string, signalName: string, objectKey: string): void;
  /** Logs something a route chose not to route. */
  note(msg: string, fields: Record<string, unknown>): void;
}

/** One mapping from events of some kinds to candidate signals. Routes may keep their own indexes. */
export interface Route {
  readonly name: string;
  readonly kinds: readonly ResourceKind[];
  map(ev: ObjectEvent, ctx: RouteContext): Candidate[];
}

/** Relevance memory key of one (workflow, signal, object). */
export function relevanceKey(workflowId: string, signalName: string, objectKey: string): string {
  return `${workflowId}\u0000${signalName}\u0000${objectKey}`;
}

/**
 * Canonical JSON of a payload for the relevance compare: object keys sorted, undefined dropped, Dates as
 * ISO strings, and the top-level `resourceVersion` left out (it changes on every write, relevant or not).
 */
export function relevanceFingerprint(payload: unknown): string {
  const canon = (v: unknown): unknown => {
    if (v instanceof Date) return v.toISOString();
    if (Array.isArray(v)) return v.map(canon);
    if (v && typeof v === 'object') {
      const out: Record<string, unknown> = {};
      for (const k of Object.keys(v).sort()) {
        const x = (v as Record<string, unknown>)[k];
        if (x !== undefined) out[k] = canon(x);
      }
      return out;
    }
    return v;
  };
  const top = canon(payload);
  if (top && typeof top === 'object' && !Array.isArray(top))
    delete (top as Record<string, unknown>).resourceVersion;
  return JSON.stringify(top);
}

/** Router counters. */
export interface RouterStats {
  events: number;
  /** Candidates that passed the filter. */
  routed: number;
  /** Candidates dropped as irrelevant (payload equal to the last one sent). */
  dropped: number;
  /** Candidates dropped as the echo of their own workflow's write (src/kube/own-writes.ts). */
  echoes: number;
  /** Objects the router currently remembers a payload for. */
  remembered: number;
}

/**
 * Runs routes over events and filters their candidates by relevance. `lookups.pod` should read the pod
 * informer's cache; `note` receives what routes decided not to route (for logging).
 */
export class Router {
  private readonly sent = new Map<string, string>();
  private readonly counters = { events: 0, routed: 0, dropped: 0, echoes: 0 };
  private readonly ctx: RouteContext;
  private readonly ownWrites: OwnWrites | undefined;

  /**
   * `lookups` read the informers' caches (absent: nothing cached, so no start carries a world);
   * `ownWrites` is where the activities record their writes, whose echoes are then dropped for the writer.
   */
  constructor(
    private readonly routes: readonly Route[],
    lookups: Partial<Pick<RouteContext, 'pod' | 'hibernation' | 'cachesListed' | 'note'>> & {
      ownWrites?: OwnWrites;
    } = {},
  ) {
    this.ctx = {
      pod: lookups.pod ?? (() => undefined),
      hibernation: lookups.hibernation ?? (() => undefined),
      cachesListed: lookups.cachesListed ?? (() => false),
      forget: (w, s, o) => this.sent.delete(relevanceKey(w, s, o)),
      note: lookups.note ?? (() => {}),
    };
    this.ownWrites = lookups.ownWrites;
  }

  /** Maps one event to the signals to send, in order. */
  route(ev: ObjectEvent): RoutedSignal[] {
    this.counters.events++;
    const out: RoutedSignal[] = [];
    // The event is exactly the answer of a write some workflow made (and keeps): not news to that one. An
    // add is the echo of a create (a CocoonSet's pod).
    const writer =
      ev.type !== 'delete'
        ? this.ownWrites?.take(
            ev.kind,
            ev.obj.metadata?.namespace ?? '',
            ev.obj.metadata?.name ?? '',
            ev.obj.metadata?.resourceVersion,
          )
        : undefined;
    for (const r of this.routes) {
      if (!r.kinds.includes(ev.kind)) continue;
      for (const c of r.map(ev, this.ctx)) {
        const key = relevanceKey(c.workflowId, c.signalName, c.objectKey);
        const fp = relevanceFingerprint(c.relevance ?? c.payload);
        // An echo that carries another object (a CR newly indexed, with its pod: after a restart, the
        // workers may have written the CR before this watcher listed it) still brings that object.
        if (writer === c.workflowId && !c.force && !c.gone && !c.carries?.length) {
          this.sent.set(key, fp);
          this.counters.echoes++;
          continue;
        }
        if (!c.force && !c.gone && this.sent.get(key) === fp) {
          this.counters.dropped++;
          continue;
        }
        if (c.gone) this.sent.delete(key);
        else this.sent.set(key, fp);
        for (const o of c.carries ?? [])
          this.sent.set(
            relevanceKey(c.workflowId, o.signalName, o.objectKey),
            relevanceFingerprint(o.relevance),
          );
        this.counters.routed++;
        out.push({
          workflowId: c.workflowId,
          signalName: c.signalName,
          payload: c.payload,
          start: c.start,
          key,
        });
      }
    }
    return out;
  }

  /**
   * Forgets the payload last sent under `key` (the dispatcher calls this when a delivery finally failed),
   * so the next event or relist for that object sends its state again.
   */
  forget(key: string): void {
    this.sent.delete(key);
  }

  /** Events routed, candidates passed and dropped, and the size of the relevance memory. */
  stats(): RouterStats {
    return { ...this.counters, remembered: this.sent.size };
  }
}

function nsName(obj: KubernetesObject): { namespace: string; name: string } {
  return { namespace: obj.metadata?.namespace ?? '', name: obj.metadata?.name ?? '' };
}

/**
 * Signal-with-start arguments of the VM workflow for pod `<namespace>/<pod>` (VMWorkflowInput), with the
 * world a fresh run starts from when the caller has it.
 */
export function vmStart(namespace: string, pod: string, world?: VMWorldObservation): WorkflowStart {
  return {
    workflowType: VM_WORKFLOW_TYPE,
    args: [vmWorkflowInput(namespace, pod, world)],
    searchAttributes: identityAttributes({
      namespace,
      vmName: world?.pod.annotations?.[Annotations.vmName] ?? '',
      kind: 'VM',
    }),
  };
}

/**
 * Signal-with-start arguments of the CocoonSet workflow (CocoonSetWorkflowStart): a run this version starts
 * runs its Kubernetes I/O as local activities.
 */
export function cocoonSetStart(namespace: string, name: string): WorkflowStart {
  const input: CocoonSetWorkflowStart = { namespace, name, ...RUN_MODES };
  return {
    workflowType: COCOONSET_WORKFLOW_TYPE,
    args: [input],
    searchAttributes: identityAttributes({ namespace, vmName: '', kind: 'CocoonSet' }),
  };
}

/**
 * CocoonHibernations and the pods they target → the VM workflow `vm/<ns>/<spec.podRef.name>`.
 *
 * - CR add/update → `hibernationObserved` with observeHibernation(cr); deletion → `{exists:false,
 *   namespace, name, uid}`. A CR with an empty podRef goes nowhere.
 * - Pod event → `podObserved` with observePod(pod) only while some CR in the pod's namespace targets
 *   that pod name (index ns/pod → CR names, kept from CR events); deletion → `{exists:false, namespace,
 *   name}`.
 * - A CR that newly targets a cached pod carries that pod's observation in its signal (`pod`), so a
 *   running VM workflow learns of its pod with the one signal. When the last CR leaves a pod, the memory
 *   of that pod's observation is dropped.
 * - Every start carries the VM's world from the caches (VMWorkflowInput.world), so a fresh run acts
 *   without re-reading it, once both caches hold a complete list.
 * - A podRef that changes (possible only without the CRD's immutability rule) is handled as the CR
 *   leaving the old pod (`exists:false` to the old workflow) and arriving at the new one.
 */
export class HibernationRoute implements Route {
  readonly name = 'hibernation';
  readonly kinds = ['cocoonhibernation', 'pod'] as const;
  /** `ns/pod` → names of CRs targeting it. */
  private readonly byPod = new Map<string, Set<string>>();
  /** `ns/cr` → the pod name it was indexed under. */
  private readonly targetOf = new Map<string, string>();

  /** Names of the CRs currently targeting pod `<namespace>/<pod>` (for tests and diagnostics). */
  targeting(namespace: string, pod: string): string[] {
    return [...(this.byPod.get(`${namespace}/${pod}`) ?? [])];
  }

  map(ev: ObjectEvent, ctx: RouteContext): Candidate[] {
    return ev.kind === 'pod' ? this.mapPod(ev, ctx) : this.mapHibernation(ev, ctx);
  }

  /**
   * The world a fresh VM workflow for `<namespace>/<pod>` starts from: the cached pod and the cached CRs
   * indexed under it. Undefined until both caches hold a complete list.
   */
  private world(namespace: string, pod: string, ctx: RouteContext): VMWorldObservation | undefined {
    if (!ctx.cachesListed()) return undefined;
    const cached = ctx.pod(namespace, pod);
    const hibernations = [...(this.byPod.get(`${namespace}/${pod}`) ?? [])].flatMap((name) => {
      const cr = ctx.hibernation(namespace, name);
      return cr ? [observeHibernation(cr)] : [];
    });
    return { pod: cached ? observePod(cached) : { exists: false, namespace, name: pod }, hibernations };
  }

  private mapPod(ev: ObjectEvent, ctx: RouteContext): Candidate[] {
    const { namespace, name } = nsName(ev.obj);
    if (!this.byPod.get(`${namespace}/${name}`)?.size) return [];
    const base = {
      workflowId: vmWorkflowId(namespace, name),
      signalName: podObservedSignal.name,
      start: vmStart(namespace, name, this.world(namespace, name, ctx)),
      objectKey: `${namespace}/${name}`,
    };
    if (ev.type === 'delete') return [{ ...base, payload: { exists: false, namespace, name }, gone: true }];
    return [{ ...base, payload: observePod(ev.obj as V1Pod) }];
  }

  private mapHibernation(ev: ObjectEvent, ctx: RouteContext): Candidate[] {
    const cr = ev.obj as CocoonHibernation;
    const { namespace, name } = nsName(cr);
    const crKey = `${namespace}/${name}`;
    const podRef = cr.spec?.podRef?.name ?? '';
    const out: Candidate[] = [];
    const prev = this.targetOf.get(crKey);
    const hib = (pod: string, payload: unknown, gone?: boolean): Candidate => ({
      workflowId: vmWorkflowId(namespace, pod),
      signalName: hibernationObservedSignal.name,
      start: vmStart(namespace, pod, this.world(namespace, pod, ctx)),
      objectKey: crKey,
      payload,
      gone,
    });
    const goneCR = { exists: false, namespace, name, uid: cr.metadata?.uid };

    if (prev !== undefined && (ev.type === 'delete' || prev !== podRef)) {
      this.unindex(namespace, name, prev, ctx);
      out.push(hib(prev, goneCR, true));
    }
    if (ev.type === 'delete') return out;
    if (!podRef) {
      ctx.note('CocoonHibernation has no spec.podRef.name; not routed', { namespace, name });
      return out;
    }
    if (prev === podRef) {
      out.push(hib(podRef, observeHibernation(cr)));
      return out;
    }
    this.index(namespace, name, podRef);
    // Newly targeted: the pod rides along (a running workflow may not have been told of it), and counts
    // as sent, so its next unchanged event is dropped.
    const obs = observeHibernation(cr);
    const pod = ctx.pod(namespace, podRef);
    if (!pod) {
      out.push(hib(podRef, obs));
      return out;
    }
    const podObs = observePod(pod);
    out.push({
      ...hib(podRef, { ...obs, pod: podObs }),
      relevance: obs,
      carries: [
        { signalName: podObservedSignal.name, objectKey: `${namespace}/${podRef}`, relevance: podObs },
      ],
    });
    return out;
  }

  private index(namespace: string, cr: string, pod: string): void {
    const k = `${namespace}/${pod}`;
    const set = this.byPod.get(k) ?? new Set<string>();
    set.add(cr);
    this.byPod.set(k, set);
    this.targetOf.set(`${namespace}/${cr}`, pod);
  }

  private unindex(namespace: string, cr: string, pod: string, ctx: RouteContext): void {
    const k = `${namespace}/${pod}`;
    const set = this.byPod.get(k);
    set?.delete(cr);
    this.targetOf.delete(`${namespace}/${cr}`);
    if (set && set.size === 0) {
      this.byPod.delete(k);
      ctx.forget(vmWorkflowId(namespace, pod), podObservedSignal.name, k);
    }
  }
}

/** The controlling owner reference of a pod if it is a CocoonSet, else undefined. */
export function cocoonSetOwnerOf(pod: KubernetesObject): string | undefined {
  const ref = pod.metadata?.ownerReferences?.find((o) => o.controller);
  if (!ref || ref.kind !== KIND_COCOONSET) return undefined;
  if (ref.apiVersion !== API_VERSION && !ref.apiVersion?.startsWith(`${GROUP}/`)) return undefined;
  return ref.name;
}

/**
 * CocoonSets and the pods they own → the CocoonSet workflow `cocoonset/<ns>/<name>`.
 *
 * - CocoonSet add/update → `cocoonSetObserved` with observeCocoonSet (so only generation changes and a
 *   deletion timestamp appearing pass the filter); deletion → `{exists:false, namespace, name, uid}`.
 * - Pod whose controller owner is a CocoonSet → `ownedPodObserved` when observeOwnedPod changes (create,
 *   phase, Ready, labels, annotations, deletion timestamp), carrying only `ownedPodSignal` (identity and
 *   resourceVersion); deletion → `{exists:false, namespace, name, uid}`.
 */
export class CocoonSetRoute implements Route {
  readonly name = 'cocoonset';
  readonly kinds = ['cocoonset', 'pod'] as const;

  map(ev: ObjectEvent): Candidate[] {
    const { namespace, name } = nsName(ev.obj);
    if (ev.kind === 'cocoonset') {
      const base = {
        workflowId: cocoonSetWorkflowId(namespace, name),
        signalName: cocoonSetObservedSignal.name,
        start: cocoonSetStart(namespace, name),
        objectKey: `${namespace}/${name}`,
      };
      if (ev.type === 'delete') {
        return [
          { ...base, payload: { exists: false, namespace, name, uid: ev.obj.metadata?.uid }, gone: true },
        ];
      }
      return [{ ...base, payload: observeCocoonSet(ev.obj as CocoonSet) }];
    }
    const owner = cocoonSetOwnerOf(ev.obj);
    if (!owner) return [];
    const base = {
      workflowId: cocoonSetWorkflowId(namespace, owner),
      signalName: ownedPodObservedSignal.name,
      start: cocoonSetStart(namespace, owner),
      objectKey: `${namespace}/${name}`,
    };
    if (ev.type === 'delete') {
      return [
        { ...base, payload: { exists: false, namespace, name, uid: ev.obj.metadata?.uid }, gone: true },
      ];
    }
    const obs = observeOwnedPod(ev.obj as V1Pod);
    return [{ ...base, payload: ownedPodSignal(obs), relevance: obs }];
  }
}
