/**
 * The vk-cocoon simulator (docs/development.md#simulator, docs/wire-contract.md#vk-cocoon): registers a
 * virtual Node, binds matching pods itself (no scheduler in the test cluster), watches the pods on its node
 * and drives a level-triggered per-pod state machine that mirrors vk-cocoon's CreatePod, hibernate, wake,
 * DeletePod and VM-crash eviction, writing the same annotations, pod status and events and pushing
 * real OCI artifacts to the registry.
 *
 * Choices worth knowing (see docs/development.md#simulator):
 * - Status is written with uid-guarded merge patches to `/status` (the mode vk-cocoon uses on kind); the
 *   framework-faithful full-object status mode is not implemented.
 * - DeletePod snapshot failure: the newest behaviour — the error is returned, the VM is kept,
 *   the pod stays Terminating and the delete is retried.
 * - Provider errors retry with 5 ms doubling backoff capped at `backoffCapMs` (default 2 s, the framework's
 *   cap is 1000 s) and without the framework's 20-retry limit.
 * - Level-triggered: a pod created with `hibernate=true` is hibernated right after bring-up (slightly
 *   more eager than vk-cocoon).
 * - All state (VMs, local snapshots, intents) is in memory; a restarted simulator re-seeds intents from
 *   pod annotations but has no VMs, so pods that had one are brought up again.
 */
import { randomBytes } from 'node:crypto';
import type {
  CoreV1Api,
  KubeConfig,
  V1Node,
  V1Pod,
  V1PodCondition,
  V1PodStatus,
} from '@kubernetes/client-node';
import {
  AGENT_CONTAINER_NAME,
  Annotations,
  Labels,
  type LifecycleState,
  LifecycleStates,
  SnapshotArtifact,
  VK_DEFAULT_NODE_NAME,
  VK_EVENT_SOURCE,
  VK_PROVIDER_TAINT,
  VkEventReasons,
  VkStatusReasons,
} from '../../src/api/keys.js';
import {
  cocoonSetGenerationOf,
  hibernateRequested,
  restoreFromHibernate,
  vmNameOf,
} from '../../src/api/pod.js';
import {
  type KubeClients,
  makeKubeClients,
  mergePatch,
  statusCodeOf,
  strategicMergePatch,
} from '../../src/kube/client.js';
import { Informer, type InformerLog } from '../../src/watcher/informer.js';
import { podSource } from '../../src/watcher/kube-source.js';
import {
  crashTargets,
  FaultBook,
  type FaultPoint,
  type FaultRule,
  type FaultRuleInput,
  normaliseFaultRule,
} from './faults.js';
import { OciClient } from './oci.js';
import {
  cpuClassRejection,
  DEFAULT_BACKOFF_CAP_MS,
  EVENT_MESSAGE_MAX_BYTES,
  type Intent,
  judgeIntent,
  LIFECYCLE_MESSAGE_MAX_BYTES,
  operatorFingerprint,
  parseImageRef,
  podFitsNode,
  podRunningForDeletion,
  providerBackoffMs,
  roleForPod,
  seedIntent,
  shouldSnapshotVM,
  toleratesTaint,
  truncateBytes,
} from './rules.js';

/** Lifecycle / runtime annotation patch attempts and spacing (docs/wire-contract.md#on-pods). */
const PATCH_ATTEMPTS = 3;
const PATCH_RETRY_MS = 500;
/** Eviction delete attempts and the wait between them. */
const EVICT_ATTEMPTS = 2;
const EVICT_RETRY_MS = 200;
/** Node heartbeat (Ready condition) period; there is no node-lifecycle controller, so this is cosmetic. */
const NODE_HEARTBEAT_MS = 30_000;
/** A drifted pod status is rewritten at most this often (vk's status reconciler runs every 30 s). */
const STATUS_DRIFT_REWRITE_MS = 3_000;
/**
 * Bound of every Kubernetes API call: a call the apiserver never answers (it was stopped mid-request) fails
 * and the pod's work is retried, instead of holding that pod's serialized work forever.
 */
const KUBE_REQUEST_TIMEOUT_MS = 15_000;
/** A pod watch with no event and no bookmark this long is restarted (the apiserver bookmarks ~1/min). */
const WATCH_STALL_MS = 90_000;
/** An informer not synced (list or watch failing) for this long makes /healthz fail. */
const INFORMER_UNHEALTHY_MS = 15_000;

export type SimLogLevel = 'debug' | 'info' | 'warn' | 'error';
export type SimLogger = (level: SimLogLevel, msg: string, fields?: Record<string, unknown>) => void;

export interface VkSimulatorOptions {
  kube: KubeConfig;
  /** OCI registry base, `host:port` (plain HTTP on loopback) — the same value as the operator's OCI_REGISTRY. */
  registry: string;
  /** Node name (default `cocoon-pool`). */
  nodeName?: string;
  /** Node pool label value (default `default`). */
  pool?: string;
  /** Snapshot CPU class label; unset = unclassified node. */
  cpuClass?: string;
  /** `host:port` for the control API; unset = no HTTP server (in-process use). */
  controlAddr?: string;
  /** Node InternalIP (default 127.0.0.1). */
  nodeIP?: string;
  /** Bind matching unbound pods (default true; set false when a kube-scheduler runs). */
  bind?: boolean;
  /**
   * The node's seats: how many non-terminal pods it holds at most (its `pods` capacity; default 1000). A
   * matching pod that finds no free seat stays unbound with `PodScheduled=False Unschedulable`, as
   * kube-scheduler reports it, and is bound when a seat frees (a hibernated pod still holds its seat; only
   * deleting it frees one, which is what a `hibernatePolicy: release` suspend is for).
   */
  seats?: number;
  /** Periodic re-evaluation of every pod, ms (default 1000). */
  tickMs?: number;
  /** Cap of the provider-error retry backoff, ms (default 2000). */
  backoffCapMs?: number;
  log?: SimLogger;
}

export interface SimVM {
  id: string;
  name: string;
  ip: string;
  /** `<namespace>/<pod>` of the pod running it. */
  pod: string;
  podUID: string;
  startedAt: string;
  /** How it came up: `run`, `clone <image>`, `restore <source>`, `adopt`, … */
  source: string;
}

export interface SimLocalSnapshot {
  name: string;
  snapshotId: string;
  image: string;
}

/** What GET /state returns. */
export interface SimState {
  node: string;
  pool: string;
  cpuClass: string;
  /** The node's seats (pod capacity) and how many non-terminal pods hold one. */
  seats: number;
  seatsTaken: number;
  /** Bind attempts turned away because every seat was taken, since start. */
  turnedAway: number;
  vms: SimVM[];
  /** Every VM brought up since start, oldest first (the newest 1000): a complete record for tests. */
  started: SimVM[];
  localSnapshots: SimLocalSnapshot[];
  intents: Array<Intent & { pod: string; flushed: boolean }>;
  pods: Array<{
    pod: string;
    uid: string;
    created: boolean;
    failures: number;
    providerError?: string;
    terminal?: string;
    deleteDone: boolean;
  }>;
  faults: FaultRule[];
}

/** A provider error: the framework writes ProviderFailed status and retries. */
class ProviderError extends Error {}
/** The pod incarnation the work was for is gone (NotFound / uid Conflict / Invalid): drop it quietly. */
class Superseded extends Error {}

interface Tracked {
  key: string;
  namespace: string;
  name: string;
  uid: string;
  /** Latest informer copy of this incarnation (vk's tracked copy picks up annotations from it). */
  pod: V1Pod;
  /** Highest generation stamp seen on any copy. */
  maxStamp: number;
  /** CreatePod succeeded: the provider knows the pod. */
  created: boolean;
  intent?: Intent;
  flushed: boolean;
  /** Pending async ready, epoch ms. */
  readyAt?: number;
  failures: number;
  notBefore: number;
  providerError?: string;
  fingerprint: string;
  /** DeletePod of a running pod finished; force delete due at forceAt. */
  deleteDone: boolean;
  forceAt?: number;
  /** Terminal status written by the simulator (Succeeded after delete, Failed after eviction). */
  terminal?: 'Succeeded' | 'Failed';
  startTime?: string;
  lastStatusSig?: string;
  lastStatusAt: number;
}

function podKey(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function nowRFC3339(): string {
  return `${new Date().toISOString().slice(0, 19)}Z`;
}

function errMessage(err: unknown): string {
  const e = err as { body?: unknown; message?: string };
  if (e?.body && typeof e.body === 'string') {
    try {
      const parsed = JSON.parse(e.body) as { message?: string };
      if (parsed.message) return parsed.message;
    } catch {
      /* not JSON */
    }
  }
  return e?.message ?? String(err);
}

function isSupersededCode(code: number | undefined): boolean {
  return code === 404 || code === 409 || code === 422;
}

/** See the module comment. Construct, `await start()`, `await stop()`. */
export class VkSimulator {
  readonly nodeName: string;
  readonly pool: string;
  readonly cpuClass: string;
  readonly seats: number;
  readonly faults = new FaultBook();
  private readonly core: CoreV1Api;
  private readonly oci: OciClient;
  private readonly opts: VkSimulatorOptions;
  private readonly log: SimLogger;
  private readonly tickMs: number;
  private readonly backoffCapMs: number;
  private readonly nodeLabels: Record<string, string>;

  private readonly vms = new Map<string, SimVM>();
  /**
   * Every VM brought up since start (boot, clone, restore, wake, an unmanaged pod adopted), oldest first;
   * the newest 1000. A VM re-adopted after a restart of this process is not a bring-up.
   */
  private readonly started: SimVM[] = [];
  private readonly localSnapshots = new Map<string, SimLocalSnapshot>();
  /** Pods bound here that the node informer has not shown yet: they hold a seat already (uid → bound at ms). */
  private readonly justBound = new Map<string, number>();
  /** Bind attempts turned away for want of a seat (a barrier for tests: the node looked again). */
  private turnedAway = 0;
  /** Clone-mode base images already present locally (image ref → snapshot id). */
  private readonly localImages = new Map<string, string>();
  private readonly tracked = new Map<string, Tracked>();
  private readonly chains = new Map<string, Promise<void>>();
  private readonly kickPending = new Set<string>();
  private readonly timers = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  private readonly binding = new Set<string>();
  private ipCounter = 2;

  private readonly kube: KubeClients;
  private readonly informerNames = new Map<Informer<V1Pod>, string>();
  private nodeInformer?: Informer<V1Pod>;
  private unboundInformer?: Informer<V1Pod>;
  private tickTimer?: NodeJS.Timeout;
  private heartbeatTimer?: NodeJS.Timeout;
  private control?: { close(): Promise<void> };
  private running = false;
  private ready = false;

  constructor(opts: VkSimulatorOptions) {
    this.opts = opts;
    this.nodeName = opts.nodeName || VK_DEFAULT_NODE_NAME;
    this.pool = opts.pool || 'default';
    this.cpuClass = opts.cpuClass ?? '';
    this.seats = opts.seats ?? 1000;
    if (!Number.isInteger(this.seats) || this.seats < 0)
      throw new Error(`seats must be a whole number ≥ 0, got ${opts.seats}`);
    this.kube = makeKubeClients(opts.kube, { requestTimeoutMs: KUBE_REQUEST_TIMEOUT_MS });
    this.core = this.kube.core;
    this.oci = new OciClient(opts.registry);
    this.log = opts.log ?? (() => undefined);
    this.tickMs = opts.tickMs ?? 1_000;
    this.backoffCapMs = opts.backoffCapMs ?? DEFAULT_BACKOFF_CAP_MS;
    this.nodeLabels = {
      [Labels.nodePool]: this.pool,
      [Labels.nodeRoleCocoonVM]: '',
      // Not in vk-cocoon's documented label set, but every kubelet-registered node has it and the operator
      // pins a main with a required `kubernetes.io/hostname` affinity (docs/cocoonset.md#pods).
      [Labels.hostname]: this.nodeName,
      ...(this.cpuClass ? { [Labels.snapshotCPUClass]: this.cpuClass } : {}),
    };
  }

  /** True once the node is registered and both informers have listed. */
  get isReady(): boolean {
    return this.ready;
  }

  /**
   * Health for GET /healthz: started, and no informer has been unsynced (its list or watch failing, e.g.
   * the apiserver is down or was re-created with a new CA) for more than INFORMER_UNHEALTHY_MS. Returns
   * the problem or ''.
   */
  healthProblem(): string {
    if (!this.ready) return 'starting';
    for (const [inf, name] of this.informerNames) {
      const ms = inf.unsyncedForMs();
      if (ms > INFORMER_UNHEALTHY_MS) return `${name} informer not synced for ${Math.round(ms / 1000)} s`;
    }
    return '';
  }

  /** A pod informer on this simulator's log; `fieldSelector` picks the pods. */
  private podInformer(name: string, fieldSelector: string): Informer<V1Pod> {
    const at =
      (level: SimLogLevel) =>
      (fields: object, msg: string): void =>
        this.log(level, msg, fields as Record<string, unknown>);
    const log: InformerLog = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
    const inf = new Informer<V1Pod>({
      name,
      source: podSource(this.kube, '', fieldSelector),
      log,
      stallTimeoutMs: WATCH_STALL_MS,
    });
    this.informerNames.set(inf, name);
    return inf;
  }

  /**
   * Registers the node, starts the informers, the periodic tick and (when `controlAddr` is set) the
   * control API. Throws if the node cannot be registered or the control port cannot be bound.
   */
  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      await this.registerNode();
    } catch (err) {
      this.running = false;
      throw err;
    }
    this.nodeInformer = this.podInformer('node pods', `spec.nodeName=${this.nodeName}`);
    const onNodePod = (pod: V1Pod) => this.kick(podKey(pod.metadata!.namespace!, pod.metadata!.name!));
    this.nodeInformer.on('add', (pod: V1Pod) => {
      this.justBound.delete(pod.metadata?.uid ?? '');
      onNodePod(pod);
    });
    this.nodeInformer.on('update', onNodePod);
    this.nodeInformer.on('delete', onNodePod);
    if (this.opts.bind !== false) {
      this.unboundInformer = this.podInformer('unbound pods', 'spec.nodeName=');
      const onUnbound = (pod: V1Pod) => void this.tryBind(pod);
      this.unboundInformer.on('add', onUnbound);
      this.unboundInformer.on('update', onUnbound);
      this.unboundInformer.start();
      await this.unboundInformer.waitForSync();
    }
    this.nodeInformer.start();
    await this.nodeInformer.waitForSync();
    this.tickTimer = setInterval(() => this.tick(), this.tickMs);
    this.heartbeatTimer = setInterval(() => void this.heartbeat(), NODE_HEARTBEAT_MS);
    if (this.opts.controlAddr) {
      const { startControlServer } = await import('./control.js');
      this.control = await startControlServer(this, this.opts.controlAddr);
    }
    this.ready = true;
    this.log('info', 'vk simulator started', {
      node: this.nodeName,
      pool: this.pool,
      cpuClass: this.cpuClass,
    });
  }

  /** Stops informers, timers and the control API and waits (≤ 10 s) for in-flight pod work. */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.ready = false;
    if (this.tickTimer) clearInterval(this.tickTimer);
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    for (const t of this.timers.values()) clearTimeout(t.timer);
    this.timers.clear();
    await this.nodeInformer?.stop();
    await this.unboundInformer?.stop();
    await this.control?.close();
    const pending = Promise.allSettled([...this.chains.values()]);
    await Promise.race([pending, sleep(10_000)]);
    this.log('info', 'vk simulator stopped', { node: this.nodeName });
  }

  // ---------------------------------------------------------------- control surface

  /** Current model (VMs, local snapshots, intents, tracked pods, fault rules). */
  state(): SimState {
    return {
      node: this.nodeName,
      pool: this.pool,
      cpuClass: this.cpuClass,
      seats: this.seats,
      seatsTaken: this.seatsTaken(),
      turnedAway: this.turnedAway,
      vms: [...this.vms.values()].map((v) => ({ ...v })),
      started: this.started.map((v) => ({ ...v })),
      localSnapshots: [...this.localSnapshots.values()].map((s) => ({ ...s })),
      intents: [...this.tracked.values()]
        .filter((t) => t.intent)
        .map((t) => ({ ...t.intent!, pod: t.key, flushed: t.flushed })),
      pods: [...this.tracked.values()].map((t) => ({
        pod: t.key,
        uid: t.uid,
        created: t.created,
        failures: t.failures,
        providerError: t.providerError,
        terminal: t.terminal,
        deleteDone: t.deleteDone,
      })),
      faults: this.faults.list(),
    };
  }

  /**
   * Adds a fault rule. A `vm.crash` rule is an immediate action: the matching running VMs (at most
   * `count`) crash now and the rule is not stored. Returns the stored rule (or the crash rule) and the
   * crashed VM names. Throws FaultRuleError on an invalid rule.
   */
  async addFault(input: FaultRuleInput): Promise<{ rule: FaultRule; crashed: string[] }> {
    const probe = normaliseFaultRule(input, 0);
    if (probe.point !== 'vm.crash') return { rule: this.faults.add(input), crashed: [] };
    const crashed: string[] = [];
    for (const vmName of crashTargets(probe, [...this.vms.keys()])) {
      const vm = this.vms.get(vmName);
      if (!vm) continue;
      const [ns, name] = vm.pod.split('/') as [string, string];
      if (await this.crash(ns, name)) crashed.push(vmName);
    }
    return { rule: probe, crashed };
  }

  /**
   * The VM of pod `<namespace>/<name>` dies: the VM is gone; unless the pod has
   * `hibernate=true` or is being deleted, the pod is deleted (UID precondition, 2 attempts) and its status
   * set Failed with container reason VMGone. Returns false when the pod has no VM on this node.
   */
  async crash(namespace: string, name: string): Promise<boolean> {
    const key = podKey(namespace, name);
    let found = false;
    await this.exclusive(key, async () => {
      const t = this.tracked.get(key);
      const vm = t ? this.vmOf(t) : undefined;
      if (!t || !vm) return;
      found = true;
      this.vms.delete(vm.name);
      this.log('warn', 'VM crashed', { pod: key, vm: vm.name, id: vm.id });
      const pod = this.nodeInformer?.get(namespace, name) ?? t.pod;
      if (hibernateRequested(pod) || pod.metadata?.deletionTimestamp) return;
      await this.evict(t, VkStatusReasons.vmGone, `VM ${vm.name} (${vm.id}) is gone`);
    });
    if (found) this.kick(key);
    return found;
  }

  // ---------------------------------------------------------------- node

  private nodeConditions(): V1Node['status'] {
    const now = new Date();
    const cond = (type: string, status: string, reason: string, message: string) => ({
      type,
      status,
      reason,
      message,
      lastHeartbeatTime: now,
      lastTransitionTime: now,
    });
    return {
      conditions: [
        cond('Ready', 'True', 'KubeletReady', 'vk-cocoon is ready'),
        cond(
          'DiskPressure',
          'False',
          'KubeletHasNoDiskPressure',
          'vk-cocoon has sufficient disk space available',
        ),
        cond(
          'MemoryPressure',
          'False',
          'KubeletHasSufficientMemory',
          'vk-cocoon has sufficient memory available',
        ),
        cond('PIDPressure', 'False', 'KubeletHasSufficientPID', 'vk-cocoon has sufficient PID available'),
        cond('NetworkUnavailable', 'False', 'RouteCreated', 'vk-cocoon network is configured'),
      ],
      addresses: [
        { type: 'InternalIP', address: this.opts.nodeIP ?? '127.0.0.1' },
        { type: 'Hostname', address: this.nodeName },
      ],
      capacity: { cpu: '64', memory: '256Gi', pods: String(this.seats) },
      allocatable: { cpu: '64', memory: '256Gi', pods: String(this.seats) },
      daemonEndpoints: { kubeletEndpoint: { Port: 10250 } },
    };
  }

  /** Create or update the Node (labels, taint), then write its status. */
  private async registerNode(): Promise<void> {
    const taint = { ...VK_PROVIDER_TAINT };
    try {
      await this.core.createNode({
        body: {
          apiVersion: 'v1',
          kind: 'Node',
          metadata: { name: this.nodeName, labels: this.nodeLabels },
          spec: { taints: [taint] },
          status: this.nodeConditions(),
        },
      });
    } catch (err) {
      if (statusCodeOf(err) !== 409) throw err;
      const labels: Record<string, string | null> = { ...this.nodeLabels };
      if (!this.cpuClass) labels[Labels.snapshotCPUClass] = null;
      await this.core.patchNode(
        {
          name: this.nodeName,
          body: { metadata: { labels }, spec: { taints: [taint], unschedulable: false } },
        },
        mergePatch,
      );
    }
    await this.heartbeat();
  }

  private async heartbeat(): Promise<void> {
    try {
      if (!this.running) return;
      await this.core.patchNodeStatus(
        { name: this.nodeName, body: { status: this.nodeConditions() } },
        mergePatch,
      );
    } catch (err) {
      if (statusCodeOf(err) === 404 && this.running) {
        // Someone deleted the Node: register it again.
        await this.registerNode().catch((e) =>
          this.log('warn', 'node re-registration failed', { err: errMessage(e) }),
        );
        return;
      }
      this.log('warn', 'node status update failed', { err: errMessage(err) });
    }
  }

  // ---------------------------------------------------------------- informers, scheduling, queueing

  /** Binds an unbound pod to this node when its nodeSelector/affinity match and it tolerates the taint. */
  private async tryBind(pod: V1Pod): Promise<void> {
    const uid = pod.metadata?.uid ?? '';
    if (!this.running || !uid || pod.spec?.nodeName || pod.metadata?.deletionTimestamp) return;
    if (pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed') return;
    if (!podFitsNode(pod, this.nodeName, this.nodeLabels)) return;
    if (!toleratesTaint(pod.spec?.tolerations, VK_PROVIDER_TAINT)) return;
    if (this.binding.has(uid)) return;
    const namespace = pod.metadata!.namespace!;
    const name = pod.metadata!.name!;
    if (this.seatsTaken() >= this.seats) {
      this.turnedAway++;
      return this.reportNoSeat(pod);
    }
    this.binding.add(uid);
    try {
      await this.core.createNamespacedPodBinding({
        name,
        namespace,
        body: {
          apiVersion: 'v1',
          kind: 'Binding',
          metadata: { name, namespace, uid },
          target: { apiVersion: 'v1', kind: 'Node', name: this.nodeName },
        },
      });
      this.justBound.set(uid, Date.now());
      this.log('info', 'bound pod', { pod: podKey(namespace, name) });
    } catch (err) {
      const code = statusCodeOf(err);
      if (code !== 409 && code !== 404)
        this.log('warn', 'bind failed', { pod: podKey(namespace, name), err: errMessage(err) });
    } finally {
      this.binding.delete(uid);
    }
  }

  /**
   * Seats in use: non-terminal pods on this node (a Terminating pod still holds its seat, as the scheduler
   * counts it), plus binds in flight and binds the node informer has not shown yet (forgotten after 30 s).
   */
  private seatsTaken(): number {
    const uids = new Set<string>(this.binding);
    const now = Date.now();
    for (const [uid, at] of this.justBound) if (now - at < 30_000) uids.add(uid);
    for (const p of this.nodeInformer?.list() ?? []) {
      if (p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed') continue;
      uids.add(p.metadata?.uid ?? '');
    }
    return uids.size;
  }

  /**
   * Writes `PodScheduled=False Unschedulable` with kube-scheduler's wording on a pod that fits this node
   * but finds it full, once per message; guarded by the pod's resourceVersion so it never lands on a pod
   * another node bound meanwhile (binding sets PodScheduled=True).
   */
  private async reportNoSeat(pod: V1Pod): Promise<void> {
    const message = `0/1 nodes are available: 1 Too many pods. (node ${this.nodeName}: ${this.seats} seats taken)`;
    const current = pod.status?.conditions?.find((c) => c.type === 'PodScheduled');
    if (current?.status === 'False' && current.reason === 'Unschedulable' && current.message === message)
      return;
    const namespace = pod.metadata!.namespace!;
    const name = pod.metadata!.name!;
    try {
      await this.core.patchNamespacedPodStatus(
        {
          name,
          namespace,
          body: {
            metadata: { uid: pod.metadata!.uid, resourceVersion: pod.metadata!.resourceVersion },
            status: {
              conditions: [
                {
                  type: 'PodScheduled',
                  status: 'False',
                  reason: 'Unschedulable',
                  message,
                  lastTransitionTime: new Date(),
                },
              ],
            },
          },
        },
        mergePatch,
      );
      this.log('info', 'pod unschedulable: no free seat', {
        pod: podKey(namespace, name),
        seats: this.seats,
      });
    } catch (err) {
      if (!isSupersededCode(statusCodeOf(err)))
        this.log('warn', 'unschedulable status write failed', {
          pod: podKey(namespace, name),
          err: errMessage(err),
        });
    }
  }

  /** Serialises `fn` after all earlier work for the pod key. */
  private exclusive(key: string, fn: () => Promise<void>): Promise<void> {
    const prev = this.chains.get(key) ?? Promise.resolve();
    const next = prev.then(fn).catch((err) => {
      this.log('error', 'pod work crashed', { pod: key, err: errMessage(err), stack: (err as Error)?.stack });
    });
    this.chains.set(key, next);
    void next.then(() => {
      if (this.chains.get(key) === next) this.chains.delete(key);
    });
    return next;
  }

  /** Queues one reconcile of the pod (coalesced while one is already queued). */
  private kick(key: string): void {
    if (!this.running || this.kickPending.has(key)) return;
    this.kickPending.add(key);
    void this.exclusive(key, async () => {
      this.kickPending.delete(key);
      if (this.running) await this.reconcile(key);
    });
  }

  /** Arms a timer that kicks the pod at `at` (keeps the earliest pending one). */
  private schedule(key: string, at: number): void {
    if (!this.running) return;
    const existing = this.timers.get(key);
    if (existing && existing.at <= at) return;
    if (existing) clearTimeout(existing.timer);
    const timer = setTimeout(
      () => {
        this.timers.delete(key);
        this.kick(key);
      },
      Math.max(0, at - Date.now()),
    );
    this.timers.set(key, { at, timer });
  }

  private tick(): void {
    if (!this.running) return;
    const keys = new Set(this.tracked.keys());
    for (const pod of this.nodeInformer?.list() ?? [])
      keys.add(podKey(pod.metadata!.namespace!, pod.metadata!.name!));
    for (const key of keys) this.kick(key);
    for (const pod of this.unboundInformer?.list() ?? []) void this.tryBind(pod);
  }

  // ---------------------------------------------------------------- the per-pod state machine

  private vmOf(t: Tracked): SimVM | undefined {
    const name = vmNameOf(t.pod);
    const vm = name ? this.vms.get(name) : undefined;
    return vm && vm.podUID === t.uid ? vm : undefined;
  }

  private track(pod: V1Pod): Tracked {
    const t: Tracked = {
      key: podKey(pod.metadata!.namespace!, pod.metadata!.name!),
      namespace: pod.metadata!.namespace!,
      name: pod.metadata!.name!,
      uid: pod.metadata!.uid!,
      pod,
      maxStamp: cocoonSetGenerationOf(pod),
      created: false,
      intent: seedIntent(pod),
      flushed: true,
      failures: 0,
      notBefore: 0,
      fingerprint: operatorFingerprint(pod),
      deleteDone: false,
      lastStatusAt: 0,
    };
    this.tracked.set(t.key, t);
    return t;
  }

  private async reconcile(key: string): Promise<void> {
    const [namespace, name] = key.split('/') as [string, string];
    const pod = this.nodeInformer?.get(namespace, name);
    let t = this.tracked.get(key);
    if (t && (!pod || pod.metadata?.uid !== t.uid)) {
      if (!(await this.podGone(t))) return;
      this.tracked.delete(key);
      t = undefined;
    }
    if (!pod) return;
    if (!t) t = this.track(pod);
    t.pod = pod;
    t.maxStamp = Math.max(t.maxStamp, cocoonSetGenerationOf(pod));
    const fp = operatorFingerprint(pod);
    if (fp !== t.fingerprint) {
      // An operator change re-enqueues the key immediately, whatever the backoff.
      t.fingerprint = fp;
      t.notBefore = 0;
    }
    try {
      if (pod.metadata?.deletionTimestamp) {
        await this.handleDeletion(t, pod);
        return;
      }
      if (t.terminal) return;
      if (!t.created && (pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed')) return;
      if (Date.now() < t.notBefore) {
        this.schedule(key, t.notBefore);
        return;
      }
      const op = t.created ? 'update' : 'create';
      try {
        if (t.created) await this.updatePod(t, pod);
        else await this.createPod(t, pod);
        t.failures = 0;
        t.providerError = undefined;
      } catch (err) {
        if (err instanceof Superseded) throw err;
        await this.providerFailed(t, op, err);
        return;
      }
      await this.syncReady(t);
      await this.reflush(t);
      await this.syncStatus(t);
    } catch (err) {
      if (err instanceof Superseded) {
        this.log('info', 'pod superseded; dropping work', { pod: key, uid: t.uid });
        return;
      }
      throw err;
    }
  }

  /** Framework behaviour on a Create/UpdatePod error: ProviderFailed status, Warning event, backoff. */
  private async providerFailed(t: Tracked, op: 'create' | 'update', err: unknown): Promise<void> {
    const message = errMessage(err);
    t.failures += 1;
    t.providerError = message;
    const delay = providerBackoffMs(t.failures, this.backoffCapMs);
    t.notBefore = Date.now() + delay;
    this.schedule(t.key, t.notBefore);
    this.log('warn', `provider ${op} failed`, {
      pod: t.key,
      err: message,
      retryInMs: delay,
      failures: t.failures,
    });
    this.event(
      t,
      'Warning',
      op === 'create' ? VkEventReasons.providerCreateFailed : VkEventReasons.providerUpdateFailed,
      message,
    );
    await this.writeStatus(t, { phase: 'Pending', reason: VkStatusReasons.providerFailed, message }).catch(
      (e) => {
        if (!(e instanceof Superseded))
          this.log('warn', 'ProviderFailed status write failed', { pod: t.key, err: errMessage(e) });
      },
    );
  }

  // ---------------------------------------------------------------- CreatePod

  private async createPod(t: Tracked, pod: V1Pod): Promise<void> {
    const vmName = vmNameOf(pod);
    if (!vmName) throw new ProviderError(`pod ${t.key} missing ${Annotations.vmName} annotation`);
    const gate = cpuClassRejection(pod, this.cpuClass);
    if (gate) throw new ProviderError(gate);
    const ann = pod.metadata?.annotations ?? {};
    const managed = ann[Annotations.managed] === 'true';

    await this.lifecycle(t, LifecycleStates.creating);

    const existing = this.vms.get(vmName);
    if (existing) {
      // A VM of that name already runs on this node: adopt it (step 3).
      existing.pod = t.key;
      existing.podUID = t.uid;
      existing.source = 'adopt';
      await this.applyRuntime(t, existing);
      this.markCreated(t, existing);
      await this.syncStatus(t);
      await this.publishReady(t);
      return;
    }

    let restore = false;
    if (managed) {
      if (restoreFromHibernate(pod)) {
        restore = true;
      } else {
        restore = await this.evidenceCheck(t, pod, vmName);
      }
    }

    const bringUpDelay = this.faults.delayFor('create', vmName);
    if (bringUpDelay > 0) await sleep(bringUpDelay);
    if (this.faults.shouldFail('create', vmName)) {
      await this.failOp(
        t,
        VkEventReasons.createBringUpFailed,
        `bring-up of VM ${vmName} failed (injected create.fail)`,
      );
    }

    let vm: SimVM;
    let cloned: boolean;
    if (!managed) {
      const id = ann[Annotations.vmID] ?? '';
      const ip = ann[Annotations.ip] ?? '';
      if (!id || !ip) {
        await this.failOp(
          t,
          VkEventReasons.createBringUpFailed,
          `unmanaged pod ${t.key} needs pre-assigned ${Annotations.vmID} and ${Annotations.ip}`,
        );
      }
      vm = this.newVM(t, vmName, 'adopt', id, ip);
      cloned = false;
    } else if (restore) {
      let source: string;
      try {
        source = await this.resolveWakeSource(t, vmName);
      } catch (err) {
        return this.failOp(t, VkEventReasons.createBringUpFailed, `restore of ${vmName}: ${errMessage(err)}`);
      }
      vm = this.newVM(t, vmName, `restore ${source}`);
      cloned = true;
    } else {
      // Fresh bring-up: never hand out a dead incarnation's fork baseline.
      this.localSnapshots.delete(`fork-${vmName}`);
      const forkFrom = ann[Annotations.forkFrom] ?? '';
      const cloneFromDir = ann[Annotations.cloneFromDir] ?? '';
      const mode = ann[Annotations.mode] ?? '';
      let source: string;
      try {
        if (cloneFromDir) source = `dir ${cloneFromDir}`;
        else if (forkFrom) source = this.ensureForkSnapshot(forkFrom, ann[Annotations.image] ?? '');
        else if (mode === 'run') source = `run ${ann[Annotations.image] ?? ''}`;
        else source = await this.ensureBaseImage(ann[Annotations.image] ?? '');
      } catch (err) {
        return this.failOp(
          t,
          VkEventReasons.createBringUpFailed,
          `bring-up of VM ${vmName}: ${errMessage(err)}`,
        );
      }
      vm = this.newVM(t, vmName, source);
      cloned = mode !== 'run' || !!forkFrom || !!cloneFromDir;
    }

    this.addVM(vm);
    await this.applyRuntime(t, vm);
    this.markCreated(t, vm);
    this.event(t, 'Normal', VkEventReasons.providerCreateSuccess, `created VM ${vm.name} (${vm.id})`);
    await this.syncStatus(t);
    const readyDelay = this.faults.delayFor('ready', vmName);
    if (!cloned && readyDelay === 0) await this.publishReady(t);
    else {
      t.readyAt = Date.now() + readyDelay;
      this.schedule(t.key, t.readyAt);
    }
  }

  private markCreated(t: Tracked, vm: SimVM): void {
    t.created = true;
    t.startTime = vm.startedAt;
  }

  /**
   * The evidence check: GET `<vm>:hibernate`. Returns true to restore. Registry errors,
   * an explicit clone source or a base-image mismatch fail the create (HibernateEvidenceFailed).
   */
  private async evidenceCheck(t: Tracked, pod: V1Pod, vmName: string): Promise<boolean> {
    const ann = pod.metadata?.annotations ?? {};
    let got: Awaited<ReturnType<OciClient['getManifest']>>;
    try {
      if (this.faults.shouldFail('evidence', vmName))
        throw new Error('registry unavailable (injected evidence.error)');
      got = await this.oci.getManifest(vmName, 'hibernate');
    } catch (err) {
      const msg = `cannot check hibernate evidence ${vmName}:hibernate: ${errMessage(err)}`;
      this.event(t, 'Warning', VkEventReasons.hibernateEvidenceUnavailable, msg);
      return this.failOp(t, VkEventReasons.hibernateEvidenceFailed, `${msg}; refusing a fresh boot`);
    }
    if (!got) return false;
    const discard = `delete the ${vmName}:hibernate tag to discard the hibernated state`;
    if (ann[Annotations.forkFrom] || ann[Annotations.cloneFromDir]) {
      return this.failOp(
        t,
        VkEventReasons.hibernateEvidenceFailed,
        `VM ${vmName} has a hibernate snapshot but the pod names an explicit clone source; ${discard}`,
      );
    }
    const recorded = got.manifest.annotations?.[SnapshotArtifact.annotationBaseImage] ?? '';
    const image = ann[Annotations.image] ?? '';
    if (recorded && recorded !== image) {
      return this.failOp(
        t,
        VkEventReasons.hibernateEvidenceFailed,
        `hibernate snapshot of ${vmName} was taken from image ${recorded}, pod wants ${image}; ${discard}`,
      );
    }
    this.event(
      t,
      'Warning',
      VkEventReasons.hibernateSnapshotExists,
      `found ${vmName}:hibernate in the registry; restoring instead of a fresh boot`,
    );
    return true;
  }

  private ensureForkSnapshot(source: string, image: string): string {
    const name = `fork-${source}`;
    if (!this.localSnapshots.has(name)) {
      if (!this.vms.has(source)) throw new Error(`fork source VM ${source} is not on node ${this.nodeName}`);
      this.localSnapshots.set(name, { name, snapshotId: this.newSnapshotId(), image });
    }
    return `fork ${name}`;
  }

  /** Clone mode: the base image must be local or pullable from the registry (`repo[:tag]`). */
  private async ensureBaseImage(image: string): Promise<string> {
    if (!image) throw new Error(`no ${Annotations.image} annotation`);
    if (!this.localImages.has(image)) {
      const { repo, tag } = parseImageRef(image, this.opts.registry);
      const info = await this.oci.getSnapshotInfo(repo, tag);
      if (!info) throw new Error(`image ${repo}:${tag} not found in registry ${this.opts.registry}`);
      this.localImages.set(image, info.config?.snapshotId ?? info.digest);
    }
    return `clone ${image}`;
  }

  // ---------------------------------------------------------------- UpdatePod (generation echo)

  private async updatePod(t: Tracked, pod: V1Pod): Promise<void> {
    const gate = cpuClassRejection(pod, this.cpuClass);
    if (gate) throw new ProviderError(gate);
    const managed = pod.metadata?.annotations?.[Annotations.managed] === 'true';
    const vm = this.vmOf(t);
    if (managed && hibernateRequested(pod) && vm) {
      t.readyAt = undefined;
      await this.hibernate(t, pod, vm);
      return;
    }
    if (managed && !hibernateRequested(pod) && !vm) {
      await this.wake(t, pod);
      return;
    }
    // Nothing to do: a bare stamp change re-publishes the current state with the new generation.
    if (t.intent && t.maxStamp > t.intent.gen) {
      if (t.intent.state === LifecycleStates.ready) await this.publishReady(t);
      else await this.lifecycle(t, t.intent.state, t.intent.message);
    }
  }

  private async hibernate(t: Tracked, pod: V1Pod, vm: SimVM): Promise<void> {
    const image = pod.metadata?.annotations?.[Annotations.image] ?? '';
    await this.lifecycle(t, LifecycleStates.hibernating);
    const saveDelay = this.faults.delayFor('hibernate.save', vm.name);
    if (saveDelay > 0) await sleep(saveDelay);
    if (this.faults.shouldFail('hibernate.save', vm.name)) {
      await this.failOp(
        t,
        VkEventReasons.hibernateSnapshotFailed,
        `snapshot save of ${vm.name} failed (injected)`,
      );
    }
    const snap: SimLocalSnapshot = { name: vm.name, snapshotId: this.newSnapshotId(), image };
    this.localSnapshots.set(vm.name, snap);
    try {
      await this.oci.pushSnapshot(
        vm.name,
        'hibernate',
        { snapshotId: snap.snapshotId, image, node: this.nodeName },
        async () => {
          const d = this.faults.delayFor('hibernate.push', vm.name);
          if (d > 0) await sleep(d);
          if (this.faults.shouldFail('hibernate.push', vm.name))
            throw new Error('registry push failed (injected)');
        },
      );
    } catch (err) {
      await this.failOp(
        t,
        VkEventReasons.hibernatePushFailed,
        `push ${vm.name}:hibernate: ${errMessage(err)}`,
      );
    }
    const removeDelay = this.faults.delayFor('hibernate.remove', vm.name);
    if (removeDelay > 0) await sleep(removeDelay);
    await this.clearRuntime(t);
    if (this.faults.shouldFail('hibernate.remove', vm.name)) {
      try {
        await this.oci.deleteManifest(vm.name, 'hibernate');
      } catch (err) {
        this.log('warn', 'rollback of :hibernate failed', { vm: vm.name, err: errMessage(err) });
      }
      await this.applyRuntime(t, vm);
      await this.failOp(t, VkEventReasons.hibernateRemoveFailed, `remove VM ${vm.name} failed (injected)`);
    }
    this.vms.delete(vm.name);
    await this.lifecycle(t, LifecycleStates.hibernated);
    this.event(t, 'Normal', VkEventReasons.hibernated, 'snapshot pushed to registry');
    this.event(t, 'Normal', VkEventReasons.providerUpdateSuccess, `hibernated VM ${vm.name}`);
    await this.syncStatus(t);
  }

  private async wake(t: Tracked, pod: V1Pod): Promise<void> {
    const vmName = vmNameOf(pod);
    await this.lifecycle(t, LifecycleStates.creating);
    await this.clearRuntime(t);
    let source: string;
    try {
      source = await this.resolveWakeSource(t, vmName);
    } catch (err) {
      return this.failOp(t, VkEventReasons.wakePullFailed, `wake ${vmName}: ${errMessage(err)}`);
    }
    if (this.faults.shouldFail('wake.clone', vmName)) {
      await this.failOp(
        t,
        VkEventReasons.wakeCloneFailed,
        `clone of ${vmName} from ${source} failed (injected)`,
      );
    }
    const vm = this.newVM(t, vmName, `wake ${source}`);
    this.addVM(vm);
    await this.applyRuntime(t, vm);
    t.startTime = vm.startedAt;
    this.event(t, 'Normal', VkEventReasons.woken, `cloned from ${source}`);
    this.event(t, 'Normal', VkEventReasons.providerUpdateSuccess, `woke VM ${vm.name} (${vm.id})`);
    await this.syncStatus(t);
    t.readyAt = Date.now() + this.faults.delayFor('ready', vmName);
    this.schedule(t.key, t.readyAt);
  }

  /**
   * Wake source: the local snapshot `<vm>` when its id matches the registry's `:hibernate`
   * config; else a pull of `<vm>:hibernate`. Registry errors fail closed. Returns a description.
   * The `wake.pull` fault fires before either source is tried. Peer restore is not simulated.
   */
  private async resolveWakeSource(_t: Tracked, vmName: string): Promise<string> {
    if (this.faults.shouldFail('wake.pull', vmName)) throw new Error('pull failed (injected wake.pull.fail)');
    const delay = this.faults.delayFor('wake.pull', vmName);
    if (delay > 0) await sleep(delay);
    const local = this.localSnapshots.get(vmName);
    const info = await this.oci.getSnapshotInfo(vmName, 'hibernate');
    if (!info) {
      if (local) this.localSnapshots.delete(vmName);
      throw new Error(`${vmName}:hibernate not found in registry ${this.opts.registry}`);
    }
    if (local && info.config && info.config.snapshotId === local.snapshotId)
      return `local snapshot ${vmName}`;
    if (local) this.localSnapshots.delete(vmName);
    const pulled = await this.oci.pullSnapshot(vmName, 'hibernate');
    if (!pulled) throw new Error(`${vmName}:hibernate disappeared during the pull`);
    return `${this.opts.registry}/${vmName}:hibernate`;
  }

  /** Async ready: when due, unless hibernate was requested or the VM changed. */
  private async syncReady(t: Tracked): Promise<void> {
    if (t.readyAt === undefined) return;
    if (Date.now() < t.readyAt) {
      this.schedule(t.key, t.readyAt);
      return;
    }
    t.readyAt = undefined;
    const vm = this.vmOf(t);
    if (!vm || hibernateRequested(t.pod)) return;
    if (this.faults.shouldFail('ready', vm.name)) {
      await this.lifecycle(t, LifecycleStates.failed, `post-clone fixup of ${vm.name} exhausted (injected)`);
      this.event(
        t,
        'Warning',
        VkEventReasons.postCloneExecExhausted,
        `post-clone fixup of ${vm.name} exhausted (injected)`,
      );
      return;
    }
    await this.publishReady(t);
  }

  // ---------------------------------------------------------------- deletion and eviction

  private async handleDeletion(t: Tracked, pod: V1Pod): Promise<void> {
    if (t.deleteDone) {
      if (Date.now() >= (t.forceAt ?? 0)) await this.forceDelete(t);
      else this.schedule(t.key, t.forceAt!);
      return;
    }
    const running = !t.terminal && podRunningForDeletion(pod);
    if (!running) {
      // Not running: the framework force-deletes first; DeletePod runs once the pod is gone (podGone).
      await this.forceDelete(t);
      return;
    }
    if (Date.now() < t.notBefore) {
      this.schedule(t.key, t.notBefore);
      return;
    }
    try {
      await this.deletePodWork(t, pod);
    } catch (err) {
      if (err instanceof Superseded) throw err;
      const message = errMessage(err);
      t.failures += 1;
      const delay = providerBackoffMs(t.failures, this.backoffCapMs);
      t.notBefore = Date.now() + delay;
      this.schedule(t.key, t.notBefore);
      this.log('warn', 'DeletePod failed; pod stays Terminating', {
        pod: t.key,
        err: message,
        retryInMs: delay,
      });
      this.event(t, 'Warning', VkEventReasons.providerDeleteFailed, message);
      return;
    }
    t.failures = 0;
    t.deleteDone = true;
    t.terminal = 'Succeeded';
    this.event(t, 'Normal', VkEventReasons.providerDeleteSuccess, `deleted VM ${vmNameOf(pod)}`);
    await this.writeTerminalStatus(
      t,
      'Succeeded',
      0,
      VkStatusReasons.terminated,
      CONTAINER_TERMINATED_MESSAGE,
    ).catch((e) => this.log('warn', 'terminal status write failed', { pod: t.key, err: errMessage(e) }));
    t.forceAt = Date.now() + (pod.metadata?.deletionGracePeriodSeconds ?? 0) * 1000;
    this.schedule(t.key, t.forceAt);
  }

  /**
   * The pod incarnation left the API (or was replaced). Runs DeletePod with the tracked copy unless it
   * already ran. Returns false when DeletePod failed and must be retried (the incarnation stays tracked).
   */
  private async podGone(t: Tracked): Promise<boolean> {
    if (!t.deleteDone) {
      if (Date.now() < t.notBefore) {
        this.schedule(t.key, t.notBefore);
        return false;
      }
      try {
        await this.deletePodWork(t, t.pod);
      } catch (err) {
        t.failures += 1;
        t.notBefore = Date.now() + providerBackoffMs(t.failures, this.backoffCapMs);
        this.schedule(t.key, t.notBefore);
        this.log('warn', 'DeletePod (tracked copy) failed; retrying', { pod: t.key, err: errMessage(err) });
        return false;
      }
    }
    const timer = this.timers.get(t.key);
    if (timer) {
      clearTimeout(timer.timer);
      this.timers.delete(t.key);
    }
    this.log('info', 'pod forgotten', { pod: t.key, uid: t.uid });
    return true;
  }

  /**
   * DeletePod: for a VM of a managed pod, push `:latest` when ShouldSnapshotVM(policy, role) says so
   * (local save first), remove the VM, then drop local snapshots `<vm>` and `fork-<vm>` unless
   * keep-snapshot-on-delete. Unmanaged pods are only forgotten. Throws to keep the VM and retry.
   */
  private async deletePodWork(t: Tracked, pod: V1Pod): Promise<void> {
    const ann = pod.metadata?.annotations ?? {};
    const vmName = vmNameOf(pod);
    if (!vmName) return;
    const vm = this.vmOf(t);
    if (ann[Annotations.managed] !== 'true') {
      if (vm) this.vms.delete(vm.name);
      return;
    }
    if (vm) {
      const policy = ann[Annotations.snapshotPolicy];
      if (shouldSnapshotVM(policy, roleForPod(pod, vmName))) {
        const d = this.faults.delayFor('delete.push', vmName);
        if (d > 0) await sleep(d);
        if (this.faults.shouldFail('delete.push', vmName)) {
          throw new Error(`push ${vmName}:latest failed (injected delete.push.fail); VM kept`);
        }
        const image = ann[Annotations.image] ?? '';
        const snap: SimLocalSnapshot = { name: vmName, snapshotId: this.newSnapshotId(), image };
        this.localSnapshots.set(vmName, snap);
        await this.oci.pushSnapshot(vmName, 'latest', {
          snapshotId: snap.snapshotId,
          image,
          node: this.nodeName,
        });
      }
      this.vms.delete(vm.name);
    }
    if (ann[Annotations.keepSnapshotOnDelete] !== 'true') {
      this.localSnapshots.delete(vmName);
      this.localSnapshots.delete(`fork-${vmName}`);
    }
  }

  /** Force delete, grace 0, UID precondition. NotFound / precondition Conflict mean it is already gone. */
  private async forceDelete(t: Tracked): Promise<void> {
    try {
      await this.core.deleteNamespacedPod({
        name: t.name,
        namespace: t.namespace,
        gracePeriodSeconds: 0,
        body: { gracePeriodSeconds: 0, preconditions: { uid: t.uid } },
      });
      this.log('info', 'force-deleted pod', { pod: t.key, uid: t.uid });
    } catch (err) {
      const code = statusCodeOf(err);
      if (code === 404 || code === 409) return;
      this.log('warn', 'force delete failed', { pod: t.key, err: errMessage(err) });
      this.schedule(t.key, Date.now() + 1_000);
    }
  }

  /** Eviction: delete with UID precondition (2 attempts), then status Failed with `reason`. */
  private async evict(t: Tracked, reason: string, message: string): Promise<void> {
    for (let i = 1; i <= EVICT_ATTEMPTS; i++) {
      try {
        await this.core.deleteNamespacedPod({
          name: t.name,
          namespace: t.namespace,
          body: { preconditions: { uid: t.uid } },
        });
        break;
      } catch (err) {
        const code = statusCodeOf(err);
        if (code === 404 || code === 409) return;
        this.log('warn', 'eviction delete failed', { pod: t.key, attempt: i, err: errMessage(err) });
        if (i < EVICT_ATTEMPTS) await sleep(EVICT_RETRY_MS);
      }
    }
    t.terminal = 'Failed';
    t.readyAt = undefined;
    await this.writeTerminalStatus(t, 'Failed', 1, reason, message).catch((e) =>
      this.log('warn', 'eviction status write failed', { pod: t.key, err: errMessage(e) }),
    );
  }

  // ---------------------------------------------------------------- lifecycle intent and annotations

  /**
   * L(state): stage the intent per the lifecycle intent rules (test/vksim/rules.ts; dropped writes are logged
   * and skipped), then flush it as ONE uid-guarded strategic-merge patch of the triple (message null unless
   * failed).
   */
  private async lifecycle(t: Tracked, state: LifecycleState, message = ''): Promise<void> {
    const next: Intent = {
      uid: t.uid,
      state,
      gen: t.maxStamp,
      message: state === LifecycleStates.failed ? truncateBytes(message, LIFECYCLE_MESSAGE_MAX_BYTES) : '',
    };
    const verdict = judgeIntent(t.intent, next, t.uid);
    if (verdict !== 'accept') {
      this.log('debug', 'lifecycle write dropped', { pod: t.key, state, gen: next.gen, verdict });
      return;
    }
    t.intent = next;
    t.flushed = false;
    await this.flushIntent(t);
  }

  private async flushIntent(t: Tracked): Promise<void> {
    const intent = t.intent;
    if (!intent) return;
    const body = {
      metadata: {
        uid: intent.uid,
        annotations: {
          [Annotations.lifecycleState]: intent.state,
          [Annotations.lifecycleObservedGeneration]: String(intent.gen),
          [Annotations.lifecycleStateMessage]:
            intent.state === LifecycleStates.failed ? intent.message : null,
        },
      },
    };
    await this.patchPod(t, body, true);
    if (t.intent === intent) t.flushed = true;
    this.log('info', 'lifecycle', {
      pod: t.key,
      state: intent.state,
      gen: intent.gen,
      message: intent.message,
    });
  }

  /** Re-flush an intent whose patch failed earlier (vk's 15 s reconciler; `ready` goes status-first). */
  private async reflush(t: Tracked): Promise<void> {
    if (!t.intent || t.flushed) return;
    if (t.intent.state === LifecycleStates.ready) await this.syncStatus(t, true);
    await this.flushIntent(t);
  }

  /**
   * Stage `ready` in memory → status Running/Ready=True (direct, uid-guarded) → L(ready).
   * If the status write fails the annotation is not written; the re-flush retries both.
   */
  private async publishReady(t: Tracked): Promise<void> {
    if (!this.vmOf(t)) return;
    const next: Intent = { uid: t.uid, state: LifecycleStates.ready, gen: t.maxStamp, message: '' };
    const verdict = judgeIntent(t.intent, next, t.uid);
    if (verdict !== 'accept') {
      this.log('debug', 'ready dropped', { pod: t.key, verdict });
      return;
    }
    t.intent = next;
    t.flushed = false;
    try {
      await this.syncStatus(t, true);
    } catch (err) {
      if (err instanceof Superseded) throw err;
      this.log('warn', 'ready status write failed; annotation deferred', {
        pod: t.key,
        err: errMessage(err),
      });
      return;
    }
    await this.flushIntent(t);
  }

  /** A(id, ip): plain strategic-merge patch (no uid), 3 attempts; failure only logged. */
  private async applyRuntime(t: Tracked, vm: SimVM): Promise<void> {
    try {
      await this.patchPod(
        t,
        { metadata: { annotations: { [Annotations.vmID]: vm.id, [Annotations.ip]: vm.ip } } },
        false,
      );
    } catch (err) {
      if (err instanceof Superseded) throw err;
      this.log('warn', 'runtime annotation patch failed', { pod: t.key, err: errMessage(err) });
    }
  }

  /** C(id, ip): uid-guarded clear of id, ip and post-clone-state; failure only logged. */
  private async clearRuntime(t: Tracked): Promise<void> {
    try {
      await this.patchPod(
        t,
        {
          metadata: {
            uid: t.uid,
            annotations: {
              [Annotations.vmID]: null,
              [Annotations.ip]: null,
              [Annotations.postCloneState]: null,
            },
          },
        },
        true,
      );
    } catch (err) {
      this.log('warn', 'runtime annotation clear failed', { pod: t.key, err: errMessage(err) });
    }
  }

  /**
   * Strategic-merge patch of the pod, 3 attempts 500 ms apart. With `guarded` (uid in the body) a
   * NotFound/Conflict/Invalid answer means a different incarnation owns the name → Superseded.
   */
  private async patchPod(t: Tracked, body: object, guarded: boolean): Promise<void> {
    let last: unknown;
    for (let i = 1; i <= PATCH_ATTEMPTS; i++) {
      try {
        await this.core.patchNamespacedPod(
          { name: t.name, namespace: t.namespace, body },
          strategicMergePatch,
        );
        return;
      } catch (err) {
        const code = statusCodeOf(err);
        if (code === 404 || (guarded && isSupersededCode(code))) throw new Superseded(errMessage(err));
        last = err;
        if (i < PATCH_ATTEMPTS) await sleep(PATCH_RETRY_MS);
      }
    }
    throw last;
  }

  /** Sets lifecycle `failed` with the reason as a Warning event, then throws the provider error. */
  private async failOp(t: Tracked, reason: string, message: string): Promise<never> {
    await this.lifecycle(t, LifecycleStates.failed, message);
    this.event(t, 'Warning', reason, message);
    throw new ProviderError(message);
  }

  // ---------------------------------------------------------------- pod status

  private desiredStatus(t: Tracked): V1PodStatus | undefined {
    if (t.terminal || t.providerError || !t.created) return undefined;
    const vm = this.vmOf(t);
    if (!vm) {
      return { phase: 'Pending', reason: undefined, message: undefined };
    }
    const ready = t.intent?.state === LifecycleStates.ready;
    const now = new Date();
    const cond = (type: string, ok: boolean): V1PodCondition => ({
      type,
      status: ok ? 'True' : 'False',
      lastTransitionTime: now,
    });
    const names = (t.pod.spec?.containers ?? []).map((c) => c.name);
    return {
      phase: 'Running',
      hostIP: this.opts.nodeIP ?? '127.0.0.1',
      podIP: vm.ip,
      podIPs: [{ ip: vm.ip }],
      startTime: t.startTime ? new Date(t.startTime) : now,
      conditions: [
        cond('PodScheduled', true),
        cond('Initialized', true),
        cond('Ready', ready),
        cond('ContainersReady', ready),
      ],
      containerStatuses: (names.length ? names : [AGENT_CONTAINER_NAME]).map((name) => ({
        name,
        image: t.pod.spec?.containers?.find((c) => c.name === name)?.image ?? '',
        imageID: '',
        containerID: `cocoon://${vm.id}`,
        ready,
        started: true,
        restartCount: 0,
        state: { running: { startedAt: new Date(vm.startedAt) } },
      })),
    };
  }

  /** The parts of a status the simulator controls, for drift comparison. */
  private static statusSig(s: V1PodStatus | undefined): string {
    if (!s) return '';
    const ready = s.conditions?.find((c) => c.type === 'Ready')?.status ?? '';
    const containers = (s.containerStatuses ?? []).map(
      (c) => `${c.name}:${c.ready}:${c.state?.running ? 'run' : c.state?.terminated ? 'term' : 'wait'}`,
    );
    return JSON.stringify([s.phase ?? '', s.reason ?? '', s.podIP ?? '', ready, containers]);
  }

  /**
   * Writes the model's status when it changed since the last write, or when the pod's status drifted
   * from it (rate-limited). `force` writes regardless. Throws Superseded for a replaced incarnation.
   */
  private async syncStatus(t: Tracked, force = false): Promise<void> {
    const desired = this.desiredStatus(t);
    if (!desired) return;
    const sig = VkSimulator.statusSig(desired);
    const drifted = VkSimulator.statusSig(t.pod.status) !== sig;
    const changed = sig !== t.lastStatusSig;
    if (!force && !changed && !(drifted && Date.now() - t.lastStatusAt > STATUS_DRIFT_REWRITE_MS)) return;
    const body: Record<string, unknown> = { ...desired, reason: null, message: null };
    if (desired.phase === 'Pending') {
      Object.assign(body, { conditions: null, containerStatuses: null, podIP: null, podIPs: null });
    }
    await this.writeStatus(t, body, sig);
  }

  private async writeTerminalStatus(
    t: Tracked,
    phase: 'Succeeded' | 'Failed',
    exitCode: number,
    reason: string,
    message: string,
  ): Promise<void> {
    const names = (t.pod.spec?.containers ?? []).map((c) => c.name);
    const now = new Date();
    const startedAt = t.startTime ? new Date(t.startTime) : now;
    await this.writeStatus(t, {
      phase,
      reason,
      message: truncateBytes(message, EVENT_MESSAGE_MAX_BYTES),
      conditions: [
        { type: 'Ready', status: 'False', lastTransitionTime: now },
        { type: 'ContainersReady', status: 'False', lastTransitionTime: now },
      ],
      containerStatuses: (names.length ? names : [AGENT_CONTAINER_NAME]).map((name) => ({
        name,
        image: t.pod.spec?.containers?.find((c) => c.name === name)?.image ?? '',
        imageID: '',
        ready: false,
        started: false,
        restartCount: 0,
        state: { terminated: { exitCode, reason, message, startedAt, finishedAt: now } },
      })),
    });
  }

  /** uid-guarded merge patch to `/status`. */
  private async writeStatus(t: Tracked, status: object, sig?: string): Promise<void> {
    try {
      await this.core.patchNamespacedPodStatus(
        { name: t.name, namespace: t.namespace, body: { metadata: { uid: t.uid }, status } },
        mergePatch,
      );
    } catch (err) {
      if (isSupersededCode(statusCodeOf(err))) throw new Superseded(errMessage(err));
      throw err;
    }
    t.lastStatusSig = sig ?? VkSimulator.statusSig(status as V1PodStatus);
    t.lastStatusAt = Date.now();
  }

  // ---------------------------------------------------------------- helpers

  /** Records a VM as running on this node, and in the log of every VM brought up (the newest 1000). */
  private addVM(vm: SimVM): void {
    this.vms.set(vm.name, vm);
    this.started.push({ ...vm });
    if (this.started.length > 1000) this.started.shift();
  }

  private newVM(t: Tracked, name: string, source: string, id?: string, ip?: string): SimVM {
    return {
      id: id || `sim-${randomBytes(4).toString('hex')}`,
      name,
      ip: ip || this.nextIP(),
      pod: t.key,
      podUID: t.uid,
      startedAt: nowRFC3339(),
      source,
    };
  }

  private nextIP(): string {
    const n = this.ipCounter++;
    return `10.88.${Math.floor(n / 254) % 256}.${(n % 254) + 1}`;
  }

  private newSnapshotId(): string {
    return `snap-${randomBytes(8).toString('hex')}`;
  }

  /** core/v1 Event on the pod, source vk-cocoon. Fire and forget. */
  private event(t: Tracked, type: 'Normal' | 'Warning', reason: string, message: string): void {
    const now = new Date();
    this.core
      .createNamespacedEvent({
        namespace: t.namespace,
        body: {
          metadata: { name: `${t.name}.${randomBytes(8).toString('hex')}`, namespace: t.namespace },
          involvedObject: { apiVersion: 'v1', kind: 'Pod', name: t.name, namespace: t.namespace, uid: t.uid },
          reason,
          message: truncateBytes(message, EVENT_MESSAGE_MAX_BYTES),
          type,
          source: { component: VK_EVENT_SOURCE, host: this.nodeName },
          reportingComponent: VK_EVENT_SOURCE,
          reportingInstance: this.nodeName,
          firstTimestamp: now,
          lastTimestamp: now,
          count: 1,
        },
      })
      .catch((err) => this.log('debug', 'event write failed', { pod: t.key, reason, err: errMessage(err) }));
  }
}

/** virtual-kubelet's message on containers it marks terminated after DeletePod. */
const CONTAINER_TERMINATED_MESSAGE =
  'Container was terminated. The exit code may not reflect the real exit code';

export type { FaultPoint };
