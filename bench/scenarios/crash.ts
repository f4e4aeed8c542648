/**
 * Crash test: the real operator process (`src/worker.ts`, a child process) is SIGKILLed at a random point
 * of a CocoonHibernation transition, started again, and the world must converge to the transition's end
 * state with no snapshot lost and exactly one completion Event. `npm run bench -- --only crash` runs K
 * trials; test/e2e/crash.test.ts runs a few with a fixed seed, plus the "kill during a registry call" case.
 *
 * One trial, on a fresh pod the stack's vk-cocoon simulator runs (so vk-cocoon's part really happens, also
 * while the operator is dead):
 * 1. preparation, operator alive: the VM runs; for `wake` and the deletions its CR(s) are `Hibernated`;
 * 2. the trigger: `hibernate` creates a CR with desire Hibernate; `wake` sets desire Wake; `delete` deletes
 *    the only CR (its `:hibernate` tag must be garbage-collected); `delete-held` deletes one of two CRs on
 *    the pod (the other still holds the VM, so the tag must stay);
 * 3. the kill point, one of: `delay` (a uniform delay after the trigger), `change` (the k-th change of
 *    the trial's CRs or pod seen by a watch: each is a Kubernetes write of the operator or the simulator),
 *    `registry` (the operator's first registry request for this VM after the trigger is parked at the
 *    registry proxy, the operator is killed while it waits, and the request is then forwarded or dropped
 *    at random). A point the transition never reaches kills the operator once it has converged;
 * 4. SIGKILL, an idle gap, a new operator process; the time from its `/readyz` to convergence is measured;
 * 5. convergence: phase and observedGeneration, the pod's hibernate annotation, the tag present or absent
 *    as the end state needs (asked of the real registry), the CR gone for deletions;
 * 6. after a resync barrier on the VM workflow, the operator's Events on each CR are counted: one
 *    `Hibernated` per hibernate and one `WokenActive` per wake, exactly.
 *
 * "Lost": the proxy holds every DELETE of a `:hibernate` tag on arrival, reads the world from the API
 * (fresh, not a cache) and records a violation when a live CocoonHibernation still needs the snapshot (one
 * with desire Hibernate targets the pod, or one with desire Wake does while its VM is not running yet);
 * a required tag absent at the end counts too.
 *
 * Bounded: every wait has a deadline, and `budgetMs` stops starting trials after that much time.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { V1Pod } from '@kubernetes/client-node';
import type { Client } from '@temporalio/client';
import { bundleWorkflows } from '../../scripts/bundle-workflows.js';
import { vmWorkflowId } from '../../src/api/ids.js';
import { Annotations, EventReasons, LifecycleStates, Tags } from '../../src/api/keys.js';
import { containerRunning, lifecycleOf, vmIDOf, vmNameForPod } from '../../src/api/pod.js';
import type { CocoonHibernation } from '../../src/api/types.js';
import { type KubeClients, statusCodeOf } from '../../src/kube/client.js';
import {
  dropTag,
  Hibernations,
  headTag,
  NamespaceRecorder,
  occurrences,
  operatorEvents,
  settle,
} from '../../test/e2e/hibernation-harness.js';
import {
  cleanEnv,
  type OperatorProcess,
  stackEnv as operatorStackEnv,
  startReadyOperator,
  stopOperator,
} from '../../test/e2e/operator-process.js';
import type { StackEnv } from '../../test/e2e/stack-harness.js';
import { simPod } from '../../test/support/builders.js';
import { freePort } from '../../test/support/ports.js';
import { RegistryProxy } from '../../test/support/registry-proxy.js';
import { waitFor } from '../../test/support/wait.js';
import { VkSimClient } from '../../test/vksim/client.js';
import { median } from '../lib/stats.js';

/** What a trial does to its VM. */
export type CrashScenario = 'hibernate' | 'wake' | 'delete' | 'delete-held';
export const CRASH_SCENARIOS: readonly CrashScenario[] = ['hibernate', 'wake', 'delete', 'delete-held'];

/** Where the operator is killed (see the module comment). */
export type KillPoint =
  | { kind: 'delay'; ms: number }
  | { kind: 'change'; k: number }
  | { kind: 'registry'; verdict: 'forward' | 'drop' };

/** One trial's plan: scenario, kill point and the gap between the kill and the restart (ms). */
export interface TrialPlan {
  scenario: CrashScenario;
  point: KillPoint;
  downMs: number;
}

/** What one trial found. Times in ms. */
export interface TrialResult {
  index: number;
  plan: TrialPlan;
  pod: string;
  /** False when the kill came after the world had already converged (the point was never reached). */
  killedMidTransition: boolean;
  converged: boolean;
  /** Snapshot-loss findings (illegitimate tag DELETEs, a required tag missing at the end). */
  lost: string[];
  /** Completion Events beyond one per transition. */
  duplicateEvents: number;
  /** Completion Events missing (a transition with none). */
  missingEvents: number;
  /** The registry request parked for a `registry` kill point (`HEAD /v2/<repo>/manifests/hibernate`). */
  parkedRequest?: string;
  /** SIGKILL → the new operator's /readyz answered 200 (includes `downMs`). */
  restartMs: number;
  /** The new operator's readiness → convergence; NaN when it did not converge. */
  convergeMs: number;
  /** Why the trial is not clean (a timeout message, the last observation), if it is not. */
  problem?: string;
}

/** Totals of a crash run (the table of the issue). */
export interface CrashResult {
  seed: number;
  trials: TrialResult[];
  converged: number;
  lost: number;
  duplicateEvents: number;
  missingEvents: number;
  killedMidTransition: number;
  convergeMedianMs: number;
  convergeMaxMs: number;
  restartMedianMs: number;
}

/** The handles a crash run needs (a BenchEnv has them all). */
export interface CrashDeps {
  stack: StackEnv;
  admin: KubeClients;
  client: Client;
}

/** Run-wide options. */
export interface CrashOptions {
  trials: number;
  seed: number;
  scenarios?: readonly CrashScenario[];
  /** Stop starting new trials after this much time (ms). */
  budgetMs?: number;
  progress?: (msg: string) => void;
}

/** Deadline of a trial's preparation (a running VM; a hibernate with the operator alive), ms. */
const PREPARE_MS = 60_000;
/** Deadline for convergence after the restart, ms: beyond the 45 s registry activity timeout, under the 3 min deadline. */
const CONVERGE_MS = 150_000;
/** Deadline for a new operator's /readyz, ms. */
const READY_MS = 120_000;
/**
 * Upper bound of a `delay` kill point per scenario, ms: about the trigger → convergence time of a clean
 * transition with the simulator on this machine (hibernate and wake 0.3–0.7 s plus the wake's WAKE_PULL_MS, a deletion 0.2–0.4 s), so
 * most delays land inside it; a later kill is still a valid trial, counted as "killed after convergence".
 */
const MAX_DELAY_MS: Record<CrashScenario, number> = {
  hibernate: 900,
  wake: 900 + 1_000,
  delete: 450,
  'delete-held': 450,
};
/** How long the simulator's wake pulls the snapshot in `wake` trials (a fault rule), ms. */
const WAKE_PULL_MS = 1_000;
/** Upper bound of the gap between the kill and the restart, ms (vk-cocoon's part goes on meanwhile). */
const MAX_DOWN_MS = 2_000;
/**
 * Changes (CR + pod versions) a transition makes before it converges, about: the `change` point picks k in
 * 1..this. A deletion's first is the trigger's own deletionTimestamp, its second the end.
 */
const CHANGES: Record<CrashScenario, number> = { hibernate: 6, wake: 4, delete: 1, 'delete-held': 1 };
/** A `change` or `registry` point not reached this long after convergence is given up (kill then), ms. */
const POINT_GRACE_MS = 1_000;

/**
 * A seeded PRNG (mulberry32): the same seed gives the same trial plans. Returns floats in [0, 1).
 */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A random trial plan from `rnd` (see {@link prng}). `delete-held` has no registry call to park. */
export function randomPlan(rnd: () => number, scenarios: readonly CrashScenario[]): TrialPlan {
  const scenario = scenarios[Math.floor(rnd() * scenarios.length)]!;
  const kinds: KillPoint['kind'][] =
    scenario === 'delete-held' ? ['delay', 'change'] : ['delay', 'change', 'registry'];
  const kind = kinds[Math.floor(rnd() * kinds.length)]!;
  let point: KillPoint;
  if (kind === 'delay') point = { kind, ms: Math.floor(rnd() * MAX_DELAY_MS[scenario]) };
  else if (kind === 'change') point = { kind, k: 1 + Math.floor(rnd() * CHANGES[scenario]) };
  else point = { kind, verdict: rnd() < 0.5 ? 'forward' : 'drop' };
  return { scenario, point, downMs: Math.floor(rnd() * MAX_DOWN_MS) };
}

/** A plan as one short line, e.g. `wake, kill at change 3, down 512 ms`. */
export function describePlan(p: TrialPlan): string {
  const at =
    p.point.kind === 'delay'
      ? `kill ${p.point.ms} ms after the trigger`
      : p.point.kind === 'change'
        ? `kill at change ${p.point.k}`
        : `kill while its registry call is parked, then ${p.point.verdict} it`;
  return `${p.scenario}, ${at}, down ${p.downMs} ms`;
}

/**
 * The rig: one namespace, the registry proxy the operator uses, a watch recorder, the simulator, and the
 * operator process (restarted at each kill). {@link CrashRig.trial} runs one plan.
 */
export class CrashRig {
  readonly namespace = `crash-${randomBytes(3).toString('hex')}`;
  private readonly taskQueue = `crash-${randomUUID()}`;
  private readonly crs: Hibernations;
  private readonly sim: VkSimClient;
  private readonly proxy: RegistryProxy;
  private rec?: NamespaceRecorder;
  private pool = '';
  private env: NodeJS.ProcessEnv = {};
  private op?: OperatorProcess;
  /** The pod whose registry requests a `registry` kill point parks next, and the hook it waits on. */
  private park?: { repo: string; arrived: (what: string) => void; verdict: Promise<'forward' | 'drop'> };
  /** Tag DELETEs a live CR still needed, by pod. */
  private readonly violations = new Map<string, string[]>();
  private readonly podsMade: string[] = [];
  /** Every operator process started, for the logs of a failing run. */
  readonly operators: OperatorProcess[] = [];

  constructor(private readonly deps: CrashDeps) {
    this.crs = new Hibernations(deps.admin, this.namespace);
    this.sim = new VkSimClient(deps.stack.vksimUrl);
    this.proxy = new RegistryProxy({ upstream: deps.stack.ociRegistry });
    this.proxy.intercept = (req) => this.intercept(req.method, req.path);
  }

  /** Creates the namespace, starts the proxy and the recorder, and the first operator (ready). */
  async start(): Promise<void> {
    await waitFor('simulator /healthz', async () => this.sim.healthy(), 30_000, { intervalMs: 250 });
    // A prebuilt workflow bundle keeps each restart short (the worker prefers it while newer than src/).
    await bundleWorkflows();
    ({ pool: this.pool } = await this.sim.state());
    await this.deps.admin.core.createNamespace({ body: { metadata: { name: this.namespace } } });
    this.rec = await NamespaceRecorder.start(this.deps.admin.kc, this.namespace);
    const proxied = await this.proxy.start();
    const [probePort, metricsPort] = [await freePort(), await freePort()];
    this.env = cleanEnv({
      ...operatorStackEnv(),
      OCI_REGISTRY: proxied,
      TEMPORAL_TASK_QUEUE: this.taskQueue,
      WATCH_NAMESPACE: this.namespace,
      LEADER_ELECT: 'false',
      PROBE_ADDR: `127.0.0.1:${probePort}`,
      METRICS_ADDR: `127.0.0.1:${metricsPort}`,
      OPERATOR_LOG_LEVEL: 'info',
    });
    await this.startOperator();
  }

  private async startOperator(): Promise<number> {
    const ports = {
      probePort: Number(this.env.PROBE_ADDR!.split(':')[1]),
      metricsPort: Number(this.env.METRICS_ADDR!.split(':')[1]),
      launcher: 'node' as const, // the pid is the operator itself, so SIGKILL really kills it
    };
    const p = await startReadyOperator(this.env, ports, READY_MS);
    this.op = p;
    this.operators.push(p);
    return Date.now();
  }

  /** See the module comment, "Lost"; also parks the request a `registry` kill point waits for. */
  private async intercept(method: string, path: string): Promise<'forward' | 'drop'> {
    const m = /^\/v2\/(.+)\/manifests\/([^/]+)$/.exec(path);
    if (!m) return 'forward';
    const repo = m[1]!;
    const ref = m[2]!;
    const pod = this.podsMade.find((p) => this.vmOf(p) === repo);
    if (method === 'DELETE' && ref === Tags.hibernate && pod) {
      const why = await this.tagStillNeeded(pod);
      if (why) {
        const list = this.violations.get(pod) ?? [];
        list.push(`DELETE ${repo}:${ref} while ${why}`);
        this.violations.set(pod, list);
      }
    }
    const park = this.park;
    if (park && park.repo === repo) {
      this.park = undefined;
      park.arrived(`${method} ${path}`);
      return park.verdict;
    }
    return 'forward';
  }

  /** Why the pod's `:hibernate` snapshot is still needed now (read from the API), or undefined. */
  private async tagStillNeeded(pod: string): Promise<string | undefined> {
    const live = (await this.crs.list()).filter(
      (cr) => cr.spec.podRef.name === pod && !cr.metadata.deletionTimestamp,
    );
    const hib = live.find((cr) => cr.spec.desire === 'Hibernate');
    if (hib) return `live CR ${hib.metadata.name} wants Hibernate`;
    if (live.length === 0) return undefined;
    const p = await this.readPod(pod);
    if (p && containerRunning(p) && vmIDOf(p) !== '') return undefined;
    return `live CR ${live[0]!.metadata.name} wants Wake and the VM is not running yet`;
  }

  private vmOf(pod: string): string {
    return vmNameForPod(this.namespace, pod);
  }

  private async readPod(name: string): Promise<V1Pod | undefined> {
    try {
      return await this.deps.admin.core.readNamespacedPod({ name, namespace: this.namespace });
    } catch (err) {
      if (statusCodeOf(err) === 404) return undefined;
      throw err;
    }
  }

  /** Creates a simulator pod and waits until its VM runs (container running, VM id, lifecycle ready). */
  private async runningVM(pod: string): Promise<void> {
    this.podsMade.push(pod);
    await this.deps.admin.core.createNamespacedPod({
      namespace: this.namespace,
      body: simPod({
        namespace: this.namespace,
        name: pod,
        vmName: this.vmOf(pod),
        pool: this.pool,
        app: 'hibernation-e2e',
      }),
    });
    await waitFor(
      `pod ${pod} running with a VM id`,
      async () => {
        const p = await this.readPod(pod);
        return (
          !!p && containerRunning(p) && vmIDOf(p) !== '' && lifecycleOf(p).state === LifecycleStates.ready
        );
      },
      PREPARE_MS,
    );
  }

  /** CR names of a trial's pod: `<pod>` and, for `delete-held`, the holder `<pod>-held`. */
  private crNames(pod: string, scenario: CrashScenario): string[] {
    return scenario === 'delete-held' ? [pod, `${pod}-held`] : [pod];
  }

  /** The trial's end state, or undefined when reached (checked against the API and the real registry). */
  private async notConverged(pod: string, scenario: CrashScenario): Promise<string | undefined> {
    const vm = this.vmOf(pod);
    const p = await this.readPod(pod);
    const ann = p?.metadata?.annotations?.[Annotations.hibernate];
    const tag = await headTag(this.deps.stack.ociRegistry, vm, Tags.hibernate);
    const done = (cr: CocoonHibernation | undefined, phase: string) =>
      cr?.status?.phase === phase && cr.status.observedGeneration === cr.metadata.generation;
    switch (scenario) {
      case 'hibernate': {
        const cr = await this.crs.get(pod);
        if (!done(cr, 'Hibernated')) return `CR phase ${cr?.status?.phase}`;
        if (ann !== 'true') return `pod hibernate annotation ${ann}`;
        return tag === 200 ? undefined : `tag HEAD ${tag}`;
      }
      case 'wake': {
        const cr = await this.crs.get(pod);
        if (!done(cr, 'Active')) return `CR phase ${cr?.status?.phase}`;
        if (ann !== undefined) return `pod hibernate annotation ${ann}`;
        if (!(containerRunning(p) && vmIDOf(p) !== '')) return 'VM not running';
        return tag === 404 ? undefined : `tag HEAD ${tag}`;
      }
      case 'delete': {
        if (await this.crs.get(pod)) return 'CR still there';
        if (ann !== 'true') return `pod hibernate annotation ${ann}`;
        return tag === 404 ? undefined : `tag HEAD ${tag}`;
      }
      case 'delete-held': {
        if (await this.crs.get(pod)) return 'deleted CR still there';
        const held = await this.crs.get(`${pod}-held`);
        if (!done(held, 'Hibernated')) return `holder CR phase ${held?.status?.phase}`;
        if (ann !== 'true') return `pod hibernate annotation ${ann}`;
        return tag === 200 ? undefined : `tag HEAD ${tag}`;
      }
    }
  }

  /** Versions of the trial's CRs and pod the recorder has seen so far. */
  private changes(pod: string, names: string[]): number {
    const rec = this.rec!;
    return rec.crs.filter((s) => names.includes(s.name)).length + rec.podHistory(pod).length;
  }

  /**
   * Runs one trial (see the module comment) on pod `c<index>`; never throws for a trial that goes wrong:
   * the result says what happened.
   */
  async trial(index: number, plan: TrialPlan): Promise<TrialResult> {
    const pod = `c${index}`;
    const names = this.crNames(pod, plan.scenario);
    const result: TrialResult = {
      index,
      plan,
      pod,
      killedMidTransition: false,
      converged: false,
      lost: [],
      duplicateEvents: 0,
      missingEvents: 0,
      restartMs: Number.NaN,
      convergeMs: Number.NaN,
    };
    // Settles a parked registry request; also in `finally`, so a trial that fails never leaves one parked.
    let release: ((v: 'forward' | 'drop') => void) | undefined;
    try {
      // 1. Preparation, operator alive (a previous trial whose restart failed left none).
      if (!this.op || this.op.child.exitCode !== null || this.op.child.signalCode !== null) {
        await this.startOperator();
      }
      await this.runningVM(pod);
      if (plan.scenario !== 'hibernate') {
        for (const n of names) await this.crs.create(n, pod, 'Hibernate');
        for (const n of names) await this.crs.waitPhase(n, 'Hibernated', PREPARE_MS);
      }
      if (plan.scenario === 'wake') {
        // vk-cocoon pulls the snapshot for seconds; the simulator would be back in milliseconds, too soon
        // for a tag DELETE issued before the VM runs to be told from a correct one.
        await this.sim.addFault({
          vm: `^${this.vmOf(pod)}$`,
          op: 'wake.pull.delay',
          delayMs: WAKE_PULL_MS,
          count: 1,
        });
      }
      // 3. Arm the kill point before the trigger.
      let parked: Promise<string> | undefined;
      if (plan.point.kind === 'registry') {
        const verdict = new Promise<'forward' | 'drop'>((r) => {
          release = r;
        });
        parked = new Promise<string>((arrived) => {
          this.park = { repo: this.vmOf(pod), arrived, verdict };
        });
        void parked.then((what) => {
          result.parkedRequest = what;
        });
      }
      const base = this.changes(pod, names);
      // 2. The trigger.
      const triggerAt = Date.now();
      if (plan.scenario === 'hibernate') await this.crs.create(pod, pod, 'Hibernate');
      else if (plan.scenario === 'wake') await this.crs.setDesire(pod, 'Wake');
      else await this.crs.delete(pod);
      await this.reachPoint(
        plan.point,
        triggerAt,
        parked,
        () => this.changes(pod, names) - base,
        async () => (await this.notConverged(pod, plan.scenario)) === undefined,
      );
      // 4. Kill, gap, restart. Whether the transition was still in flight is read after the kill (the
      // operator can no longer move it), so the check does not shift the kill point.
      const killedAt = Date.now();
      await stopOperator(this.op, 'SIGKILL');
      result.killedMidTransition = (await this.notConverged(pod, plan.scenario)) !== undefined;
      if (plan.point.kind === 'registry') {
        this.park = undefined;
        release?.(plan.point.verdict);
      }
      await new Promise((r) => setTimeout(r, plan.downMs));
      const readyAt = await this.startOperator();
      result.restartMs = readyAt - killedAt;
      // 5. Convergence.
      let last: string | undefined;
      await waitFor(
        `trial ${index} (${describePlan(plan)}) to converge`,
        async () => {
          last = await this.notConverged(pod, plan.scenario);
          return last === undefined;
        },
        CONVERGE_MS,
        { intervalMs: 100, describe: () => last },
      );
      result.convergeMs = Date.now() - readyAt;
      result.converged = true;
      // 6. Events, after the workflow has digested a resync (it completes once no CR targets the pod).
      if (plan.scenario !== 'delete') await settle(this.deps.client, vmWorkflowId(this.namespace, pod));
      const expected: [string, string, number][] = names.map((n) => [n, EventReasons.hibernated, 1]);
      if (plan.scenario === 'wake') expected.push([pod, EventReasons.wokenActive, 1]);
      for (const [cr, reason, want] of expected) {
        const got = occurrences(await operatorEvents(this.deps.admin, this.namespace, cr, reason));
        result.duplicateEvents += Math.max(0, got - want);
        result.missingEvents += Math.max(0, want - got);
      }
    } catch (err) {
      result.problem = (err as Error).message;
    } finally {
      this.park = undefined;
      release?.('forward');
    }
    result.lost.push(...(this.violations.get(pod) ?? []));
    if (!result.converged && (await this.requiredTagMissing(pod, plan.scenario))) {
      result.lost.push('the :hibernate tag of a hibernated VM that a live CR holds is gone');
    }
    await this.cleanTrial(pod, names);
    return result;
  }

  /**
   * A required snapshot gone: the scenario's end state needs the tag (`hibernate`, `delete-held`), vk-cocoon
   * reported the VM hibernated, and the registry has no `:hibernate` for it. Errors read as "not missing".
   */
  private async requiredTagMissing(pod: string, scenario: CrashScenario): Promise<boolean> {
    if (scenario !== 'hibernate' && scenario !== 'delete-held') return false;
    try {
      const p = await this.readPod(pod);
      if (lifecycleOf(p).state !== LifecycleStates.hibernated) return false;
      return (await headTag(this.deps.stack.ociRegistry, this.vmOf(pod), Tags.hibernate)) === 404;
    } catch {
      return false;
    }
  }

  /**
   * Waits for the kill point: the delay, the k-th change, or the parked registry request. A `change` or
   * `registry` point the transition never reaches ends POINT_GRACE_MS after `converged()` first holds.
   */
  private async reachPoint(
    point: KillPoint,
    triggerAt: number,
    parked: Promise<string> | undefined,
    changes: () => number,
    converged: () => Promise<boolean>,
  ): Promise<void> {
    if (point.kind === 'delay') {
      await new Promise((r) => setTimeout(r, Math.max(0, triggerAt + point.ms - Date.now())));
      return;
    }
    let reached = false;
    void parked?.then(() => {
      reached = true;
    });
    const deadline = Date.now() + CONVERGE_MS;
    let convergedAt: number | undefined;
    let lastCheck = 0;
    for (;;) {
      if (reached || (point.kind === 'change' && changes() >= point.k)) return;
      const now = Date.now();
      if (now > deadline || (convergedAt !== undefined && now - convergedAt > POINT_GRACE_MS)) return;
      if (convergedAt === undefined && now - lastCheck > 200) {
        lastCheck = now;
        if (await converged().catch(() => false)) convergedAt = Date.now();
      }
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /** Deletes the trial's CRs through the operator (bounded), then its pod and tags; errors are ignored. */
  private async cleanTrial(pod: string, names: string[]): Promise<void> {
    for (const n of names) await this.crs.delete(n).catch(() => undefined);
    for (const n of names) await this.crs.waitGone(n, 30_000).catch(() => this.crs.forceDelete(n));
    await this.deps.admin.core
      .deleteNamespacedPod({ name: pod, namespace: this.namespace, gracePeriodSeconds: 0 })
      .catch(() => undefined);
    await dropTag(this.deps.stack.ociRegistry, this.vmOf(pod), Tags.hibernate).catch(() => undefined);
    await dropTag(this.deps.stack.ociRegistry, this.vmOf(pod), 'latest').catch(() => undefined);
  }

  /** Stops the operator and the proxy, and removes what the run left (CRs, workflows, pods, namespace). */
  async stop(): Promise<void> {
    this.rec?.stop();
    await stopOperator(this.op, 'SIGTERM').catch(() => undefined);
    for (const pod of this.podsMade) {
      await this.deps.client.workflow
        .getHandle(vmWorkflowId(this.namespace, pod))
        .terminate('crash run teardown')
        .catch(() => undefined);
    }
    for (const cr of await this.crs.list().catch(() => [])) await this.crs.forceDelete(cr.metadata.name!);
    await this.deps.admin.core
      .deleteCollectionNamespacedPod({ namespace: this.namespace, gracePeriodSeconds: 0 })
      .catch(() => undefined);
    await this.deps.admin.core.deleteNamespace({ name: this.namespace }).catch(() => undefined);
    await this.proxy.stop();
  }
}

/** Totals over trial results (see {@link CrashResult}). */
export function summarizeCrash(seed: number, trials: TrialResult[]): CrashResult {
  const conv = trials.filter((t) => t.converged).map((t) => t.convergeMs);
  return {
    seed,
    trials,
    converged: trials.filter((t) => t.converged).length,
    lost: trials.filter((t) => t.lost.length > 0).length,
    duplicateEvents: trials.reduce((n, t) => n + t.duplicateEvents, 0),
    missingEvents: trials.reduce((n, t) => n + t.missingEvents, 0),
    killedMidTransition: trials.filter((t) => t.killedMidTransition).length,
    convergeMedianMs: median(conv),
    convergeMaxMs: conv.length ? Math.max(...conv) : Number.NaN,
    restartMedianMs: median(trials.map((t) => t.restartMs).filter((x) => !Number.isNaN(x))),
  };
}

/**
 * Runs `opts.trials` random trials (plans from `prng(opts.seed)`) on a started rig, numbered from
 * `firstIndex`; prints a line per trial through `progress`. Stops early (fewer trials) when `budgetMs` is
 * spent. Never throws for a failing trial (its result says why).
 */
export async function runTrials(rig: CrashRig, opts: CrashOptions, firstIndex = 0): Promise<TrialResult[]> {
  const rnd = prng(opts.seed);
  const started = Date.now();
  const trials: TrialResult[] = [];
  for (let i = 0; i < opts.trials; i++) {
    if (opts.budgetMs !== undefined && Date.now() - started > opts.budgetMs) {
      opts.progress?.(`crash: time budget spent after ${i} trials`);
      break;
    }
    const plan = randomPlan(rnd, opts.scenarios ?? CRASH_SCENARIOS);
    const t = await rig.trial(firstIndex + i, plan);
    trials.push(t);
    opts.progress?.(`crash ${i + 1}/${opts.trials}: ${describePlan(plan)} → ${describeTrial(t)}`);
  }
  return trials;
}

/** Whether a trial is clean: converged, nothing lost, exactly one completion Event per transition. */
export function clean(t: TrialResult): boolean {
  return t.converged && t.lost.length === 0 && t.duplicateEvents === 0 && t.missingEvents === 0;
}

/** A trial's outcome as one short line. */
export function describeTrial(t: TrialResult): string {
  const parts = [
    `restart ${t.restartMs} ms`,
    `converged ${Number.isNaN(t.convergeMs) ? 'never' : `${t.convergeMs} ms`} after ready`,
  ];
  if (t.parkedRequest) parts.push(`parked ${t.parkedRequest}`);
  if (!t.killedMidTransition) parts.push('killed after convergence');
  if (t.lost.length) parts.push(`LOST: ${t.lost.join('; ')}`);
  if (t.duplicateEvents) parts.push(`${t.duplicateEvents} duplicate events`);
  if (t.missingEvents) parts.push(`${t.missingEvents} missing events`);
  if (t.problem) parts.push(t.problem);
  return `${clean(t) ? 'ok' : 'NOT OK'} (${parts.join(', ')})`;
}

/** {@link runTrials} on a rig of its own (started and stopped here); resolves with the totals. */
export async function runCrash(deps: CrashDeps, opts: CrashOptions): Promise<CrashResult> {
  const rig = new CrashRig(deps);
  opts.progress?.(`crash: seed ${opts.seed}, ${opts.trials} trials, namespace ${rig.namespace}`);
  await rig.start();
  try {
    return summarizeCrash(opts.seed, await runTrials(rig, opts));
  } finally {
    await rig.stop();
  }
}
