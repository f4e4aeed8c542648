/**
 * An in-memory world for CocoonSet-workflow tests: one CocoonSet, its pods, CocoonHibernations, Events and
 * registry tags behind the exact activity interfaces the product registers (CocoonSetActivities,
 * RegistryActivities). It plays the watcher too (every pod change is delivered to the CocoonSet workflow as
 * the `ownedPodObserved` signal) and, minimally, vk-cocoon: pods it is told to fail come up Failed.
 * Semantics follow §20.17 of spec/cocoonset-core.md: synchronous deletes, AlreadyExists on duplicate
 * creates, NotFound, merge-patch annotations with null deleting a key, a separate status write.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { WorkflowClient } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import type { CocoonSetActivities } from '../../src/activities/cocoonset.js';
import type { RegistryActivities } from '../../src/activities/registry.js';
import { cocoonSetWorkflowId, taskQueues } from '../../src/api/ids.js';
import { Annotations, Finalizers, Labels } from '../../src/api/keys.js';
import type { CocoonHibernation, CocoonSet } from '../../src/api/types.js';
import {
  cocoonSetObservedSignal,
  observeCocoonSet,
  observeOwnedPod,
  ownedPodObservedSignal,
} from '../../src/watcher/cocoonset-signals.js';
import { COCOONSET_WORKFLOW_TYPE } from '../../src/workflows/messages.js';
import { workflowBundle } from './harness.js';

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

export interface RecordedEvent {
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
  readonly events: RecordedEvent[] = [];
  /** Every activity call, as `<op> <target>` strings, in order. */
  readonly calls: string[] = [];
  /** Pod creates, in order (names). */
  readonly creates: string[] = [];
  /** Values of the rebuild-history annotation as written, in order. */
  readonly historyWrites: string[] = [];
  /** Counters of the reads the steady path must not make. */
  lists = 0;
  registryCalls = 0;
  /** When true, a pod delete only marks the pod terminating; `finishDeletes()` removes them. */
  slowDeletes = false;
  /** Pods (by name) that come up `Failed` when created, as vk-cocoon reports a crashed VM. */
  readonly failOnCreate = new Set<string>();
  client?: WorkflowClient;
  taskQueue = '';
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

  pod(name: string): V1Pod | undefined {
    return this.pods.get(name);
  }

  /** Starts the workflow as the watcher does (signal-with-start on a CocoonSet observation). */
  async start(extra: Record<string, unknown> = {}): Promise<void> {
    const cs = this.cs!;
    await this.client!.signalWithStart(COCOONSET_WORKFLOW_TYPE, {
      workflowId: this.workflowId,
      taskQueue: this.taskQueue,
      args: [{ namespace: cs.metadata.namespace, name: cs.metadata.name, ...extra }],
      signal: cocoonSetObservedSignal,
      signalArgs: [observeCocoonSet(cs)],
    });
  }

  /** Replaces a pod (as vk-cocoon or a user would) and signals the workflow. */
  async updatePod(name: string, fn: (p: V1Pod) => void): Promise<void> {
    const p = this.pods.get(name);
    if (!p) throw new Error(`no pod ${name}`);
    fn(p);
    this.storePod(p);
    await this.signalPod(p);
  }

  /** Marks a pod Running + Ready (vk-cocoon's VM came up). */
  async makeReady(name: string): Promise<void> {
    await this.updatePod(name, (p) => {
      p.status = { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] };
    });
  }

  /** The workflow's `state` query. */
  async state(): Promise<Record<string, unknown>> {
    return this.client!.getHandle(this.workflowId).query<Record<string, unknown>>('state');
  }

  private async signalPod(p: V1Pod): Promise<void> {
    await this.client!.getHandle(this.workflowId)
      .signal(ownedPodObservedSignal, observeOwnedPod(p))
      .catch(() => undefined); // the workflow may have completed
  }

  private async signalGone(name: string): Promise<void> {
    await this.client!.getHandle(this.workflowId)
      .signal(ownedPodObservedSignal, { exists: false, namespace: this.namespace, name })
      .catch(() => undefined);
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
        if (!this.cs) return { cs: null, pods: [] };
        const name = this.cs.metadata.name;
        const pods = [...this.pods.values()].filter((p) => p.metadata?.labels?.[Labels.cocoonSet] === name);
        return { cs: clone(this.cs), pods: clone(pods) };
      },
      cocoonSetCreatePod: async ({ pod }) => {
        const name = pod.metadata!.name!;
        this.calls.push(`create ${name}`);
        if (this.pods.has(name)) return 'alreadyExists';
        const p = clone(pod);
        p.status = this.failOnCreate.has(name) ? { phase: 'Failed' } : { phase: 'Pending' };
        this.storePod(p);
        this.creates.push(name);
        await this.signalPod(p);
        return 'ok';
      },
      cocoonSetDeletePod: async ({ pod }) => {
        this.calls.push(`delete ${pod}`);
        const p = this.pods.get(pod);
        if (!p) return 'notFound';
        if (this.slowDeletes) {
          p.metadata!.deletionTimestamp ??= new Date() as unknown as Date;
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
        cs.status = mergePatch(cs.status ?? {}, body.status) as CocoonSet['status'];
        cs.metadata.resourceVersion = this.nextRV();
      },
      cocoonSetListHibernations: async () => {
        this.calls.push('list-hibernations');
        this.lists++;
        return clone(this.crs);
      },
      cocoonSetEmitEvent: async (e) => {
        this.calls.push(`event ${e.reason}`);
        if (this.events.some((x) => x.key === e.key)) return;
        this.events.push({ type: e.type, reason: e.reason, message: e.message, key: e.key });
      },
      cocoonSetCountMetric: async ({ metric }) => {
        this.calls.push(`metric ${metric}`);
      },
    };
  }

  /** The in-memory registry behind the product's registry activity interface. */
  registryActivities(): RegistryActivities {
    return {
      hasManifest: async ({ vmName, tag }) => {
        this.calls.push(`probe ${vmName}:${tag}`);
        this.registryCalls++;
        return this.tags.has(`${vmName}:${tag}`);
      },
      deleteManifest: async ({ vmName, tag }) => {
        this.calls.push(`registry-delete ${vmName}:${tag}`);
        this.registryCalls++;
        this.tags.delete(`${vmName}:${tag}`);
      },
    };
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
    await this.client!.getHandle(this.workflowId)
      .signal(
        cocoonSetObservedSignal,
        this.cs ? observeCocoonSet(this.cs) : { exists: false, namespace: this.namespace, name: this.name },
      )
      .catch(() => undefined);
  }

  /** Removes every terminating pod (vk-cocoon finished the deletes) and signals. */
  async finishDeletes(): Promise<void> {
    for (const [name, p] of [...this.pods]) {
      if (p.metadata?.deletionTimestamp == null) continue;
      this.pods.delete(name);
      await this.signalGone(name);
    }
  }

  /** The finalizer is on the CocoonSet. */
  hasFinalizer(): boolean {
    return (this.cs?.metadata.finalizers ?? []).includes(Finalizers.cocoonSet);
  }
}

let seq = 0;

/**
 * Runs `fn` with `world` wired to a worker pair on a unique task queue: the workflows + CocoonSet
 * activities, and the registry activities on the cocoonSetRegistry queue. Terminates the workflow after.
 */
export async function withCocoonSetWorld<T>(
  env: TestWorkflowEnvironment,
  world: CocoonSetWorld,
  fn: (world: CocoonSetWorld) => Promise<T>,
): Promise<T> {
  const taskQueue = `cs-test-${process.pid}-${++seq}`;
  world.client = env.client.workflow;
  world.taskQueue = taskQueue;
  const main = await Worker.create({
    connection: env.nativeConnection,
    taskQueue,
    workflowBundle: await workflowBundle(),
    activities: world.cocoonSetActivities(),
  });
  const reg = await Worker.create({
    connection: env.nativeConnection,
    taskQueue: taskQueues(taskQueue).cocoonSetRegistry,
    activities: world.registryActivities(),
  });
  let result: T | undefined;
  const id = world.workflowId;
  try {
    await main.runUntil(
      reg.runUntil(async () => {
        try {
          result = await fn(world);
        } catch (err) {
          console.error('world calls:', world.calls.join('\n'), '\nevents:', JSON.stringify(world.events));
          throw err;
        }
      }),
    );
  } finally {
    await env.client.workflow
      .getHandle(id)
      .terminate('test over')
      .catch(() => undefined);
  }
  return result as T;
}
