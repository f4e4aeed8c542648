/**
 * Crash safety of the two CocoonSet flows that delete what a VM's state lives in (docs/cocoonset.md
 * "Seat release" and "Migration"): the operator process is SIGKILLed at seeded random points of each
 * transition and started again, and the set must converge without losing the main's `:hibernate`
 * snapshot.
 *
 * 1. release-wake: a `hibernatePolicy: release` set (main only) on a one-seat simulator node of its own,
 *    suspended (the main hibernated, its pod deleted once the tag is in, the node hint stashed) and
 *    un-suspended (`Waking`, a restore pod, the tag dropped once the restored VM runs), round after round.
 * 2. migration: a set pinned to node A of a two-node pool, moved A→B→A… by editing `spec.nodeName`
 *    (`Migrating`, the old main hibernated, deleted once the tag is in, a restore pod on the target, the tag
 *    dropped once the VM runs there).
 *
 * Same rig as test/e2e/suspend.test.ts: in-process vk-cocoon simulators on nodes of their own, the operator
 * process (`src/worker.ts`, launcher `node` so SIGKILL kills the operator itself) limited to this file's
 * namespace on its own task queue, a watch recorder of the namespace's pods and CocoonSets, and the
 * registry reached through a proxy that logs every request. Kill points: a random delay after the trigger
 * (or the last restart), or the k-th pod/set version the recorder sees (every one is a Kubernetes write of
 * the operator or the simulator); vk-cocoon's part goes on while the operator is down.
 *
 * "Tag lost" is checked where it would happen:
 * - every DELETE of `<vm>:hibernate` is parked at the proxy on arrival while the world is read fresh from
 *   the apiserver: the set and the main pod must show a restore pod running the restored VM (a VM id and a
 *   running container, restore-marked, not asked to hibernate; on the pin's node when pinned; the set
 *   un-suspended). A DELETE that finds otherwise ends the running wait at once (`untilConverged`). At the
 *   end each DELETE must belong to the restore pod the transition converged with, and the recorder's first
 *   version of that incarnation with a VM id and a running container must be older than the DELETE;
 * - the tag is in the registry whenever the set converged `Suspended`, and each DELETE lies in a wake or
 *   move window (none during a suspend);
 * - every deleted main was quiesced first: the version of the pod that carries its deletionTimestamp still
 *   has hibernate "true" and lifecycle `hibernated` (vk-cocoon reports `hibernated` only after the push,
 *   and no DELETE of the tag came before the restore was live, so the tag was in when the pod went);
 * - each wake or move brought the VM up exactly once, on the target, restored from its snapshot (the
 *   simulator's `started` log: `restore …<vm>`), and the pod runs that VM.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prng } from '../../bench/scenarios/crash.js';
import { cocoonSetWorkflowId, vmWorkflowId } from '../../src/api/ids.js';
import { Annotations, Labels, LifecycleStates, Tags } from '../../src/api/keys.js';
import { containerRunning, podReady, restoreFromHibernate, vmIDOf } from '../../src/api/pod.js';
import type { CocoonSet } from '../../src/api/types.js';
import { type KubeClients, statusCodeOf } from '../../src/kube/client.js';
import { waitFor } from '../support/wait.js';
import type { VkSimulator } from '../vksim/sim.js';
import type { CocoonSets } from './cocoonset-harness.js';
import { headTag, type NamespaceRecorder } from './hibernation-harness.js';
import { OperatorRig } from './operator-rig.js';

const rig = new OperatorRig('flows-crash');
const { ns, registryLog } = rig;
const CPU_CLASS = 'e2e-cascade-lake-v1';
/** Clone-mode agent image (seeded in the registry). */
const AGENT_IMAGE = 'flows-crash-e2e/agent:v1';

/** Bounds of the waits. Generous: a shared, loaded 2-core machine. */
const BRING_UP_MS = 150_000;
/** Convergence after an operator restart: past the activity heartbeat and sticky-queue timeouts. */
const CONVERGE_MS = 180_000;

/** The crash trials: fixed seed; release rounds (suspend + wake) and moves; kills per transition. */
const SEED = 20261203;
const RELEASE_ROUNDS = 3;
const MOVES = 5;
const KILLS_PER_TRANSITION = 2;
type Kind = 'suspend' | 'wake' | 'move';
/**
 * Upper bound of a `delay` kill point, ms after the trigger. Undisturbed on this stack a seat release takes
 * ~1.1–1.7 s (~17 pod/set versions), a wake ~0.8 s (~11), a move ~2.5 s to the tag drop and ~8 s to
 * `Running` (~24): the points fall mostly inside a transition. A later kill of the same transition counts
 * from the restart, within half the bounds (what is left of the transition by then is shorter).
 */
const MAX_DELAY_MS: Record<Kind, number> = { suspend: 1_500, wake: 1_000, move: 3_000 };
/** Upper bound of a `change` kill point: the k-th pod/set version after the trigger (halved likewise). */
const MAX_CHANGES: Record<Kind, number> = { suspend: 16, wake: 10, move: 22 };
/** Upper bound of the gap between the kill and the restart, ms (vk-cocoon's part goes on meanwhile). */
const MAX_DOWN_MS = 2_000;
/** A `change` point not reached this long after the transition reached its end state is given up. */
const POINT_GRACE_MS = 1_000;

let kube: KubeClients;
let sets: CocoonSets;
let rec: NamespaceRecorder;
/** The real registry (`host:port`); the operator uses a proxy in front of it. */
let registry: string;
const setsMade: string[] = [];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const mainOf = (set: string) => `${set}-0`;
const vmOf = (set: string) => `vk-${ns}-${mainOf(set)}`;
const live = (p: V1Pod | undefined) => p !== undefined && p.metadata?.deletionTimestamp == null;
const vmLive = (p: V1Pod | undefined) => vmIDOf(p) !== '' && containerRunning(p);
const hintOf = (cs: CocoonSet | undefined) => cs?.metadata.annotations?.[Annotations.hibernatedOnNode];
const atGeneration = (cs: CocoonSet | undefined, generation: number) =>
  cs?.metadata.generation === generation && cs.status?.observedGeneration === generation;

/** A simulator node of pool `pool` (the file's CPU class) holding at most `seats` pods. */
const startSim = (nodeName: string, pool: string, seats?: number): Promise<VkSimulator> =>
  rig.startSim({ nodeName, pool, cpuClass: CPU_CLASS, ...(seats !== undefined ? { seats } : {}) });

/** The set's main pod (terminating included), read from the apiserver, or undefined. */
async function mainPod(set: string): Promise<V1Pod | undefined> {
  const list = await kube.core.listNamespacedPod({
    namespace: ns,
    labelSelector: `${Labels.cocoonSet}=${set}`,
  });
  return list.items.find((p) => p.metadata?.name === mainOf(set));
}

/** What the main pod showed; for the waits' "last seen". */
const podView = (p: V1Pod | undefined) =>
  p && {
    uid: p.metadata?.uid,
    node: p.spec?.nodeName,
    deleting: !live(p),
    phase: p.status?.phase,
    ready: podReady(p),
    vmID: vmIDOf(p),
    running: containerRunning(p),
    restore: restoreFromHibernate(p),
    hibernate: p.metadata?.annotations?.[Annotations.hibernate],
  };

/**
 * The end state of a seat release at `generation`: `Suspended`, the main pod gone (not even terminating),
 * the node hint stashed. Returns the set, or undefined.
 */
async function released(set: string, generation: number, node: string): Promise<CocoonSet | undefined> {
  const cs = await sets.get(set);
  if (!atGeneration(cs, generation) || cs?.status?.phase !== 'Suspended' || hintOf(cs) !== node) return;
  return (await mainPod(set)) === undefined ? cs : undefined;
}

/**
 * The end state of a wake or a move at `generation`: `Running`, no node hint, the main live and Ready on
 * `node` (when given), a restore-marked pod running its VM, not asked to hibernate, and the main's
 * `:hibernate` tag dropped. Returns the pod, or undefined.
 */
async function restoredRunning(set: string, generation: number, node?: string): Promise<V1Pod | undefined> {
  const cs = await sets.get(set);
  if (!atGeneration(cs, generation) || cs?.status?.phase !== 'Running' || hintOf(cs) !== undefined) return;
  const p = await mainPod(set);
  if (!live(p) || !podReady(p) || !vmLive(p) || !restoreFromHibernate(p)) return;
  if (p!.metadata?.annotations?.[Annotations.hibernate] !== undefined) return;
  if (node !== undefined && p!.spec?.nodeName !== node) return;
  return (await headTag(registry, vmOf(set), Tags.hibernate)) === 404 ? p : undefined;
}

// ---- The kill loop ----

type Flow = 'release-wake' | 'migration';
type KillPoint = { kind: 'delay'; ms: number } | { kind: 'change'; k: number };
interface Kill {
  flow: Flow;
  transition: string;
  point: KillPoint;
  downMs: number;
  /** The set had not reached the transition's end state when the operator died. */
  mid: boolean;
  phaseAtKill: string;
}
const kills: Kill[] = [];
const describePoint = (p: KillPoint) =>
  p.kind === 'delay' ? `${p.ms} ms after start` : `at the ${p.k}th pod/set change`;

interface Transition {
  flow: Flow;
  /** For the log, e.g. `round 1 wake`. */
  label: string;
  kind: Kind;
  set: string;
  /** Starts the transition (a spec patch); resolves the set's generation it wrote. */
  trigger: () => Promise<number>;
  /** The transition's end state holds at `generation` (read from the apiserver and the registry). */
  reached: (generation: number) => Promise<boolean>;
}

/** Pod and set versions of `set` the recorder has seen. */
const changes = (set: string) => rec.cocoonSetHistory(set).length + rec.podHistory(mainOf(set)).length;

/** Waits for kill point `p`, counted from `from` (time) and `base` (changes). */
async function reach(tr: Transition, p: KillPoint, generation: number, from: number, base: number) {
  if (p.kind === 'delay') {
    await sleep(Math.max(0, from + p.ms - Date.now()));
    return;
  }
  const deadline = Date.now() + CONVERGE_MS;
  let reachedAt: number | undefined;
  let lastCheck = 0;
  for (;;) {
    if (changes(tr.set) - base >= p.k) return;
    const now = Date.now();
    if (now > deadline || (reachedAt !== undefined && now - reachedAt > POINT_GRACE_MS)) return;
    if (reachedAt === undefined && now - lastCheck > 250) {
      lastCheck = now;
      if (await tr.reached(generation).catch(() => false)) reachedAt = Date.now();
    }
    await sleep(10);
  }
}

/**
 * Triggers `tr` and kills the operator KILLS_PER_TRANSITION times at random points of it, restarting it
 * after each kill; returns the generation, the trigger time, the last restart and the change count then.
 */
async function crashThrough(
  rnd: () => number,
  tr: Transition,
): Promise<{ generation: number; t0: number; lastRestart: number }> {
  const t0 = Date.now();
  let base = changes(tr.set);
  const generation = await tr.trigger();
  let from = t0;
  for (let i = 0; i < KILLS_PER_TRANSITION; i++) {
    const scale = i === 0 ? 1 : 0.5;
    const drawn: KillPoint =
      rnd() < 0.5
        ? { kind: 'delay', ms: Math.floor(rnd() * MAX_DELAY_MS[tr.kind] * scale) }
        : { kind: 'change', k: 1 + Math.floor(rnd() * MAX_CHANGES[tr.kind] * scale) };
    // The first kill of a transition of a kind (suspend, wake, move) that no kill of this flow has hit in
    // flight yet lands at its first watched change, before the operator acts: on a quiet machine a release
    // suspend can finish before every random point, and a kill after the end state proves nothing.
    const kind = tr.label.split(' ').pop();
    const hitInFlight = kills.some(
      (k) => k.flow === tr.flow && k.mid && k.transition.split(' ').pop() === kind,
    );
    const point: KillPoint = i === 0 && !hitInFlight ? { kind: 'change', k: 1 } : drawn;
    const downMs = Math.floor(rnd() * MAX_DOWN_MS);
    await reach(tr, point, generation, from, base);
    await rig.stopOp('SIGKILL');
    // Read after the kill: nothing of the operator moves the set any more, so the check does not shift the point.
    const cs = await sets.get(tr.set);
    const mid = !(await tr.reached(generation));
    const phaseAtKill = `${cs?.status?.phase}@${cs?.status?.observedGeneration}/${generation}`;
    kills.push({ flow: tr.flow, transition: tr.label, point, downMs, mid, phaseAtKill });
    await sleep(downMs);
    await rig.startOp();
    from = Date.now();
    base = changes(tr.set);
    console.log(
      `[flows-crash e2e] ${tr.flow} ${tr.label}: killed ${describePoint(point)} (${mid ? 'mid-transition' : 'after the end state'}, phase ${phaseAtKill}), down ${downMs} ms, restarted ${((from - t0) / 1000).toFixed(1)} s in`,
    );
  }
  return { generation, t0, lastRestart: from };
}

// ---- The `:hibernate` DELETEs, inspected on arrival ----

/** The world when a DELETE of `<vm>:hibernate` reached the proxy (read fresh from the apiserver). */
interface TagDelete {
  at: number;
  vm: string;
  /** The set was being deleted (its deletion GC drops the tag: not a flow's DELETE). */
  deleting?: boolean;
  suspend?: boolean;
  pin?: string;
  phase?: string;
  pod?: ReturnType<typeof podView>;
  error?: string;
  /** Why the tag was still needed when the DELETE arrived, if it was. */
  lost?: string;
}
const tagDeletes: TagDelete[] = [];
/** The DELETEs that arrived while the tag was still needed (see `stillNeeded`). */
const tagsLost = () => tagDeletes.filter((d) => d.lost !== undefined);

/**
 * Why a `:hibernate` DELETE that arrived in world `d` deleted a snapshot still needed, or undefined: the
 * only copy of the main's state is the tag until a restore pod runs the restored VM, un-suspended, and
 * on the pin's node when pinned.
 */
function stillNeeded(d: TagDelete): string | undefined {
  if (d.error !== undefined) return `world unreadable: ${d.error}`;
  if (d.deleting) return undefined;
  if (d.suspend) return 'the set is suspended';
  const p = d.pod;
  if (!p) return 'no main pod';
  if (p.deleting) return 'the main pod is terminating';
  if (!p.restore) return 'the main pod is not a restore';
  if (p.hibernate === 'true') return 'the main is asked to hibernate';
  if (p.vmID === '' || !p.running) return 'the restored VM is not running';
  if (d.pin && p.node !== d.pin) return `the main runs on ${p.node}, not on the pin ${d.pin}`;
  return undefined;
}

async function inspectDelete(vm: string): Promise<void> {
  const at = Date.now();
  const set = setsMade.find((s) => vmOf(s) === vm);
  if (set === undefined) {
    tagDeletes.push({ at, vm });
    return;
  }
  let d: TagDelete;
  try {
    const cs = await sets.get(set);
    let pod: V1Pod | undefined;
    try {
      pod = await kube.core.readNamespacedPod({ name: mainOf(set), namespace: ns });
    } catch (err) {
      if (statusCodeOf(err) !== 404) throw err;
    }
    d = {
      at,
      vm,
      deleting: cs === undefined || cs.metadata.deletionTimestamp != null,
      suspend: cs?.spec.suspend === true,
      pin: cs?.spec.nodeName ?? '',
      phase: cs?.status?.phase ?? '',
      pod: podView(pod),
    };
  } catch (err) {
    d = { at, vm, error: String(err) };
  }
  d.lost = stillNeeded(d);
  tagDeletes.push(d);
  if (d.lost !== undefined) console.log(`[flows-crash e2e] TAG LOST: ${JSON.stringify(d)}`);
}

/**
 * Waits for `probe` like waitFor, but ends at once with a failed expectation when a DELETE of a tag still
 * needed has arrived meanwhile (the flow will not converge after that, or converges to lost state).
 */
async function untilConverged<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  describe: () => unknown,
): Promise<T> {
  const got = await waitFor(
    what,
    async () => (tagsLost().length > 0 ? { lost: true as const } : ((await probe()) ?? undefined)),
    CONVERGE_MS,
    { intervalMs: 300, describe },
  );
  expect(tagsLost(), `${what}: :hibernate DELETEs while the tag was still needed`).toEqual([]);
  return got as T;
}

/** A wake or a move: when it ran, and the restore pod it ended with. */
interface Window {
  label: string;
  t0: number;
  end: number;
  uid: string;
  node: string;
}

/**
 * The DELETE checks of one flow over the window [start, end]: every request the operator sent to the
 * registry that deletes something is a DELETE of this set's `<vm>:hibernate`; each was inspected on
 * arrival, lies in a wake/move window and came after that window's restore pod ran its VM (fresh read, and
 * the recorder's first live version of that incarnation); each window has one.
 */
function checkTagDeletes(
  flow: Flow,
  set: string,
  windows: Window[],
  start: number,
  end: number,
): { deletes: number; minLeadMs: number } {
  const vm = vmOf(set);
  const sent = registryLog.records.filter((r) => r.at >= start && r.at <= end && r.method === 'DELETE');
  expect(
    sent.map((r) => r.path),
    `${flow}: the operator's registry DELETEs`,
  ).toEqual(sent.map(() => `/v2/${vm}/manifests/${Tags.hibernate}`));
  const seen = tagDeletes.filter((d) => d.at >= start && d.at <= end);
  expect(seen.length, `${flow}: every DELETE inspected`).toBe(sent.length);
  let minLeadMs = Number.POSITIVE_INFINITY;
  for (const d of seen) {
    const what = `${flow}: DELETE ${vm}:hibernate at +${((d.at - start) / 1000).toFixed(1)} s ${JSON.stringify(d)}`;
    expect(d.lost, what).toBeUndefined();
    expect(d.deleting, what).toBe(false);
    const w = windows.find((x) => d.at >= x.t0 && d.at <= x.end);
    expect(w, `${what}: outside every wake/move window`).toBeDefined();
    expect(d.pod!.uid, `${what}: not the restore pod of ${w!.label}`).toBe(w!.uid);
    expect(d.pod!.node, what).toBe(w!.node);
    const firstLive = rec.podHistory(mainOf(set)).find((s) => s.uid === w!.uid && s.vmID !== '' && s.running);
    expect(firstLive, `${what}: the recorder never saw the restore pod live`).toBeDefined();
    expect(firstLive!.at, `${what}: before the restore pod was seen live`).toBeLessThanOrEqual(d.at);
    minLeadMs = Math.min(minLeadMs, d.at - firstLive!.at);
  }
  for (const w of windows) {
    expect(
      seen.filter((d) => d.at >= w.t0 && d.at <= w.end).length,
      `${flow} ${w.label}: the tag dropped by the operator`,
    ).toBeGreaterThan(0);
  }
  return { deletes: seen.length, minLeadMs };
}

/**
 * Every incarnation of the set's main that was deleted was quiesced first: the version that carries its
 * deletionTimestamp has hibernate "true" and lifecycle `hibernated`. Returns how many were deleted.
 */
function checkQuiescedBeforeDelete(flow: Flow, set: string, from: number): number {
  const hist = rec.podHistory(mainOf(set)).filter((s) => s.at >= from);
  const uids = [...new Set(hist.map((s) => s.uid))];
  let deleted = 0;
  for (const uid of uids) {
    const firstDeleting = hist.find((s) => s.uid === uid && (s.deleting || s.type === 'DELETED'));
    if (!firstDeleting) continue;
    deleted++;
    expect(
      { hibernate: firstDeleting.hibernate, lifecycle: firstDeleting.lifecycle },
      `${flow}: ${mainOf(set)} ${uid} deleted before it was quiesced`,
    ).toEqual({ hibernate: 'true', lifecycle: LifecycleStates.hibernated });
  }
  return deleted;
}

function summary(flow: Flow, started: number, converged: number, extra: string): void {
  const mine = kills.filter((k) => k.flow === flow);
  console.log(
    `[flows-crash e2e] ${flow}: seed ${SEED}, ${mine.length} kill points, ${mine.filter((k) => k.mid).length} mid-transition, ${converged} transitions converged, tags lost 0; ${extra}; ${((Date.now() - started) / 1000).toFixed(1)} s`,
  );
}

describe('CocoonSet seat release and migration: operator SIGKILLed mid-flow (local stack)', () => {
  beforeAll(async () => {
    await rig.start({
      images: [AGENT_IMAGE],
      intercept: (req) => {
        const m = /^\/v2\/(.+)\/manifests\/([^/]+)$/.exec(req.path);
        if (req.method !== 'DELETE' || !m || m[2] !== Tags.hibernate) return undefined;
        return inspectDelete(m[1]!).then(() => 'forward' as const);
      },
    });
    ({ kube, sets, rec, registry } = rig);
  });

  afterAll(() =>
    rig.teardown({
      workflowIds: setsMade.flatMap((set) => [cocoonSetWorkflowId(ns, set), vmWorkflowId(ns, mainOf(set))]),
      vms: setsMade.map(vmOf),
    }),
  );

  it('release-wake: SIGKILLs during seat release and wake; Suspended with the pod gone and the tag in, then Running restored from the snapshot; the tag dropped only once the restored VM runs', async () => {
    const started = Date.now();
    const flow: Flow = 'release-wake';
    const name = 'rel';
    const pool = `${ns}-rel`;
    const node = `${ns}-rel-node`;
    const vm = vmOf(name);
    const sim = await startSim(node, pool, 1);
    setsMade.push(name);
    await sets.create(name, {
      snapshotPolicy: 'main-only',
      nodePool: pool,
      snapshotCompatibilityClass: CPU_CLASS,
      agent: { image: AGENT_IMAGE, replicas: 0 },
      toolboxes: [],
      hibernatePolicy: 'release',
    });
    await sets.waitPhase(name, 'Running', BRING_UP_MS);
    const from = Date.now();
    const rnd = prng(SEED);
    const windows: Window[] = [];
    let converged = 0;
    let lastSeen: unknown;

    for (let round = 0; round < RELEASE_ROUNDS; round++) {
      // Suspend: the seat released.
      const suspended = await crashThrough(rnd, {
        flow,
        label: `round ${round} suspend`,
        kind: 'suspend',
        set: name,
        trigger: async () => (await sets.patchSpec(name, { suspend: true })).metadata.generation!,
        reached: async (g) => (await released(name, g, node)) !== undefined,
      });
      await untilConverged(
        `${flow} round ${round}: Suspended, the main pod gone, the hint stashed`,
        async () => {
          const cs = await sets.get(name);
          lastSeen = { phase: cs?.status?.phase, hint: hintOf(cs), pod: podView(await mainPod(name)) };
          return released(name, suspended.generation, node);
        },
        () => lastSeen,
      );
      expect(
        await headTag(registry, vm, Tags.hibernate),
        `round ${round}: ${vm}:hibernate while Suspended`,
      ).toBe(200);
      expect(sim.state().vms.some((v) => v.name === vm)).toBe(false);
      converged++;
      console.log(
        `[flows-crash e2e] ${flow} round ${round} suspend: Suspended ${((Date.now() - suspended.lastRestart) / 1000).toFixed(1)} s after the last restart, ${((Date.now() - suspended.t0) / 1000).toFixed(1)} s in all, ${changes(name)} changes so far`,
      );

      // Wake: the main restored from its snapshot, the tag dropped once it runs.
      const startedBefore = sim.state().started.length;
      const woke = await crashThrough(rnd, {
        flow,
        label: `round ${round} wake`,
        kind: 'wake',
        set: name,
        trigger: async () => (await sets.patchSpec(name, { suspend: false })).metadata.generation!,
        reached: async (g) => (await restoredRunning(name, g)) !== undefined,
      });
      const pod = await untilConverged(
        `${flow} round ${round}: Running, restored, the hint cleared, the tag dropped`,
        async () => {
          const cs = await sets.get(name);
          const p = await mainPod(name);
          lastSeen = {
            phase: cs?.status?.phase,
            gen: [cs?.metadata.generation, cs?.status?.observedGeneration],
            hint: hintOf(cs),
            pod: podView(p),
            tag: await headTag(registry, vm, Tags.hibernate),
          };
          return restoredRunning(name, woke.generation);
        },
        () => lastSeen,
      );
      windows.push({
        label: `round ${round} wake`,
        t0: woke.t0,
        end: Date.now(),
        uid: pod.metadata!.uid!,
        node,
      });
      const ups = sim
        .state()
        .started.slice(startedBefore)
        .filter((v) => v.name === vm);
      expect(ups, `round ${round}: ${vm} brought up once`).toHaveLength(1);
      expect(ups[0]!.source, `round ${round}`).toMatch(new RegExp(`^restore .*${vm}`));
      expect(vmIDOf(pod), `round ${round}: the pod runs the restored VM`).toBe(ups[0]!.id);
      expect(pod.spec?.nodeName).toBe(node);
      converged++;
      console.log(
        `[flows-crash e2e] ${flow} round ${round} wake: Running ${((Date.now() - woke.lastRestart) / 1000).toFixed(1)} s after the last restart, ${((Date.now() - woke.t0) / 1000).toFixed(1)} s in all, ${changes(name)} changes so far (${ups[0]!.source})`,
      );
    }

    const { deletes, minLeadMs } = checkTagDeletes(flow, name, windows, from, Date.now());
    const deleted = checkQuiescedBeforeDelete(flow, name, from);
    expect(deleted, 'one main deleted per seat release').toBe(RELEASE_ROUNDS);
    expect(
      rec
        .cocoonSetHistory(name)
        .map((s) => s.phase)
        .filter((p) => p === 'Failed'),
    ).toEqual([]);
    summary(
      flow,
      started,
      converged,
      `${deletes} tag DELETEs, each ≥ ${minLeadMs} ms after the restore was seen live; ${deleted} mains deleted, each quiesced first`,
    );
    const mine = kills.filter((k) => k.flow === flow);
    expect(mine.length).toBeGreaterThanOrEqual(10);
    // A kill after the end state proves nothing: both transitions were hit in flight.
    expect(mine.filter((k) => k.mid && k.transition.endsWith('suspend')).length).toBeGreaterThan(0);
    expect(mine.filter((k) => k.mid && k.transition.endsWith('wake')).length).toBeGreaterThan(0);

    await sets.delete(name);
    await sets.waitUntil(name, 'gone', (x) => x === undefined, BRING_UP_MS);
  }, 600_000);

  it('migration: SIGKILLs during moves A→B→A…; Running on the target restored from the snapshot; the old main deleted only once quiesced with its tag in; the tag dropped only once the VM runs on the target', async () => {
    const started = Date.now();
    const flow: Flow = 'migration';
    const name = 'mig';
    const pool = `${ns}-mig`;
    const nodes = [`${ns}-mig-a`, `${ns}-mig-b`] as const;
    const vm = vmOf(name);
    const pair = [await startSim(nodes[0], pool), await startSim(nodes[1], pool)] as const;
    setsMade.push(name);
    await sets.create(name, {
      snapshotPolicy: 'main-only',
      nodePool: pool,
      snapshotCompatibilityClass: CPU_CLASS,
      agent: { image: AGENT_IMAGE, replicas: 0 },
      toolboxes: [],
      nodeName: nodes[0],
    });
    await sets.waitPhase(name, 'Running', BRING_UP_MS);
    expect((await mainPod(name))?.spec?.nodeName).toBe(nodes[0]);
    const from = Date.now();
    const rnd = prng(SEED + 1);
    const windows: Window[] = [];
    let converged = 0;
    let lastSeen: unknown;

    for (let move = 0; move < MOVES; move++) {
      const to = (move + 1) % 2;
      const target = nodes[to]!;
      const label = `move ${move} ${move % 2 === 0 ? 'A→B' : 'B→A'}`;
      const before = pair.map((s) => s.state().started.length);
      const moved = await crashThrough(rnd, {
        flow,
        label,
        kind: 'move',
        set: name,
        trigger: async () => (await sets.patchSpec(name, { nodeName: target })).metadata.generation!,
        reached: async (g) => (await restoredRunning(name, g, target)) !== undefined,
      });
      const pod = await untilConverged(
        `${flow} ${label}: Running on ${target}, restored, the tag dropped`,
        async () => {
          const cs = await sets.get(name);
          lastSeen = {
            phase: cs?.status?.phase,
            gen: [cs?.metadata.generation, cs?.status?.observedGeneration],
            pod: podView(await mainPod(name)),
            tag: await headTag(registry, vm, Tags.hibernate),
          };
          return restoredRunning(name, moved.generation, target);
        },
        () => lastSeen,
      );
      windows.push({ label, t0: moved.t0, end: Date.now(), uid: pod.metadata!.uid!, node: target });
      const ups = pair.map((s, i) =>
        s
          .state()
          .started.slice(before[i])
          .filter((v) => v.name === vm),
      );
      expect(ups[1 - to], `${label}: nothing brought up on the source`).toEqual([]);
      expect(ups[to], `${label}: ${vm} brought up once on ${target}`).toHaveLength(1);
      expect(ups[to]![0]!.source, label).toMatch(new RegExp(`^restore .*${vm}`));
      expect(vmIDOf(pod), `${label}: the pod runs the restored VM`).toBe(ups[to]![0]!.id);
      converged++;
      console.log(
        `[flows-crash e2e] ${flow} ${label}: Running on the target ${((Date.now() - moved.lastRestart) / 1000).toFixed(1)} s after the last restart, ${((Date.now() - moved.t0) / 1000).toFixed(1)} s in all, ${changes(name)} changes so far (${ups[to]![0]!.source})`,
      );
    }

    const { deletes, minLeadMs } = checkTagDeletes(flow, name, windows, from, Date.now());
    const deleted = checkQuiescedBeforeDelete(flow, name, from);
    expect(deleted, 'one old main deleted per move').toBe(MOVES);
    const phases = rec
      .cocoonSetHistory(name)
      .filter((s) => s.at >= from)
      .map((s) => s.phase);
    expect(phases).toContain('Migrating');
    expect(phases.filter((p) => p === 'Failed')).toEqual([]);
    summary(
      flow,
      started,
      converged,
      `${deletes} tag DELETEs, each ≥ ${minLeadMs} ms after the restore was seen live; ${deleted} old mains deleted, each quiesced first`,
    );
    const mine = kills.filter((k) => k.flow === flow);
    expect(mine.length).toBeGreaterThanOrEqual(10);
    expect(mine.filter((k) => k.mid).length).toBeGreaterThan(0);

    await sets.delete(name);
    await sets.waitUntil(name, 'gone', (x) => x === undefined, BRING_UP_MS);
  }, 600_000);
});
