/**
 * Helpers of the CocoonHibernation e2e tests (test/e2e/hibernation.test.ts; the CocoonSet e2e tests
 * reuse them) on the real local stack: deadline-bounded polling, a namespace-wide watch recorder (so
 * phases that last milliseconds are not missed), the pod shape the vk-cocoon simulator accepts, CR and Event access, a registry HEAD, and a
 * "the VM workflow has digested a resync" barrier read from the workflow's Temporal history.
 */
import type { CoreV1Event, KubeConfig, V1Pod } from '@kubernetes/client-node';
import { Watch } from '@kubernetes/client-node';
import type { Client } from '@temporalio/client';
import {
  Annotations,
  CONDITION_PROGRESSING,
  EVENT_SOURCE,
  GROUP,
  KIND_COCOONHIBERNATION,
  PLURAL_COCOONHIBERNATIONS,
  PLURAL_COCOONSETS,
  VERSION,
} from '../../src/api/keys.js';
import { containerRunning, lifecycleOf, podReady, restoreFromHibernate, vmIDOf } from '../../src/api/pod.js';
import type { CocoonHibernation, CocoonSet, HibernationDesire } from '../../src/api/types.js';
import { type KubeClients, mergePatch, statusCodeOf } from '../../src/kube/client.js';
import { resyncSignal } from '../../src/workflows/messages.js';
import { waitFor } from '../support/wait.js';
import { MANIFEST_ACCEPT } from '../vksim/oci.js';

/** Image annotation of the test pods (run mode: the simulator boots it without a registry lookup). */

/** One version of a CocoonHibernation as the watch delivered it. */
export interface CRSnapshot {
  at: number;
  type: string;
  name: string;
  resourceVersion: string;
  generation: number;
  desire: string;
  phase: string;
  message: string;
  finalizers: string[];
  deleting: boolean;
  /** Every status condition (Ready and this operator's own), without their timestamps. */
  conditions: { type: string; status: string; reason: string; message: string }[];
}

/** One version of a pod as the watch delivered it (the fields these tests reason about). */
export interface PodSnapshot {
  at: number;
  type: string;
  name: string;
  uid: string;
  resourceVersion: string;
  hibernate: string | undefined;
  lifecycle: string;
  vmID: string;
  running: boolean;
  ready: boolean;
  phase: string;
  deleting: boolean;
  restore: boolean;
  /** `vm.cocoonstack.io/keep-snapshot-on-delete` is "true" (a seat release marks it before the delete). */
  keepSnapshot: boolean;
}

/** One version of a CocoonSet as the watch delivered it. */
export interface CocoonSetSnapshot {
  at: number;
  type: string;
  name: string;
  uid: string;
  resourceVersion: string;
  generation: number;
  observedGeneration: number;
  phase: string;
  finalizers: string[];
  deleting: boolean;
  annotations: Record<string, string>;
  /** The `Progressing` condition's status, reason and message ('' when absent). */
  progressing: { status: string; reason: string; message: string };
}

/**
 * Records every version of every CocoonHibernation and pod in one namespace (two watches), and with
 * `cocoonSets: true` of every CocoonSet too, with the local receive time. A watch that ends is restarted
 * from the last resourceVersion seen.
 */
export class NamespaceRecorder {
  readonly crs: CRSnapshot[] = [];
  readonly pods: PodSnapshot[] = [];
  readonly cocoonSets: CocoonSetSnapshot[] = [];
  private readonly aborts = new Map<string, AbortController>();
  private stopped = false;

  private constructor(private readonly kc: KubeConfig) {}

  /** Starts the watches; resolves once they are established. */
  static async start(
    kc: KubeConfig,
    namespace: string,
    opts: { cocoonSets?: boolean } = {},
  ): Promise<NamespaceRecorder> {
    const r = new NamespaceRecorder(kc);
    await Promise.all([
      r.watch(`/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${PLURAL_COCOONHIBERNATIONS}`, (type, o) =>
        r.crs.push(crSnapshot(type, o as CocoonHibernation)),
      ),
      r.watch(`/api/v1/namespaces/${namespace}/pods`, (type, o) =>
        r.pods.push(podSnapshot(type, o as V1Pod)),
      ),
      ...(opts.cocoonSets
        ? [
            r.watch(`/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${PLURAL_COCOONSETS}`, (type, o) =>
              r.cocoonSets.push(cocoonSetSnapshot(type, o as CocoonSet)),
            ),
          ]
        : []),
    ]);
    return r;
  }

  private async watch(
    path: string,
    onEvent: (type: string, obj: unknown) => void,
    rv?: string,
  ): Promise<void> {
    let last = rv;
    const ac = await new Watch(this.kc).watch(
      path,
      last ? { resourceVersion: last, allowWatchBookmarks: true } : { allowWatchBookmarks: true },
      (type, obj: { metadata?: { resourceVersion?: string } }) => {
        last = obj?.metadata?.resourceVersion ?? last;
        if (type !== 'BOOKMARK') onEvent(type, obj);
      },
      () => {
        if (!this.stopped) setTimeout(() => void this.watch(path, onEvent, last).catch(() => undefined), 200);
      },
    );
    this.aborts.set(path, ac);
  }

  /** Phases of CR `name` in watch order, consecutive repeats folded. */
  phases(name: string): string[] {
    const out: string[] = [];
    for (const s of this.crs) {
      if (s.name !== name || s.type === 'DELETED') continue;
      if (out[out.length - 1] !== s.phase) out.push(s.phase);
    }
    return out;
  }

  /** Versions of CR `name`, in watch order. */
  crHistory(name: string): CRSnapshot[] {
    return this.crs.filter((s) => s.name === name);
  }

  /** Versions of pod `name`, in watch order. */
  podHistory(name: string): PodSnapshot[] {
    return this.pods.filter((s) => s.name === name);
  }

  /** Versions of CocoonSet `name`, in watch order (needs `cocoonSets: true`). */
  cocoonSetHistory(name: string): CocoonSetSnapshot[] {
    return this.cocoonSets.filter((s) => s.name === name);
  }

  /**
   * Resolves once the watch has delivered this version of `obj` (same name and resourceVersion), so
   * the histories above include it. A read from the API (`waitPhase`, `get`) can run ahead of the watch
   * by a few milliseconds; call this before asserting on a history up to what was read.
   * Throws after `timeoutMs` (default 30 s).
   */
  waitSeen(
    kind: 'cocoonhibernation' | 'pod' | 'cocoonset',
    obj: { metadata?: { name?: string; resourceVersion?: string } },
    timeoutMs = 30_000,
  ): Promise<true> {
    const name = obj.metadata?.name ?? '';
    const rv = obj.metadata?.resourceVersion ?? '';
    const list: { name: string; resourceVersion: string }[] =
      kind === 'cocoonhibernation' ? this.crs : kind === 'pod' ? this.pods : this.cocoonSets;
    return waitFor(
      `the watch delivered ${kind} ${name} at resourceVersion ${rv}`,
      () => list.some((s) => s.name === name && s.resourceVersion === rv) || undefined,
      timeoutMs,
    );
  }

  stop(): void {
    this.stopped = true;
    for (const ac of this.aborts.values()) ac.abort();
  }
}

function crSnapshot(type: string, cr: CocoonHibernation): CRSnapshot {
  return {
    at: Date.now(),
    type,
    name: cr.metadata?.name ?? '',
    resourceVersion: cr.metadata?.resourceVersion ?? '',
    generation: cr.metadata?.generation ?? 0,
    desire: cr.spec?.desire ?? '',
    phase: cr.status?.phase ?? '',
    message: readyOf(cr)?.message ?? '',
    finalizers: cr.metadata?.finalizers ?? [],
    deleting: cr.metadata?.deletionTimestamp != null,
    conditions: (cr.status?.conditions ?? []).map((c) => ({
      type: c.type,
      status: c.status,
      reason: c.reason ?? '',
      message: c.message ?? '',
    })),
  };
}

function podSnapshot(type: string, pod: V1Pod): PodSnapshot {
  return {
    at: Date.now(),
    type,
    name: pod.metadata?.name ?? '',
    uid: pod.metadata?.uid ?? '',
    resourceVersion: pod.metadata?.resourceVersion ?? '',
    hibernate: pod.metadata?.annotations?.[Annotations.hibernate],
    lifecycle: lifecycleOf(pod).state,
    vmID: vmIDOf(pod),
    running: containerRunning(pod),
    ready: podReady(pod),
    phase: pod.status?.phase ?? '',
    deleting: pod.metadata?.deletionTimestamp != null,
    restore: restoreFromHibernate(pod),
    keepSnapshot: pod.metadata?.annotations?.[Annotations.keepSnapshotOnDelete] === 'true',
  };
}

function cocoonSetSnapshot(type: string, cs: CocoonSet): CocoonSetSnapshot {
  const progressing = cs.status?.conditions?.find((c) => c.type === CONDITION_PROGRESSING);
  return {
    at: Date.now(),
    type,
    name: cs.metadata?.name ?? '',
    uid: cs.metadata?.uid ?? '',
    resourceVersion: cs.metadata?.resourceVersion ?? '',
    generation: cs.metadata?.generation ?? 0,
    observedGeneration: cs.status?.observedGeneration ?? 0,
    phase: cs.status?.phase ?? '',
    finalizers: cs.metadata?.finalizers ?? [],
    deleting: cs.metadata?.deletionTimestamp != null,
    annotations: { ...(cs.metadata?.annotations ?? {}) },
    progressing: {
      status: progressing?.status ?? '',
      reason: progressing?.reason ?? '',
      message: progressing?.message ?? '',
    },
  };
}

/** The Ready condition of a CR, if any. */
export function readyOf(cr: CocoonHibernation | undefined) {
  return cr?.status?.conditions?.find((c) => c.type === 'Ready');
}

/** CocoonHibernation access for one namespace through the typed clients. */
export class Hibernations {
  constructor(
    private readonly kube: KubeClients,
    readonly namespace: string,
  ) {}

  private base() {
    return { group: GROUP, version: VERSION, namespace: this.namespace, plural: PLURAL_COCOONHIBERNATIONS };
  }

  async create(name: string, pod: string, desire: HibernationDesire): Promise<CocoonHibernation> {
    const body: CocoonHibernation = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: KIND_COCOONHIBERNATION,
      metadata: { name, namespace: this.namespace },
      spec: { podRef: { name: pod }, desire },
    };
    return (await this.kube.custom.createNamespacedCustomObject({
      ...this.base(),
      body,
    })) as CocoonHibernation;
  }

  /** The CR, or undefined when it does not exist. */
  async get(name: string): Promise<CocoonHibernation | undefined> {
    try {
      return (await this.kube.custom.getNamespacedCustomObject({
        ...this.base(),
        name,
      })) as CocoonHibernation;
    } catch (err) {
      if (statusCodeOf(err) === 404) return undefined;
      throw err;
    }
  }

  async setDesire(name: string, desire: HibernationDesire): Promise<CocoonHibernation> {
    return (await this.kube.custom.patchNamespacedCustomObject(
      { ...this.base(), name, body: { spec: { desire } } },
      mergePatch,
    )) as CocoonHibernation;
  }

  async delete(name: string): Promise<void> {
    await this.kube.custom.deleteNamespacedCustomObject({ ...this.base(), name });
  }

  /** Removes every finalizer and deletes the CR (teardown, when no operator runs any more). */
  async forceDelete(name: string): Promise<void> {
    await this.kube.custom
      .patchNamespacedCustomObject(
        { ...this.base(), name, body: { metadata: { finalizers: null } } },
        mergePatch,
      )
      .catch(() => undefined);
    await this.delete(name).catch(() => undefined);
  }

  async list(): Promise<CocoonHibernation[]> {
    return (
      (await this.kube.custom.listNamespacedCustomObject(this.base())) as { items: CocoonHibernation[] }
    ).items;
  }

  /** Waits until CR `name` reports `phase`; returns it. */
  waitPhase(name: string, phase: string, timeoutMs: number): Promise<CocoonHibernation> {
    let last: CocoonHibernation | undefined;
    return waitFor(
      `cocoonhibernation ${this.namespace}/${name} in phase ${phase}`,
      async () => {
        last = await this.get(name);
        return last?.status?.phase === phase ? last : undefined;
      },
      timeoutMs,
      { describe: () => last?.status },
    );
  }

  /** Waits until CR `name` is gone from the API (its finalizer removed). */
  waitGone(name: string, timeoutMs: number): Promise<true> {
    let last: CocoonHibernation | undefined;
    return waitFor(
      `cocoonhibernation ${this.namespace}/${name} gone`,
      async () => {
        last = await this.get(name);
        return last === undefined;
      },
      timeoutMs,
      { describe: () => ({ finalizers: last?.metadata.finalizers, status: last?.status }) },
    );
  }
}

/**
 * The Events the operator (source `cocoon-operator`) recorded on CocoonHibernation `name` (or on an
 * object of another `kind`, e.g. a CocoonSet), optionally of one reason. vk-cocoon records same-named
 * reasons (e.g. `Hibernated`) on the pod, hence the kind filter.
 */
export async function operatorEvents(
  kube: KubeClients,
  namespace: string,
  name: string,
  reason?: string,
  kind: string = KIND_COCOONHIBERNATION,
): Promise<CoreV1Event[]> {
  const list = await kube.core.listNamespacedEvent({
    namespace,
    fieldSelector: `involvedObject.name=${name},involvedObject.kind=${kind}`,
  });
  return list.items.filter(
    (e) => e.source?.component === EVENT_SOURCE && (reason === undefined || e.reason === reason),
  );
}

/** How many times an Event reason was recorded: the sum of the `count` fields (1 when unset). */
export function occurrences(events: CoreV1Event[]): number {
  return events.reduce((n, e) => n + (e.count ?? 1), 0);
}

/** HTTP status of `HEAD /v2/<repo>/manifests/<tag>` on a plain-HTTP registry `host:port`. */
export async function headTag(registry: string, repo: string, tag: string): Promise<number> {
  const res = await fetch(`http://${registry}/v2/${repo}/manifests/${tag}`, {
    method: 'HEAD',
    headers: { accept: MANIFEST_ACCEPT },
    signal: AbortSignal.timeout(10_000),
  });
  return res.status;
}

/** Deletes `<repo>:<tag>` (by digest, as distribution requires) if present. Teardown only. */
export async function dropTag(registry: string, repo: string, tag: string): Promise<void> {
  const head = await fetch(`http://${registry}/v2/${repo}/manifests/${tag}`, {
    method: 'HEAD',
    headers: { accept: MANIFEST_ACCEPT },
  });
  const digest = head.headers.get('docker-content-digest');
  if (head.status !== 200 || !digest) return;
  await fetch(`http://${registry}/v2/${repo}/manifests/${digest}`, { method: 'DELETE' });
}

/**
 * Barrier: signals `resync` to VM workflow `workflowId` and waits until the workflow has re-read the world
 * after that signal (its `state` query counts one more completed re-read, `reads`) and is idle again: not
 * busy, no timer-driven round scheduled (`nextWakeAt` null: a VM whose CRs are all steady
 * Hibernated/Active waits for signals only), and no pending activity or workflow task. Everything the
 * workflow would do on a full re-pass has then been done, so counting Events after it checks for
 * duplicates without a fixed sleep. Throws after `timeoutMs` (also when the workflow keeps a timer, e.g. a
 * stale retry).
 */
export async function settle(client: Client, workflowId: string, timeoutMs = 30_000): Promise<void> {
  const handle = client.workflow.getHandle(workflowId);
  const state = () => handle.query<{ reads: number; busy: boolean; nextWakeAt: string | null }>('state');
  const before = (await state()).reads;
  await handle.signal(resyncSignal);
  await waitFor(
    `workflow ${workflowId} idle after a resync`,
    async () => {
      const q = await state();
      if (q.reads <= before || q.busy || q.nextWakeAt !== null) return false;
      const d = await handle.describe();
      return (d.raw.pendingActivities?.length ?? 0) === 0 && !d.raw.pendingWorkflowTask;
    },
    timeoutMs,
    { intervalMs: 250 },
  );
}
