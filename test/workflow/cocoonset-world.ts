/**
 * An in-memory world for CocoonSet-workflow tests: one CocoonSet, its pods, CocoonHibernations, Events and
 * registry tags behind the exact activity interfaces the product registers (CocoonSetActivities,
 * RegistryActivities). It plays the watcher too (every pod change is delivered to the CocoonSet workflow as
 * the `ownedPodObserved` signal) and, minimally, vk-cocoon: pods it is told to fail come up Failed.
 * Semantics follow the fake client of the reference's tests: synchronous deletes, AlreadyExists on duplicate
 * creates, NotFound, merge-patch annotations with null deleting a key, a separate status write.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { type WorkflowClient, WorkflowNotFoundError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { type CocoonSetActivities, POD_PAGE_SIZE } from '../../src/activities/cocoonset.js';
import { heartbeatWhileRunning } from '../../src/activities/heartbeat.js';
import type { RegistryActivities } from '../../src/activities/registry.js';
import { cocoonSetWorkflowId, taskQueues } from '../../src/api/ids.js';
import { Annotations, Finalizers, Labels } from '../../src/api/keys.js';
import type { CocoonHibernation, CocoonSet } from '../../src/api/types.js';
import type { NamespaceLimits } from '../../src/cocoonset/admission.js';
import { summarizePod } from '../../src/cocoonset/summary.js';
import {
  cocoonSetObservedSignal,
  observeCocoonSet,
  observeOwnedPod,
  ownedPodObservedSignal,
  ownedPodSignal,
} from '../../src/watcher/cocoonset-signals.js';
import { cocoonSetStart } from '../../src/watcher/routes.js';
import type { CocoonSetStateView } from '../../src/workflows/cocoonset.js';
import { CONVERGED_NODE, hibernation, IMAGE, newCocoonSet } from '../support/builders.js';

export { convergedPods } from '../support/builders.js';

import { nodesMatch } from '../support/nodes.js';
import { waitFor } from '../support/wait.js';
import { type Sent, settled, workflowBundle } from './harness.js';

function clone<T>(v: T): T {
  return JSON.parse(JSON.stringify(v)) as T;
}

/** RFC 7386 JSON merge patch (objects merge, null deletes, anything else replaces). */
function mergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return clone(patch);
  const out: Record<string, unknown> =
    target !== null && typeof target === 'object' && !Array.isArray(target)
      ? { ...(target as Record<string, unknown>) }
      : {};
  for (const [k, v] of Object.entries(patch as Record<string, unknown>)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

function notFound(what: string): ApplicationFailure {
  return ApplicationFailure.create({ type: 'NotFound', message: `${what} not found`, nonRetryable: true });
}

/** `lastResult` of the workflow's `state` query. */
export interface WorkflowPassResult {
  requeue: boolean;
  requeueAfterMs: number;
  error?: string;
  delegated?: string;
  /** The number of the pass this result ended. */
  pass: number;
}

export interface SetWorldEvent {
  type: string;
  reason: string;
  message: string;
  key: string;
}

export class CocoonSetWorld {
  cs: CocoonSet | null;
  readonly pods = new Map<string, V1Pod>();
  crs: CocoonHibernation[] = [];
  /** `<vm>:<tag>` present in the registry. */
  readonly tags = new Set<string>();
  /** VM name → the image its `:hibernate` snapshot records (`cocoonstack.snapshot.baseimage`); '' if absent. */
  readonly snapshotImages = new Map<string, string>();
  readonly events: SetWorldEvent[] = [];
  /** Every activity call, as `<op> <target>` strings, in order. */
  readonly calls: string[] = [];
  /** Pod creates, in order (names). */
  readonly creates: string[] = [];
  /** Values of the rebuild-history annotation as written, in order. */
  readonly historyWrites: string[] = [];
  /** The phases the status writes set, in order (writes that leave the phase as it is are not listed). */
  readonly phaseWrites: string[] = [];
  /** Counter increments, in order, with their labels. */
  readonly metrics: { metric: string; labels: Record<string, string> }[] = [];
  /** Pods that exist but the pass's read does not show yet (a lagging informer cache). */
  readonly hidden = new Set<string>();
  /** Counters of the reads the steady path must not make. */
  lists = 0;
  registryCalls = 0;
  /** When true, a pod delete only marks the pod terminating; `finishDeletes()` removes them. */
  slowDeletes = false;
  /** Pods (by name) that come up `Failed` when created, as vk-cocoon reports a crashed VM. */
  readonly failOnCreate = new Set<string>();
  /**
   * Pod creates the apiserver rejects, by pod name: the activity throws what the product's activity throws
   * for a 4xx answer (a non-retryable ApplicationFailure with the apiserver's message).
   */
  readonly rejectCreate = new Map<string, { type: string; message: string }>();
  /** When set, every registry probe fails with this text. */
  probeError?: string;
  /** When set, the CocoonHibernation List throws it. */
  listHibernationsError?: Error;
  /** The labels of each Node, for `cocoonSetAnyNode`; undefined: every selector matches. */
  nodes?: Record<string, string>[];
  /** The namespace's LimitRanges and ResourceQuotas, for `cocoonSetNamespaceLimits`; default: none. */
  limits: NamespaceLimits = { limitRanges: [], quotas: [] };
  /**
   * When set, the pass's first read awaits it before answering (the read runs as a local activity: what the
   * test does meanwhile lands while the workflow task is open).
   */
  beforeRead?: () => Promise<void>;
  /** VM names whose probe blocks until released (see `blockProbe`). */
  private readonly blocked = new Map<string, { enter: () => void; released: Promise<void> }>();
  client?: WorkflowClient;
  taskQueue = '';
  /** Pods per page of the pass's pod read (the product's POD_PAGE_SIZE unless a test lowers it). */
  pageSize = POD_PAGE_SIZE;
  /** Byte size (JSON) of every activity result the pod reads returned, in order. */
  readonly readPayloadBytes: number[] = [];
  private snapshots = 0;
  private readonly snapshotsByToken = new Map<string, V1Pod[]>();
  /** Signals delivered to the workflow (the barrier of `settled`). */
  readonly sent: Sent = { signals: 0 };
  private rv = 100;
  private uidSeq = 0;

  constructor(cs: CocoonSet, pods: V1Pod[] = []) {
    this.cs = clone(cs);
    this.namespace = cs.metadata.namespace ?? '';
    this.name = cs.metadata.name ?? '';
    this.cs.metadata.resourceVersion ??= this.nextRV();
    for (const p of pods) this.storePod(clone(p));
  }

  /** The CocoonSet's namespace and name (kept after it is gone). */
  readonly namespace: string;
  readonly name: string;

  get workflowId(): string {
    return cocoonSetWorkflowId(this.namespace, this.name);
  }

  private nextRV(): string {
    this.rv += 1;
    return String(this.rv);
  }

  private storePod(p: V1Pod): V1Pod {
    p.metadata ??= {};
    p.metadata.uid ??= `pod-uid-${++this.uidSeq}`;
    p.metadata.resourceVersion = this.nextRV();
    this.pods.set(p.metadata.name!, p);
    return p;
  }

  private page(snap: string, offset: number): { pods: V1Pod[]; continue?: string } {
    const all = this.snapshotsByToken.get(snap) ?? [];
    const pods = all.slice(offset, offset + this.pageSize);
    const next = offset + this.pageSize;
    const out = { pods, ...(next < all.length ? { continue: `${snap}@${next}` } : {}) };
    this.readPayloadBytes.push(Buffer.byteLength(JSON.stringify(out)));
    return out;
  }

  pod(name: string): V1Pod | undefined {
    return this.pods.get(name);
  }

  /**
   * Starts the workflow as the watcher does: signal-with-start on a CocoonSet observation, with the
   * watcher's start argument (`cocoonSetStart`: Kubernetes I/O as local activities) plus `extra`.
   */
  async start(extra: Record<string, unknown> = {}): Promise<void> {
    const cs = this.cs!;
    const { workflowType, args, searchAttributes } = cocoonSetStart(
      cs.metadata.namespace ?? '',
      cs.metadata.name ?? '',
    );
    await this.client!.signalWithStart(workflowType, {
      workflowId: this.workflowId,
      taskQueue: this.taskQueue,
      args: [{ ...(args[0] as object), ...extra }],
      typedSearchAttributes: searchAttributes,
      signal: cocoonSetObservedSignal,
      signalArgs: [observeCocoonSet(cs)],
    });
    this.sent.signals++;
  }

  /**
   * Waits until the workflow has applied every signal this world sent it and finished acting on them,
   * with no pass due at the test server's time (see `settled` in harness.ts): the barrier before a
   * negative assertion.
   */
  async settled(env: Parameters<typeof settled>[0]): Promise<CocoonSetStateView> {
    return settled<CocoonSetStateView>(env, this.workflowId, { signals: this.sent.signals });
  }

  /**
   * Signals the workflow as the watcher does. A workflow that has completed (its set gone) gets nothing;
   * any other failure to deliver fails the test, since `settled` would not wait for the lost signal.
   */
  private async send<T>(
    signal: typeof cocoonSetObservedSignal | typeof ownedPodObservedSignal,
    payload: T,
  ): Promise<void> {
    const handle = this.client!.getHandle(this.workflowId);
    for (let attempt = 1; ; attempt++) {
      try {
        await handle.signal(signal as never, payload as never);
        break;
      } catch (err) {
        // Only a workflow that completed because its set is gone may miss a signal.
        if (!(err instanceof WorkflowNotFoundError)) throw err;
        const status = (await handle.describe()).status.name;
        if (status === 'COMPLETED' && this.cs === null) return;
        // The Java time-skipping server answers "not found" to a signal that lands while the run continues
        // as new (its continue-as-new is not atomic, sdk-java#1538; the real server signals the new run).
        // The workflow is running again by now: the same signal goes to the new run, at most twice more.
        if (status === 'RUNNING' && attempt < 3) continue;
        throw new Error(
          `signal ${signal.name} not delivered: workflow ${status}, set ${this.cs ? 'present' : 'gone'}`,
        );
      }
    }
    this.sent.signals++;
  }

  /** Replaces a pod (as vk-cocoon or a user would) and signals the workflow. */
  async updatePod(name: string, fn: (p: V1Pod) => void): Promise<void> {
    const p = this.pods.get(name);
    if (!p) throw new Error(`no pod ${name}`);
    fn(p);
    this.storePod(p);
    await this.signalPod(p);
  }

  /**
   * Plays vk-cocoon finishing a hibernate of pod `name`: its `<vm>:hibernate` pushed, lifecycle `hibernated`
   * reported for set generation `generation`, the VM id cleared, the container stopped (not Ready).
   */
  async vkHibernated(name: string, generation: number): Promise<void> {
    const p = this.pods.get(name);
    if (!p) throw new Error(`no pod ${name}`);
    this.tags.add(`${p.metadata?.annotations?.[Annotations.vmName] ?? ''}:hibernate`);
    await this.updatePod(name, (pod) => {
      const { [Annotations.vmID]: _gone, ...rest } = pod.metadata?.annotations ?? {};
      pod.metadata!.annotations = {
        ...rest,
        [Annotations.lifecycleState]: 'hibernated',
        [Annotations.lifecycleObservedGeneration]: String(generation),
      };
      pod.status = { phase: 'Running' };
    });
  }

  /**
   * Plays a CocoonHibernation `h-<name>` (desire Hibernate) hibernating pod `name` through its VM workflow:
   * the hibernate annotation set, then vk-cocoon's report (`vkHibernated`), the CR listed as Hibernated.
   * Played asks to wake leave that pod alone while the CR is in `crs`.
   */
  async crHibernated(name: string, generation: number): Promise<void> {
    this.crs = [...this.crs, hibernation(name, 'Hibernate', 'Hibernated')];
    await this.updatePod(name, (p) => {
      p.metadata!.annotations = { ...p.metadata!.annotations, [Annotations.hibernate]: 'true' };
    });
    await this.vkHibernated(name, generation);
  }

  /** Plays vk-cocoon bringing pod `name`'s VM up on `node`: VM id `vmID`, a running container, Ready. */
  async vkRunning(name: string, node: string, vmID: string): Promise<void> {
    await this.updatePod(name, (p) => {
      p.spec!.nodeName = node;
      p.metadata!.annotations = { ...p.metadata!.annotations, [Annotations.vmID]: vmID };
      p.status = {
        phase: 'Running',
        conditions: [{ type: 'Ready', status: 'True' }],
        containerStatuses: [
          { name: 'agent', image: '', imageID: '', ready: true, restartCount: 0, state: { running: {} } },
        ],
      };
    });
  }

  /** Marks a pod Running + Ready (vk-cocoon's VM came up). */
  async makeReady(name: string): Promise<void> {
    await this.updatePod(name, (p) => {
      // A Ready pod is bound: the scheduler's part, when the pass did not pin it.
      p.spec = { ...(p.spec ?? { containers: [] }), nodeName: p.spec?.nodeName || CONVERGED_NODE };
      p.status = { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] };
    });
  }

  /** The workflow's `state` query. */
  async state(): Promise<Record<string, unknown>> {
    return this.client!.getHandle(this.workflowId).query<Record<string, unknown>>('state');
  }

  /** Passes the workflow has run so far (its `state` query). */
  async passes(): Promise<number> {
    return (await this.state()).passes as number;
  }

  /** How the last pass ended (its `state` query), or null before the first. */
  async lastResult(): Promise<WorkflowPassResult | null> {
    return ((await this.state()).lastResult ?? null) as WorkflowPassResult | null;
  }

  /**
   * Waits (real time, 30 s) until the workflow has finished a pass numbered above `after` that did not
   * ask for an immediate requeue (a `requeue: true` pass schedules another at once; that one is awaited too).
   */
  async settledAfter(after: number): Promise<void> {
    let last: Record<string, unknown> | undefined;
    await waitFor(
      `a finished pass after pass ${after}`,
      async () => {
        last = await this.state();
        const r = last.lastResult as WorkflowPassResult | null;
        return r !== null && r.pass > after && !r.requeue;
      },
      30_000,
      { describe: () => last },
    );
  }

  private async signalPod(p: V1Pod): Promise<void> {
    await this.send(ownedPodObservedSignal, ownedPodSignal(observeOwnedPod(p)));
  }

  private async signalGone(name: string): Promise<void> {
    await this.send(ownedPodObservedSignal, { exists: false, namespace: this.namespace, name });
  }

  private requireCS(): CocoonSet {
    if (!this.cs) throw notFound('cocoonset');
    return this.cs;
  }

  /** The in-memory implementation of the product's CocoonSet activity interface. */
  cocoonSetActivities(): CocoonSetActivities {
    return {
      cocoonSetReadWorld: async () => {
        this.calls.push('read');
        await this.beforeRead?.();
        if (!this.cs) return { cs: null, pods: [] };
        const name = this.cs.metadata.name;
        const pods = [...this.pods.values()].filter(
          (p) => p.metadata?.labels?.[Labels.cocoonSet] === name && !this.hidden.has(p.metadata?.name ?? ''),
        );
        // A consistent snapshot served page by page, as the apiserver's limit/continue does.
        const token = `snap-${++this.snapshots}`;
        this.snapshotsByToken.set(
          token,
          pods.map((p) => summarizePod(clone(p))),
        );
        return { cs: clone(this.cs), ...this.page(token, 0) };
      },
      cocoonSetGeneration: () => this.readGeneration(),
      cocoonSetListPods: async ({ continue: token }) => {
        this.calls.push('list-pods');
        const [snap, offset] = token.split('@');
        return this.page(snap!, Number(offset));
      },
      cocoonSetCreatePod: async ({ pod }) => {
        const name = pod.metadata!.name!;
        this.calls.push(`create ${name}`);
        const rejected = this.rejectCreate.get(name);
        if (rejected) throw ApplicationFailure.create({ ...rejected, nonRetryable: true });
        if (this.pods.has(name)) return 'alreadyExists';
        const p = clone(pod);
        p.status = this.failOnCreate.has(name) ? { phase: 'Failed' } : { phase: 'Pending' };
        this.storePod(p);
        this.creates.push(name);
        await this.signalPod(p);
        return 'ok';
      },
      cocoonSetDeletePod: async ({ pod, ifSetGeneration }) => {
        if (ifSetGeneration && (await this.readGeneration()) !== ifSetGeneration.generation) return 'stale';
        this.calls.push(`delete ${pod}`);
        const p = this.pods.get(pod);
        if (!p) return 'notFound';
        if (this.slowDeletes) {
          // As the apiserver: deleting a pod already terminating changes nothing (no write, no event).
          if (p.metadata?.deletionTimestamp != null) return 'ok';
          p.metadata!.deletionTimestamp = new Date() as unknown as Date;
          this.storePod(p);
          await this.signalPod(p);
          return 'ok';
        }
        this.pods.delete(pod);
        await this.signalGone(pod);
        return 'ok';
      },
      cocoonSetGetPod: async ({ pod }) => {
        this.calls.push(`get ${pod}`);
        const p = this.pods.get(pod);
        if (!p) throw notFound(`pods "${pod}"`);
        return clone(p);
      },
      cocoonSetPatchPodAnnotations: async ({ pod, annotations }) => {
        this.calls.push(`annotate ${pod} ${JSON.stringify(annotations)}`);
        if (Object.keys(annotations).length === 0) throw new Error('empty patch');
        const p = this.pods.get(pod);
        if (!p) throw notFound(`pods "${pod}"`);
        p.metadata!.annotations = mergePatch(p.metadata!.annotations ?? {}, annotations) as Record<
          string,
          string
        >;
        this.storePod(p);
        await this.signalPod(p);
      },
      cocoonSetPatchAnnotations: async ({ annotations }) => {
        this.calls.push(`annotate-cs ${JSON.stringify(annotations)}`);
        const cs = this.requireCS();
        cs.metadata.annotations = mergePatch(cs.metadata.annotations ?? {}, annotations) as Record<
          string,
          string
        >;
        const h = annotations[Annotations.rebuildHistory];
        if (typeof h === 'string') this.historyWrites.push(h);
        cs.metadata.resourceVersion = this.nextRV();
      },
      cocoonSetSetFinalizer: async ({ finalizer, present }) => {
        this.calls.push(`finalizer ${present}`);
        if (!this.cs) return false;
        const cur = this.cs.metadata.finalizers ?? [];
        this.cs.metadata.finalizers = present
          ? [...cur.filter((f) => f !== finalizer), finalizer]
          : cur.filter((f) => f !== finalizer);
        this.cs.metadata.resourceVersion = this.nextRV();
        if (!present && this.cs.metadata.deletionTimestamp && this.cs.metadata.finalizers.length === 0) {
          this.cs = null;
        }
        return true;
      },
      cocoonSetPatchStatus: async ({ body }) => {
        this.calls.push('status');
        const cs = this.requireCS();
        const phase = (body.status as { phase?: unknown } | undefined)?.phase;
        if (typeof phase === 'string') this.phaseWrites.push(phase);
        cs.status = mergePatch(cs.status ?? {}, body.status) as CocoonSet['status'];
        cs.metadata.resourceVersion = this.nextRV();
      },
      cocoonSetAnyNode: async ({ labelSelector }) => {
        this.calls.push(`any-node ${labelSelector}`);
        return nodesMatch(this.nodes, labelSelector);
      },
      cocoonSetNamespaceLimits: async () => {
        this.calls.push('namespace-limits');
        return clone(this.limits);
      },
      cocoonSetListHibernations: async () => {
        this.calls.push('list-hibernations');
        this.lists++;
        if (this.listHibernationsError) throw this.listHibernationsError;
        return clone(this.crs);
      },
      cocoonSetEmitEvent: async (e) => {
        this.calls.push(`event ${e.reason}`);
        if (this.events.some((x) => x.key === e.key)) return;
        this.events.push({ type: e.type, reason: e.reason, message: e.message, key: e.key });
      },
      cocoonSetCountMetric: async ({ metric, labels }) => {
        this.calls.push(`metric ${metric}`);
        this.metrics.push({ metric, labels: { ...labels } });
      },
      // Plays the pod's VM workflow in the plain cases (the VM workflow's own tests cover the rest): the
      // annotation follows the set's desire, and the watcher reports it; a wake leaves a VM that a
      // CocoonHibernation of `crs` wants hibernated alone, a hibernate one that a CR of `crs` wants awake
      // (as if that CR came first).
      cocoonSetAskVM: async ({ pod, desire }) => {
        this.calls.push(`ask ${pod} ${desire.desire}${desire.keepTag ? ' keepTag' : ''}`);
        const p = this.pods.get(pod);
        if (!p) return;
        const cr = this.crs.find((c) => c.spec.podRef.name === pod);
        if (cr && cr.spec.desire !== desire.desire) return;
        const want = desire.desire === 'Hibernate' ? 'true' : undefined;
        if (p.metadata?.annotations?.[Annotations.hibernate] === want) return;
        p.metadata!.annotations = mergePatch(p.metadata!.annotations ?? {}, {
          [Annotations.hibernate]: want ?? null,
        }) as Record<string, string>;
        this.storePod(p);
        await this.signalPod(p);
      },
    };
  }

  /** The in-memory registry behind the product's registry activity interface. */
  registryActivities(): RegistryActivities {
    return {
      hasManifest: async ({ vmName, tag }) => {
        this.calls.push(`probe ${vmName}:${tag}`);
        this.registryCalls++;
        const block = this.blocked.get(vmName);
        if (block) {
          block.enter();
          await block.released;
        }
        if (this.probeError !== undefined) throw new Error(this.probeError);
        return this.tags.has(`${vmName}:${tag}`);
      },
      deleteManifest: async ({ vmName, tag }) => {
        this.calls.push(`registry-delete ${vmName}:${tag}`);
        this.registryCalls++;
        this.tags.delete(`${vmName}:${tag}`);
      },
      snapshotImage: async ({ vmName, tag }) => {
        this.calls.push(`manifest ${vmName}:${tag}`);
        this.registryCalls++;
        if (this.probeError !== undefined) throw new Error(this.probeError);
        const present = this.tags.has(`${vmName}:${tag}`);
        return { present, image: present ? (this.snapshotImages.get(vmName) ?? '') : '' };
      },
    };
  }

  /**
   * Makes every probe of `vmName` wait until `release()` is called; `entered` resolves when the first
   * such probe has started (the registry call is wedged in flight).
   */
  blockProbe(vmName: string): { entered: Promise<void>; release: () => void } {
    let enter!: () => void;
    let release!: () => void;
    const entered = new Promise<void>((r) => {
      enter = r;
    });
    const released = new Promise<void>((r) => {
      release = r;
    });
    this.blocked.set(vmName, { enter, released });
    return {
      entered,
      release: () => {
        this.blocked.delete(vmName);
        release();
      },
    };
  }

  /**
   * A user edit of the CocoonSet: applies `fn`, bumps `metadata.generation` (the apiserver does for a
   * spec change) and signals the workflow as the watcher does.
   */
  /**
   * Runs once, inside the next generation read (`cocoonSetGeneration`, or the delete's own), before it answers: a test stages an edit that lands
   * between a pass's read of the set and its deletes.
   */
  onGenerationRead?: () => Promise<void>;

  /**
   * The set's generation as the apiserver answers it (null: gone), after the staged `onGenerationRead`:
   * `cocoonSetGeneration`, and the check inside `cocoonSetDeletePod`.
   */
  private async readGeneration(): Promise<number | null> {
    this.calls.push('read generation');
    const hook = this.onGenerationRead;
    this.onGenerationRead = undefined;
    await hook?.();
    return this.cs ? (this.cs.metadata.generation ?? 0) : null;
  }

  async editSpec(fn: (cs: CocoonSet) => void): Promise<void> {
    const cs = this.requireCS();
    fn(cs);
    cs.metadata.generation = (cs.metadata.generation ?? 0) + 1;
    cs.metadata.resourceVersion = this.nextRV();
    await this.send(cocoonSetObservedSignal, observeCocoonSet(cs));
  }

  /** Marks the CocoonSet deleted (the apiserver keeps it while finalizers remain) and signals. */
  async markDeleted(): Promise<void> {
    const cs = this.requireCS();
    if ((cs.metadata.finalizers ?? []).length === 0) {
      this.cs = null;
    } else {
      cs.metadata.deletionTimestamp = new Date() as unknown as CocoonSet['metadata']['deletionTimestamp'];
      cs.metadata.generation = (cs.metadata.generation ?? 0) + 1;
      cs.metadata.resourceVersion = this.nextRV();
    }
    await this.send(
      cocoonSetObservedSignal,
      this.cs ? observeCocoonSet(this.cs) : { exists: false, namespace: this.namespace, name: this.name },
    );
  }

  /** A user deletes pod `name` (it is gone at once, as a pod with no VM is) and the watcher signals it. */
  async deletePodByHand(name: string): Promise<void> {
    this.pods.delete(name);
    await this.signalGone(name);
  }

  /**
   * Removes every terminating pod (vk-cocoon finished the deletes) and signals; with `unseen`, no signal
   * (the pods went while no watcher ran, e.g. the operator restarting).
   */
  async finishDeletes(opts: { unseen?: boolean } = {}): Promise<void> {
    for (const [name, p] of [...this.pods]) {
      if (p.metadata?.deletionTimestamp == null) continue;
      this.pods.delete(name);
      if (!opts.unseen) await this.signalGone(name);
    }
  }

  /** The finalizer is on the CocoonSet. */
  hasFinalizer(): boolean {
    return (this.cs?.metadata.finalizers ?? []).includes(Finalizers.cocoonSet);
  }
}

let seq = 0;

/** The world that owns `namespace` (each world of a multi-world run has its own namespace). */
function byNamespace(worlds: readonly CocoonSetWorld[], namespace: string | undefined): CocoonSetWorld {
  const w = worlds.find((x) => x.namespace === namespace);
  if (!w) throw new Error(`no world for namespace ${namespace}`);
  return w;
}

/** The world whose VM names (`vk-<namespace>-…`) `vmName` belongs to: the longest matching prefix. */
function byVMName(worlds: readonly CocoonSetWorld[], vmName: string): CocoonSetWorld {
  const matches = worlds.filter((w) => vmName.startsWith(`vk-${w.namespace}-`));
  if (matches.length === 0) throw new Error(`no world for VM ${vmName}`);
  return matches.sort((a, b) => b.namespace.length - a.namespace.length)[0]!;
}

/**
 * The activity objects of several worlds behind one worker pair: every CocoonSet activity goes to the
 * world of its `namespace`, every registry activity to the world of its VM name (so the worlds must use
 * distinct namespaces). A metric goes to the world its `namespace` label names, else the first.
 */
function routed(worlds: readonly CocoonSetWorld[]): {
  kube: CocoonSetActivities;
  registry: RegistryActivities;
} {
  const kubes = worlds.map((w) => w.cocoonSetActivities());
  const regs = worlds.map((w) => w.registryActivities());
  const kubeOf = (ns: string | undefined) => kubes[worlds.indexOf(byNamespace(worlds, ns))]!;
  const regOf = (vm: string) => regs[worlds.indexOf(byVMName(worlds, vm))]!;
  const kube = Object.fromEntries(
    Object.keys(kubes[0]!).map((op) => [
      op,
      (input: { namespace?: string; labels?: Record<string, string> }) => {
        const k =
          op === 'cocoonSetCountMetric'
            ? (kubes.find((_, i) => worlds[i]!.namespace === input.labels?.namespace) ?? kubes[0]!)
            : kubeOf(input.namespace);
        return (k[op as keyof CocoonSetActivities] as (i: unknown) => Promise<unknown>)(input);
      },
    ]),
  ) as unknown as CocoonSetActivities;
  const registry: RegistryActivities = {
    hasManifest: (input) => regOf(input.vmName).hasManifest(input),
    deleteManifest: (input) => regOf(input.vmName).deleteManifest(input),
    snapshotImage: (input) => regOf(input.vmName).snapshotImage(input),
  };
  return { kube, registry };
}

/**
 * Runs `fn` with `world` wired to a worker pair on a unique task queue: the workflows + CocoonSet
 * activities, and the registry activities on the cocoonSetRegistry queue. Terminates the workflow after.
 */
export async function withCocoonSetWorld<T>(
  env: TestWorkflowEnvironment,
  world: CocoonSetWorld,
  fn: (world: CocoonSetWorld) => Promise<T>,
): Promise<T> {
  return withCocoonSetWorlds(env, [world], () => fn(world));
}

/**
 * Runs `fn` with several worlds (distinct namespaces) served by ONE worker pair on a unique task queue,
 * as one operator process serves every CocoonSet: the workflows + CocoonSet activities, and the registry
 * activities on the cocoonSetRegistry queue with `registrySlots` activity slots (the
 * COCOONSET_CONCURRENCY knob; default 4). Terminates every world's workflow after.
 */
export async function withCocoonSetWorlds<T>(
  env: TestWorkflowEnvironment,
  worlds: readonly CocoonSetWorld[],
  fn: (worlds: readonly CocoonSetWorld[]) => Promise<T>,
  opts: { registrySlots?: number } = {},
): Promise<T> {
  const taskQueue = `cs-test-${process.pid}-${++seq}`;
  for (const w of worlds) {
    w.client = env.client.workflow;
    w.taskQueue = taskQueue;
  }
  const { kube, registry } =
    worlds.length === 1
      ? { kube: worlds[0]!.cocoonSetActivities(), registry: worlds[0]!.registryActivities() }
      : routed(worlds);
  const main = await Worker.create({
    connection: env.nativeConnection,
    taskQueue,
    workflowBundle: await workflowBundle(),
    interceptors: { activity: [heartbeatWhileRunning] },
    activities: kube,
  });
  const reg = await Worker.create({
    connection: env.nativeConnection,
    taskQueue: taskQueues(taskQueue).cocoonSetRegistry,
    activities: registry,
    maxConcurrentActivityTaskExecutions: opts.registrySlots ?? 4,
    interceptors: { activity: [heartbeatWhileRunning] },
  });
  let result: T | undefined;
  try {
    await main.runUntil(
      reg.runUntil(async () => {
        try {
          result = await fn(worlds);
        } catch (err) {
          for (const w of worlds) {
            console.error(
              `world ${w.namespace}/${w.name} calls:`,
              w.calls.join('\n'),
              '\nevents:',
              JSON.stringify(w.events),
            );
          }
          throw err;
        }
      }),
    );
  } finally {
    for (const w of worlds) {
      await env.client.workflow
        .getHandle(w.workflowId)
        .terminate('test over')
        .catch(() => undefined);
    }
  }
  return result as T;
}

/** The main VM of the `demo` set in namespace `ns`. */
export const MAIN_VM = 'vk-ns-demo-0';

/** demo: main + 2 sub-agents + toolbox `tb`, generation 1. */
export function demoSet(...mods: ((cs: CocoonSet) => void)[]): CocoonSet {
  return newCocoonSet(
    'demo',
    (cs) => {
      cs.metadata.generation = 1;
      cs.spec.agent.replicas = 2;
      cs.spec.toolboxes = [{ name: 'tb', image: IMAGE }];
    },
    ...mods,
  );
}
