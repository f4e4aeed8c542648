/**
 * The benchmark's world in the real apiserver and registry: a fresh namespace per run, pods already in the
 * state vk-cocoon reports at the end of a round, `:hibernate` snapshot tags in the real registry, the
 * CocoonHibernation CRs, a phase tracker fed by a watch, and cleanup (including the namespace, which the
 * local stack has no controller to finalize).
 *
 * vk-cocoon's part is pre-played: every pod already carries `hibernate=true` and
 * `lifecycle-state=hibernated` (the hibernate gate of docs/hibernation.md#hibernate is open) and, with
 * `running: true`, a running container and a VM id (the wake gate of docs/hibernation.md#wake is open too).
 * The pods are unbound and select the node pool `bench-none`, which no node has, so the simulator never
 * touches them.
 *
 * CocoonSets are the exception: their pods are built and created by the operator itself, so nothing can
 * be pre-played. They select the simulator's pool (`default`) and the stack's vk-cocoon simulator runs
 * them exactly as it runs any pod (bind, VM id and IP, lifecycle annotations, Running/Ready status); the
 * sets use `mode: run` (no base image needed) and `snapshotPolicy: never` (no `:latest` push on delete).
 */
import { randomBytes } from 'node:crypto';
import type { V1Pod } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import {
  Annotations,
  GROUP,
  KIND_COCOONHIBERNATION,
  KIND_COCOONSET,
  Labels,
  LifecycleStates,
  PLURAL_COCOONHIBERNATIONS,
  PLURAL_COCOONSETS,
  SnapshotArtifact,
  Tags,
  VERSION,
} from '../../src/api/keys.js';
import type {
  CocoonHibernation,
  CocoonSet,
  HibernationDesire,
  HibernationPhase,
} from '../../src/api/types.js';
import { type KubeClients, mergePatch, statusCodeOf } from '../../src/kube/client.js';
import { Informer } from '../../src/watcher/informer.js';
import { cocoonSetSource, hibernationSource } from '../../src/watcher/kube-source.js';
import { OciClient } from '../../test/vksim/oci.js';
import { pool } from './stats.js';

/** Node pool label value no node carries (keeps the simulator away from the benchmark's pods). */
export const UNMATCHED_POOL = 'bench-none';
/** Parallel setup/teardown requests. */
const SETUP_PARALLELISM = 16;

const crApi = (namespace: string) => ({
  group: GROUP,
  version: VERSION,
  namespace,
  plural: PLURAL_COCOONHIBERNATIONS,
});

const csApi = (namespace: string) => ({
  group: GROUP,
  version: VERSION,
  namespace,
  plural: PLURAL_COCOONSETS,
});

/** Node pool of the stack's simulator (VKSIM_POOL): CocoonSet pods land there. */
export const SIMULATOR_POOL = 'default';

/** A CocoonSet as last seen by the set tracker. */
interface SeenSet {
  phase: string;
  ready: number;
  desired: number;
  observedGeneration: number;
  generation: number;
}

/** A CR's phase as last seen by the tracker, with the local time it was first seen at that generation. */
interface Seen {
  phase: string;
  observedGeneration: number;
  generation: number;
  at: number;
}

/** See the module comment. */
export class BenchWorld {
  readonly pods: string[] = [];
  private readonly oci: OciClient;
  private tracker?: Informer<CocoonHibernation & { metadata: { name?: string } }>;
  private setTracker?: Informer<CocoonSet & { metadata: { name?: string } }>;
  /** CocoonSets created by {@link createCocoonSets}, by name. */
  readonly sets: string[] = [];
  private readonly seenSets = new Map<string, SeenSet>();
  /** Local time of the last change of any CocoonSet's status the set tracker saw. */
  lastSetChangeAt = Date.now();
  private readonly seen = new Map<string, Seen>();
  private readonly waiters = new Set<() => void>();
  /** Local time of the last phase/observedGeneration change the tracker saw. */
  lastChangeAt = Date.now();

  private constructor(
    readonly kube: KubeClients,
    readonly namespace: string,
    registry: string,
    private readonly log: Logger,
  ) {
    this.oci = new OciClient(registry);
  }

  /** Creates a fresh namespace `<prefix>-<random>`. */
  static async create(kube: KubeClients, registry: string, prefix: string, log: Logger): Promise<BenchWorld> {
    const ns = `${prefix}-${randomBytes(4).toString('hex')}`;
    await kube.core.createNamespace({
      body: { metadata: { name: ns, labels: { 'cocoonstack.io/bench': 'true' } } },
    });
    return new BenchWorld(kube, ns, registry, log);
  }

  /** Pod name of VM `i`. */
  static podName(i: number): string {
    return `vm-${String(i).padStart(4, '0')}`;
  }

  /** The VM name (and registry repository) the pod's `vm.cocoonstack.io/name` annotation carries. */
  vmName(pod: string): string {
    return `vk-${this.namespace}-${pod}`;
  }

  /**
   * Creates `n` pods in the vk-reported hibernated state (see the module comment); with `running`, also
   * a running container status and a VM id, so a wake completes without vk-cocoon acting. Names continue
   * after the pods this world already made.
   */
  async createPods(n: number, opts: { running?: boolean } = {}): Promise<string[]> {
    const first = this.pods.length;
    const names = Array.from({ length: n }, (_, i) => BenchWorld.podName(first + i));
    await pool(names, SETUP_PARALLELISM, async (name) => {
      const annotations: Record<string, string> = {
        [Annotations.vmName]: this.vmName(name),
        [Annotations.managed]: 'true',
        [Annotations.hibernate]: 'true',
        [Annotations.lifecycleState]: LifecycleStates.hibernated,
      };
      if (opts.running) annotations[Annotations.vmID] = `vmid-${randomBytes(4).toString('hex')}`;
      const body: V1Pod = {
        metadata: { name, namespace: this.namespace, annotations },
        spec: {
          nodeSelector: { [Labels.nodePool]: UNMATCHED_POOL },
          containers: [{ name: 'vm', image: 'example.invalid/bench:latest' }],
        },
      };
      await this.kube.core.createNamespacedPod({ namespace: this.namespace, body });
      if (opts.running) {
        const now = new Date();
        await this.kube.core.patchNamespacedPodStatus(
          {
            name,
            namespace: this.namespace,
            body: {
              status: {
                phase: 'Running',
                containerStatuses: [
                  {
                    name: 'vm',
                    image: 'example.invalid/bench:latest',
                    imageID: '',
                    ready: true,
                    restartCount: 0,
                    state: { running: { startedAt: now } },
                  },
                ],
              },
            },
          },
          mergePatch,
        );
      }
    });
    this.pods.push(...names);
    return names;
  }

  /**
   * Pushes the `:hibernate` snapshot artifact of each pod's VM to the real registry (deterministic content
   * per VM, so a re-push after a wake deleted the tag only re-PUTs the manifest).
   */
  async pushHibernateTags(pods: readonly string[]): Promise<void> {
    await pool(pods, SETUP_PARALLELISM, (pod) => this.pushHibernateTag(pod));
  }

  /** See pushHibernateTags. */
  async pushHibernateTag(pod: string): Promise<void> {
    const repo = this.vmName(pod);
    const layer = Buffer.from(JSON.stringify({ vm: repo, bench: true }));
    const layerDesc = await this.oci.putBlob(repo, layer, SnapshotArtifact.vmStateMediaType);
    const created = '2026-01-01T00:00:00Z';
    const config = Buffer.from(
      JSON.stringify({
        schemaVersion: 'v1',
        snapshotId: `bench-${repo}`,
        image: 'example.invalid/bench:latest',
        hypervisor: 'cloud-hypervisor',
        files: { 'state.json': { mode: 0o644, size: layer.byteLength } },
        createdAt: created,
      }),
    );
    const configDesc = await this.oci.putBlob(repo, config, SnapshotArtifact.configMediaType);
    const manifest = {
      schemaVersion: 2,
      mediaType: SnapshotArtifact.manifestMediaType,
      artifactType: SnapshotArtifact.artifactType,
      config: configDesc,
      layers: [{ ...layerDesc, annotations: { [SnapshotArtifact.annotationTitle]: 'state.json' } }],
      annotations: {
        [SnapshotArtifact.annotationCreated]: created,
        [SnapshotArtifact.annotationBaseImage]: 'example.invalid/bench:latest',
        [SnapshotArtifact.annotationFromNode]: 'bench',
      },
    };
    await this.oci.putManifest(
      repo,
      Tags.hibernate,
      JSON.stringify(manifest),
      SnapshotArtifact.manifestMediaType,
    );
  }

  /** Whether the pod's VM has its `:hibernate` tag in the registry (asked of the registry directly). */
  hasHibernateTag(pod: string): Promise<boolean> {
    return this.oci.hasManifest(this.vmName(pod), Tags.hibernate);
  }

  /** CR name targeting `pod`. */
  static crName(pod: string): string {
    return `h-${pod}`;
  }

  /**
   * Creates one CocoonHibernation per pod with `desire`, at most `parallel` requests in flight. Resolves
   * with each create's local start time (ms) in pod order.
   */
  async createCRs(pods: readonly string[], desire: HibernationDesire, parallel: number): Promise<number[]> {
    return pool(pods, parallel, async (pod) => {
      const at = Date.now();
      const body: CocoonHibernation = {
        apiVersion: `${GROUP}/${VERSION}`,
        kind: KIND_COCOONHIBERNATION,
        metadata: { name: BenchWorld.crName(pod), namespace: this.namespace },
        spec: { podRef: { name: pod }, desire },
      };
      await this.kube.custom.createNamespacedCustomObject({ ...crApi(this.namespace), body });
      return at;
    });
  }

  /** Merge-patches a CR's desire; resolves with the new metadata.generation. */
  async setDesire(pod: string, desire: HibernationDesire): Promise<number> {
    const cr = (await this.kube.custom.patchNamespacedCustomObject(
      { ...crApi(this.namespace), name: BenchWorld.crName(pod), body: { spec: { desire } } },
      mergePatch,
    )) as CocoonHibernation;
    return cr.metadata.generation ?? 0;
  }

  /** Starts the watch that tracks every CR's phase (call before creating CRs). */
  async track(): Promise<void> {
    const inf = new Informer<CocoonHibernation & { metadata: { name?: string } }>({
      name: 'bench-tracker',
      source: hibernationSource(this.kube, this.namespace) as never,
      log: this.log,
    });
    const onObj = (cr: CocoonHibernation) => {
      const name = cr.metadata.name ?? '';
      const phase = cr.status?.phase ?? '';
      const observedGeneration = cr.status?.observedGeneration ?? 0;
      const generation = cr.metadata.generation ?? 0;
      const prev = this.seen.get(name);
      if (prev && prev.phase === phase && prev.observedGeneration === observedGeneration) return;
      this.seen.set(name, { phase, observedGeneration, generation, at: Date.now() });
      this.lastChangeAt = Date.now();
      for (const w of this.waiters) w();
    };
    inf.on('add', onObj);
    inf.on('update', onObj);
    inf.start();
    await inf.waitForSync();
    this.tracker = inf;
  }

  /**
   * Waits until every CR of `pods` shows `phase` with status.observedGeneration ≥ `minGeneration` (per
   * pod, default 1). Resolves with the local time each was first seen so; rejects after `timeoutMs` with
   * how many got there.
   */
  async waitPhase(
    pods: readonly string[],
    phase: HibernationPhase,
    timeoutMs: number,
    minGeneration: (pod: string) => number = () => 1,
  ): Promise<number[]> {
    const done = () =>
      pods.every((p) => {
        const s = this.seen.get(BenchWorld.crName(p));
        return s?.phase === phase && s.observedGeneration >= minGeneration(p);
      });
    if (!done()) {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => {
          this.waiters.delete(check);
          const ok = pods.filter((p) => this.seen.get(BenchWorld.crName(p))?.phase === phase).length;
          const phases = new Map<string, number>();
          for (const p of pods) {
            const ph = this.seen.get(BenchWorld.crName(p))?.phase || '(none)';
            phases.set(ph, (phases.get(ph) ?? 0) + 1);
          }
          reject(
            new Error(
              `timed out after ${timeoutMs} ms: ${ok}/${pods.length} CRs ${phase} (phases: ${JSON.stringify(Object.fromEntries(phases))})`,
            ),
          );
        }, timeoutMs);
        const check = () => {
          if (!done()) return;
          clearTimeout(timer);
          this.waiters.delete(check);
          resolve();
        };
        this.waiters.add(check);
      });
    }
    return pods.map((p) => this.seen.get(BenchWorld.crName(p))!.at);
  }

  /** The pod's CR as the API holds it now: desire, phase, observed generation, resource version. */
  async readCR(
    pod: string,
  ): Promise<{ desire?: string; phase?: string; observedGeneration?: number; resourceVersion?: string }> {
    const cr = (await this.kube.custom.getNamespacedCustomObject({
      ...crApi(this.namespace),
      name: BenchWorld.crName(pod),
    })) as CocoonHibernation;
    return {
      desire: cr.spec?.desire,
      phase: cr.status?.phase,
      observedGeneration: cr.status?.observedGeneration,
      resourceVersion: cr.metadata.resourceVersion,
    };
  }

  /** Pods whose CR is not yet in `phase` at generation ≥ minGeneration(pod). */
  notYet(pods: readonly string[], phase: HibernationPhase, minGeneration: (pod: string) => number): string[] {
    return pods.filter((p) => {
      const s = this.seen.get(BenchWorld.crName(p));
      return !(s?.phase === phase && s.observedGeneration >= minGeneration(p));
    });
  }

  /** Current phase of the pod's CR as last seen by the tracker. */
  phaseOf(pod: string): string | undefined {
    return this.seen.get(BenchWorld.crName(pod))?.phase;
  }

  /** Name of CocoonSet `i`. */
  static setName(i: number): string {
    return `cs-${String(i).padStart(3, '0')}`;
  }

  /**
   * Creates `n` small CocoonSets (a main agent and `subAgents` sub-agents, `mode: run`, on the
   * simulator's pool, `snapshotPolicy: never`), at most `parallel` requests in flight. The operator
   * builds their pods; the simulator runs them (module comment).
   */
  async createCocoonSets(n: number, opts: { subAgents: number; parallel?: number }): Promise<string[]> {
    const names = Array.from({ length: n }, (_, i) => BenchWorld.setName(i));
    await pool(names, opts.parallel ?? SETUP_PARALLELISM, async (name) => {
      const body: CocoonSet = {
        apiVersion: `${GROUP}/${VERSION}`,
        kind: KIND_COCOONSET,
        metadata: { name, namespace: this.namespace },
        spec: {
          nodePool: SIMULATOR_POOL,
          snapshotPolicy: 'never',
          agent: {
            replicas: opts.subAgents,
            image: 'example.invalid/bench-agent:latest',
            mode: 'run',
            os: 'linux',
            connType: 'ssh',
          },
        },
      };
      await this.kube.custom.createNamespacedCustomObject({ ...csApi(this.namespace), body });
    });
    this.sets.push(...names);
    return names;
  }

  /** Starts the watch that tracks every CocoonSet's status roll-up (call before creating sets). */
  async trackCocoonSets(): Promise<void> {
    const inf = new Informer<CocoonSet & { metadata: { name?: string } }>({
      name: 'bench-set-tracker',
      source: cocoonSetSource(this.kube, this.namespace) as never,
      log: this.log,
    });
    const onObj = (cs: CocoonSet) => {
      const next: SeenSet = {
        phase: cs.status?.phase ?? '',
        ready: cs.status?.readyAgents ?? 0,
        desired: cs.status?.desiredAgents ?? 0,
        observedGeneration: cs.status?.observedGeneration ?? 0,
        generation: cs.metadata.generation ?? 0,
      };
      const name = cs.metadata.name ?? '';
      if (JSON.stringify(this.seenSets.get(name)) === JSON.stringify(next)) return;
      this.seenSets.set(name, next);
      this.lastSetChangeAt = Date.now();
    };
    inf.on('add', onObj);
    inf.on('update', onObj);
    inf.start();
    await inf.waitForSync();
    this.setTracker = inf;
  }

  /** Sets not yet steady: phase Running, every agent ready, status written for the current generation. */
  unsteadySets(): string[] {
    return this.sets.filter((name) => {
      const s = this.seenSets.get(name);
      return !(
        s &&
        s.phase === 'Running' &&
        s.desired > 0 &&
        s.ready === s.desired &&
        s.observedGeneration >= s.generation
      );
    });
  }

  /**
   * Waits until every created CocoonSet is steady ({@link unsteadySets} empty). Polls the tracker; rejects
   * after `timeoutMs` naming how many are not and their phases.
   */
  async waitCocoonSetsSteady(timeoutMs: number): Promise<void> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const left = this.unsteadySets();
      if (left.length === 0) return;
      if (Date.now() > end) {
        const phases = new Map<string, number>();
        for (const n of left) {
          const s = this.seenSets.get(n);
          const k = s ? `${s.phase || '(none)'} ${s.ready}/${s.desired}` : '(not seen)';
          phases.set(k, (phases.get(k) ?? 0) + 1);
        }
        throw new Error(
          `timed out after ${timeoutMs} ms: ${left.length}/${this.sets.length} CocoonSets not steady (${JSON.stringify(Object.fromEntries(phases))})`,
        );
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  /**
   * Removes everything the run created: CocoonSets and CRs (finalizers dropped first, so no operator is
   * needed), Events, pods (the simulator tears down the VMs of the sets' pods), the `:hibernate` tags,
   * and the namespace (finalized by hand: the stack has no namespace controller). Best effort; failures
   * are logged.
   */
  async cleanup(): Promise<void> {
    await this.tracker?.stop();
    await this.setTracker?.stop();
    const ns = this.namespace;
    const warn = (what: string) => (err: unknown) => {
      if (statusCodeOf(err) !== 404) this.log.warn({ err: String(err), ns }, `cleanup: ${what}`);
    };
    const sets = (await this.kube.custom
      .listNamespacedCustomObject(csApi(ns))
      .catch(() => ({ items: [] }))) as { items: CocoonSet[] };
    await pool(sets.items, SETUP_PARALLELISM, async (cs) => {
      const name = cs.metadata.name!;
      if ((cs.metadata.finalizers ?? []).length) {
        await this.kube.custom
          .patchNamespacedCustomObject(
            { ...csApi(ns), name, body: { metadata: { finalizers: null } } },
            mergePatch,
          )
          .catch(warn('drop CocoonSet finalizers'));
      }
      await this.kube.custom
        .deleteNamespacedCustomObject({ ...csApi(ns), name })
        .catch(warn('delete CocoonSet'));
    });
    const crs = (await this.kube.custom
      .listNamespacedCustomObject(crApi(ns))
      .catch(() => ({ items: [] }))) as {
      items: CocoonHibernation[];
    };
    await pool(crs.items, SETUP_PARALLELISM, async (cr) => {
      const name = cr.metadata.name!;
      if ((cr.metadata.finalizers ?? []).length) {
        await this.kube.custom
          .patchNamespacedCustomObject(
            { ...crApi(ns), name, body: { metadata: { finalizers: null } } },
            mergePatch,
          )
          .catch(warn('drop finalizers'));
      }
      await this.kube.custom.deleteNamespacedCustomObject({ ...crApi(ns), name }).catch(warn('delete CR'));
    });
    await this.kube.core.deleteCollectionNamespacedEvent({ namespace: ns }).catch(warn('delete events'));
    await this.kube.core
      .deleteCollectionNamespacedPod({ namespace: ns, gracePeriodSeconds: 0 })
      .catch(warn('delete pods'));
    await pool(this.pods, SETUP_PARALLELISM, (pod) =>
      this.oci.deleteManifest(this.vmName(pod), Tags.hibernate).catch(warn('delete tag')),
    );
    await this.kube.core.deleteNamespace({ name: ns }).catch(warn('delete namespace'));
    await this.kube.core
      .replaceNamespaceFinalize({ name: ns, body: { metadata: { name: ns }, spec: { finalizers: [] } } })
      .catch(warn('finalize namespace'));
  }
}
