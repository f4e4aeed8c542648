/**
 * An in-memory world for VM-workflow tests: pods, CocoonHibernations, Events and registry tags behind the
 * exact activity interfaces the product registers (KubeActivities, RegistryActivities). It plays the
 * watcher too: every change is delivered to the owning VM workflow as the signal the real watcher sends.
 * It records per-VM overlap of registry calls and hibernate-annotation writes (the serialization invariant).
 */

import type { WorkflowClient } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { EventInput, FinalizerInput, KubeActivities } from '../../src/activities/kube.js';
import type { RegistryActivities } from '../../src/activities/registry.js';
import { vmWorkflowId } from '../../src/api/ids.js';
import { Annotations, Finalizers } from '../../src/api/keys.js';
import type { HibernationObservation, PodObservation } from '../../src/api/observe.js';
import type { CocoonHibernation } from '../../src/api/types.js';
import { vmStart } from '../../src/watcher/routes.js';
import {
  hibernationObservedSignal,
  podObservedSignal,
  resyncSignal,
  type SetDesire,
  setDesireSignal,
  type VMWorldObservation,
} from '../../src/workflows/messages.js';
import type { VMStateView } from '../../src/workflows/vm.js';
import { noteSent, type Sent, settled } from './harness.js';

export interface VMWorldEvent {
  name: string;
  type: string;
  reason: string;
  message: string;
  key: string;
}

type Gate = { promise: Promise<void>; release: () => void };
function gate(): Gate {
  let release!: () => void;
  const promise = new Promise<void>((r) => {
    release = r;
  });
  return { promise, release };
}

export class VMWorld {
  pods = new Map<string, PodObservation>();
  crs = new Map<string, HibernationObservation>();
  /** CocoonSets by `<namespace>/<name>` (absent: gone), as `cocoonSetLiveness` answers. */
  sets = new Map<string, 'live' | 'deleting'>();
  tags = new Set<string>();
  events: VMWorldEvent[] = [];
  calls: string[] = [];
  phaseDurations: Array<{ kind: string; result: string }> = [];
  /** The seconds of each phase-duration observation, in workflow time (same order as phaseDurations). */
  phaseSeconds: number[] = [];
  /** Per VM (or pod) number of registry/annotation operations in flight, and the peak seen. */
  inFlight = new Map<string, number>();
  peak = new Map<string, number>();
  /** Each registry/annotation op holds its slot this long, so overlaps are observable. */
  opDelayMs = 0;
  probeError: Error | undefined;
  deleteError: Error | undefined;
  /** VM names whose probe blocks until `releaseProbe(vm)`. */
  private probeGates = new Map<string, Gate>();
  private blocked = new Map<string, Gate>();
  private rv = 100;
  private uidSeq = 0;
  client?: WorkflowClient;
  taskQueue = '';
  /** Runs once inside the next CR status patch, before its (then older) response is returned. */
  duringStatusPatch?: (patched: HibernationObservation) => Promise<void>;
  /**
   * Runs once at the start of the next CR status patch, before the write: a change that lands just
   * before it (its watch event, if any, carries an older resourceVersion than the write's answer).
   */
  beforeStatusPatch?: () => Promise<void>;
  /**
   * Runs inside the pod annotation patch, after the write, before the response (vk acting meanwhile); the
   * response is the pod as the hook left it.
   */
  duringPodPatch?: (patched: PodObservation) => Promise<void>;
  /**
   * Runs once at the start of the next finalizer write (its own or one a status write carries): a change
   * that lands just before it.
   */
  beforeFinalizer?: () => Promise<void>;
  /** Runs once inside the next readVMWorld, after its answer is taken and before it is returned. */
  duringRead?: () => Promise<void>;
  /** Extra fields of the VM workflow's start argument (e.g. historyLimit). */
  startExtra: Record<string, unknown> = {};
  /** CRs (`ns/name/uid`) whose first event was signalled (it carried their pod). */
  private readonly indexed = new Set<string>();
  /** Starts carry the world (as the watcher's once its caches are listed); false: the workflow re-reads. */
  startWorld = true;
  /** Workflow ids this world signalled (terminated when the test ends). */
  started = new Set<string>();
  /** Signals delivered, per workflow id (the barrier of `settled`). */
  readonly sent = new Map<string, Sent>();

  private nextRV(): string {
    this.rv += 1;
    return String(this.rv);
  }

  // ---- world setup (tests) ----

  /** Adds or replaces a pod; `vm` sets vm.cocoonstack.io/name. Signals the VM workflow (as the watcher). */
  async putPod(
    namespace: string,
    name: string,
    fields: Partial<PodObservation> = {},
  ): Promise<PodObservation> {
    const cur = this.pods.get(`${namespace}/${name}`);
    const pod: PodObservation = {
      exists: true,
      namespace,
      name,
      uid: cur?.uid ?? `pod-uid-${name}`,
      annotations: {},
      containerRunning: false,
      ...cur,
      ...fields,
      resourceVersion: this.nextRV(),
    };
    this.pods.set(`${namespace}/${name}`, pod);
    await this.signalPod(pod);
    return pod;
  }

  /** Merges annotations into a pod (null deletes). */
  async annotatePod(
    namespace: string,
    name: string,
    annotations: Record<string, string | null>,
    extra: Partial<PodObservation> = {},
  ) {
    const pod = this.pods.get(`${namespace}/${name}`);
    if (!pod) throw new Error(`no pod ${name}`);
    return this.putPod(namespace, name, { ...extra, annotations: merge(pod.annotations ?? {}, annotations) });
  }

  /**
   * Plays vk-cocoon finishing a hibernate round on a pod, in vk's order: `<vm>:hibernate` pushed, then
   * lifecycle `hibernated` with the VM id cleared and the container stopped, in one pod update.
   */
  async vkHibernated(namespace: string, name: string, vm: string) {
    this.tags.add(`${vm}:hibernate`);
    return this.annotatePod(
      namespace,
      name,
      { [Annotations.lifecycleState]: 'hibernated', [Annotations.vmID]: null },
      { containerRunning: false },
    );
  }

  async deletePod(namespace: string, name: string): Promise<void> {
    this.pods.delete(`${namespace}/${name}`);
    await this.signal(vmWorkflowId(namespace, name), podObservedSignal.name, {
      exists: false,
      namespace,
      name,
      resourceVersion: this.nextRV(),
    });
  }

  /**
   * Adds or replaces a CR (generation bumps when spec changes). `watched: false` leaves the workflow
   * unsignalled: a change whose watch event has not reached it (it can learn it only from an answer).
   */
  async putCR(
    cr: Partial<HibernationObservation> & { namespace: string; name: string },
    { watched = true }: { watched?: boolean } = {},
  ): Promise<HibernationObservation> {
    const cur = this.crs.get(`${cr.namespace}/${cr.name}`);
    const specChanged = !cur || cur.desire !== cr.desire || cur.podRef !== cr.podRef;
    const next: HibernationObservation = {
      exists: true,
      uid: cur?.uid ?? `uid-${cr.name}-${++this.uidSeq}`,
      creationTimestamp:
        cur?.creationTimestamp ?? new Date(Date.UTC(2026, 0, 1, 0, 0, this.uidSeq)).toISOString(),
      finalizers: cur?.finalizers ?? [],
      generation: (cur?.generation ?? 0) + (specChanged && cur ? 1 : 0) || 1,
      ...cur,
      ...cr,
      resourceVersion: this.nextRV(),
    };
    // Like the apiserver: a spec change bumps metadata.generation (unless the test sets another one).
    if (cur && specChanged && (cr.generation === undefined || cr.generation === cur.generation)) {
      next.generation = (cur.generation ?? 1) + 1;
    }
    this.crs.set(`${cr.namespace}/${cr.name}`, next);
    if (watched) await this.signalCR(next);
    return next;
  }

  /** Marks a CR deleting (as the apiserver does for an object with finalizers) or removes it. */
  async deleteCR(namespace: string, name: string, opts: { watched?: boolean } = {}): Promise<void> {
    const cr = this.crs.get(`${namespace}/${name}`);
    if (!cr) return;
    if ((cr.finalizers ?? []).length === 0) {
      this.crs.delete(`${namespace}/${name}`);
      await this.signalCR({
        exists: false,
        namespace,
        name,
        uid: cr.uid,
        podRef: cr.podRef,
        resourceVersion: this.nextRV(),
      });
      return;
    }
    await this.putCR({ ...cr, deleting: true, deletionTimestamp: new Date().toISOString() }, opts);
  }

  /**
   * Plays the pod's CocoonSet workflow asking for its desire (`setDesire`, signal-with-start), with the pod
   * as this world has it.
   */
  async setDesire(
    namespace: string,
    pod: string,
    desire: 'Hibernate' | 'Wake',
    opts: { set?: string; release?: boolean; keepTag?: boolean } = {},
  ): Promise<void> {
    const p = this.pods.get(`${namespace}/${pod}`);
    const payload: SetDesire = {
      set: opts.set ?? 'demo',
      desire,
      generation: 1,
      podUID: p?.uid,
      podResourceVersion: p?.resourceVersion,
      ...(opts.release ? { release: true } : {}),
      ...(opts.keepTag ? { keepTag: true } : {}),
    };
    await this.signal(vmWorkflowId(namespace, pod), setDesireSignal.name, payload);
  }

  /** Asks the VM workflow of `ns/pod` to re-read the world (the `resync` signal, as an operator by hand). */
  async resync(namespace: string, pod: string): Promise<void> {
    await this.signal(vmWorkflowId(namespace, pod), resyncSignal.name, undefined);
  }

  cr(namespace: string, name: string): HibernationObservation | undefined {
    return this.crs.get(`${namespace}/${name}`);
  }

  pod(namespace: string, name: string): PodObservation | undefined {
    return this.pods.get(`${namespace}/${name}`);
  }

  /** Makes the probe of `vm` block until releaseProbe(vm). */
  blockProbe(vm: string): void {
    this.probeGates.set(vm, gate());
    this.blocked.set(vm, gate());
  }

  /** Resolves once a probe of `vm` is actually blocked inside the registry. */
  async probeBlocked(vm: string): Promise<void> {
    await this.blocked.get(vm)?.promise;
  }

  releaseProbe(vm: string): void {
    this.probeGates.get(vm)?.release();
    this.probeGates.delete(vm);
  }

  /**
   * Waits until the VM workflow of pod `ns/pod` has applied every signal this world sent it and has
   * finished acting on them (see `settled` in harness.ts): the barrier before a negative assertion.
   */
  async settled(env: Parameters<typeof settled>[0], namespace: string, pod: string): Promise<VMStateView> {
    const id = vmWorkflowId(namespace, pod);
    return settled<VMStateView>(env, id, this.sent.get(id));
  }

  maxPeak(): number {
    return Math.max(0, ...this.peak.values());
  }

  // ---- the watcher's part ----

  private async signal(workflowId: string, signal: string, payload: unknown): Promise<void> {
    if (!this.client) return;
    // vm/<namespace>/<pod>; a pod name that can never be one (a CR's bad podRef) may hold a '/'.
    const [, namespace, ...rest] = workflowId.split('/');
    const pod = rest.join('/');
    this.started.add(workflowId);
    // The Java time-skipping server's signal-with-start is not atomic (sdk-java#1538): racing a
    // continue-as-new it can answer "Completed workflow"; the real server starts or signals the new run.
    for (let attempt = 0; ; attempt++) {
      try {
        // The watcher's start (src/watcher/routes.ts vmStart), with its search attributes.
        const start = vmStart(namespace!, pod!, this.worldOf(namespace!, pod!));
        await this.client.signalWithStart(start.workflowType, {
          workflowId,
          taskQueue: this.taskQueue,
          args: [{ ...(start.args[0] as object), ...this.startExtra }],
          typedSearchAttributes: start.searchAttributes,
          signal,
          signalArgs: [payload],
        });
        noteSent(
          this.sent,
          workflowId,
          (payload as { resourceVersion?: string } | undefined)?.resourceVersion,
        );
        return;
      } catch (err) {
        // Two concurrent signal-with-starts can also race there ("already started"); the real server
        // signals the running workflow instead.
        const name = (err as Error).name;
        if (
          attempt >= 20 ||
          (name !== 'WorkflowNotFoundError' && name !== 'WorkflowExecutionAlreadyStartedError')
        )
          throw err;
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  }

  /**
   * The world a start carries, as the watcher's caches would hold it (undefined when `startWorld` is
   * false: the workflow then re-reads it first).
   */
  private worldOf(namespace: string, pod: string): VMWorldObservation | undefined {
    if (!this.startWorld) return undefined;
    return {
      pod: this.pods.get(`${namespace}/${pod}`) ?? { exists: false, namespace, name: pod },
      hibernations: [...this.crs.values()].filter(
        (c) => c.exists && c.namespace === namespace && c.podRef === pod,
      ),
    };
  }

  private async signalPod(pod: PodObservation): Promise<void> {
    const targeted = [...this.crs.values()].some(
      (c) => c.namespace === pod.namespace && c.podRef === pod.name,
    );
    if (targeted) await this.signal(vmWorkflowId(pod.namespace, pod.name), podObservedSignal.name, pod);
  }

  private async signalCR(cr: HibernationObservation): Promise<void> {
    const podRef = cr.podRef ?? this.crs.get(`${cr.namespace}/${cr.name}`)?.podRef;
    if (!podRef) return;
    // As the watcher (src/watcher/routes.ts): a CR's first event carries its pod, which the workflow may
    // not have been told of (pod events are routed only while a CR targets the pod).
    const key = `${cr.namespace}/${cr.name}/${cr.uid}`;
    const pod = this.indexed.has(key) ? undefined : this.pods.get(`${cr.namespace}/${podRef}`);
    if (cr.exists) this.indexed.add(key);
    else this.indexed.delete(key);
    const payload = pod ? { ...cr, pod } : cr;
    await this.signal(vmWorkflowId(cr.namespace, podRef), hibernationObservedSignal.name, payload);
  }

  private async exclusive<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const n = (this.inFlight.get(key) ?? 0) + 1;
    this.inFlight.set(key, n);
    this.peak.set(key, Math.max(this.peak.get(key) ?? 0, n));
    try {
      if (this.opDelayMs) await new Promise((r) => setTimeout(r, this.opDelayMs));
      return await fn();
    } finally {
      this.inFlight.set(key, (this.inFlight.get(key) ?? 1) - 1);
    }
  }

  // ---- activities (the product's interfaces) ----

  kubeActivities(): KubeActivities {
    return {
      readVMWorld: async ({ namespace, pod }) => {
        this.calls.push(`readVMWorld ${pod}`);
        const answer = {
          pod: this.pods.get(`${namespace}/${pod}`) ?? { exists: false, namespace, name: pod },
          hibernations: [...this.crs.values()].filter((c) => c.namespace === namespace && c.podRef === pod),
        };
        // A change someone makes while the answer is on its way (its watch event reaches the workflow
        // while the read is still in flight).
        const hook = this.duringRead;
        this.duringRead = undefined;
        if (hook) await hook();
        return answer;
      },
      cocoonSetLiveness: async ({ namespace, name }) => {
        this.calls.push(`cocoonSetLiveness ${name}`);
        return this.sets.get(`${namespace}/${name}`) ?? 'gone';
      },
      listHibernations: async ({ namespace }) => {
        this.calls.push('listHibernations');
        return [...this.crs.values()].filter((c) => c.namespace === namespace);
      },
      patchPodAnnotations: async ({ namespace, pod, annotations }) => {
        const cur = this.pods.get(`${namespace}/${pod}`);
        if (!cur)
          throw ApplicationFailure.create({ type: 'NotFound', message: 'pod not found', nonRetryable: true });
        const vm = cur.annotations?.[Annotations.vmName] ?? pod;
        return this.exclusive(vm, async () => {
          this.calls.push(`patchPod ${pod} ${JSON.stringify(annotations)}`);
          const next = {
            ...cur,
            annotations: merge(cur.annotations ?? {}, annotations),
            resourceVersion: this.nextRV(),
          };
          this.pods.set(`${namespace}/${pod}`, next);
          await this.duringPodPatch?.(next);
          // What the hook changed is in the answer, as when vk's write lands just before ours.
          return this.pods.get(`${namespace}/${pod}`) ?? next;
        });
      },
      setHibernationFinalizer: async (input) => this.setFinalizer(input),
      patchHibernationStatus: async ({ namespace, name, patch, event, finalizer }) => {
        const before = this.beforeStatusPatch;
        this.beforeStatusPatch = undefined;
        if (before) await before();
        if (finalizer) {
          // As the product: the finalizer first; a CR gone or being deleted gets no status.
          const added = await this.setFinalizer({ namespace, name, present: true, seen: finalizer });
          if (!added.exists || added.deleting)
            throw ApplicationFailure.create({
              type: 'NotFound',
              message: 'cr not found',
              nonRetryable: true,
            });
        }
        if (event) this.recordEvent(event);
        const cur = this.crs.get(`${namespace}/${name}`);
        if (!cur)
          throw ApplicationFailure.create({ type: 'NotFound', message: 'cr not found', nonRetryable: true });
        this.calls.push(`status ${name} ${JSON.stringify(patch)}`);
        const status = {
          ...(cur.status ?? {}),
          ...(patch as { status: CocoonHibernation['status'] }).status,
        };
        const next = { ...cur, status, resourceVersion: this.nextRV() };
        this.crs.set(`${namespace}/${name}`, next);
        // A change someone else makes while this response is on its way (its watch event reaches the
        // workflow before the response does, carrying a newer resourceVersion).
        const hook = this.duringStatusPatch;
        this.duringStatusPatch = undefined;
        if (hook) await hook(next);
        return next;
      },
      emitEvent: async (input) => this.recordEvent(input),
    };
  }

  /** The finalizer write (setHibernationFinalizer), also run first by a status write carrying it. */
  private async setFinalizer({ namespace, name, present }: FinalizerInput): Promise<HibernationObservation> {
    const before = this.beforeFinalizer;
    this.beforeFinalizer = undefined;
    if (before) await before();
    this.calls.push(`finalizer ${name} ${present}`);
    const cur = this.crs.get(`${namespace}/${name}`);
    if (!cur) return { exists: false, namespace, name };
    if (present && cur.deleting) return cur;
    const fins = (cur.finalizers ?? []).filter((f) => f !== Finalizers.cocoonHibernation);
    if (present) fins.push(Finalizers.cocoonHibernation);
    if (!present && cur.deleting && fins.length === 0) {
      this.crs.delete(`${namespace}/${name}`);
      return { exists: false, namespace, name, uid: cur.uid };
    }
    const next = { ...cur, finalizers: fins, resourceVersion: this.nextRV() };
    this.crs.set(`${namespace}/${name}`, next);
    return next;
  }

  /** An Event occurrence, counted once per key (as the real writer), with its phase duration. */
  private recordEvent(input: EventInput): void {
    if (this.events.some((e) => e.key === input.key)) return;
    this.events.push({
      name: input.involved.name,
      type: input.type,
      reason: input.reason,
      message: input.message,
      key: input.key,
    });
    if (input.phaseDuration) {
      const { kind, result, seconds } = input.phaseDuration;
      this.phaseDurations.push({ kind, result });
      this.phaseSeconds.push(seconds);
    }
  }

  registryActivities(): RegistryActivities {
    return {
      hasManifest: async ({ vmName, tag }) =>
        this.exclusive(vmName, async () => {
          this.calls.push(`HEAD ${vmName}:${tag}`);
          const g = this.probeGates.get(vmName);
          if (g) {
            this.blocked.get(vmName)?.release();
            await g.promise;
          }
          if (this.probeError)
            throw ApplicationFailure.create({ type: 'RegistryError', message: this.probeError.message });
          return this.tags.has(`${vmName}:${tag}`);
        }),
      deleteManifest: async ({ vmName, tag }) =>
        this.exclusive(vmName, async () => {
          this.calls.push(`DELETE ${vmName}:${tag}`);
          if (this.deleteError)
            throw ApplicationFailure.create({
              type: 'RegistryError',
              message: this.deleteError.message,
              nonRetryable: true,
            });
          this.tags.delete(`${vmName}:${tag}`);
        }),
      snapshotImage: async ({ vmName, tag }) => {
        this.calls.push(`GET ${vmName}:${tag}`);
        return { present: this.tags.has(`${vmName}:${tag}`), image: '' };
      },
    };
  }
}

function merge(base: Record<string, string>, patch: Record<string, string | null>): Record<string, string> {
  const out = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = v;
  }
  return out;
}
