/**
 * CocoonSet end to end on the real local stack (docs/cocoonset.md; docs/wire-contract.md): the operator
 * process (`src/worker.ts`) against the kube-apiserver with the CRDs, the Temporal dev server and the
 * distribution registry, with a vk-cocoon simulator (test/vksim) that runs in this test process on a node
 * of its own. That node carries the pool and snapshot CPU class labels the sets select (the stack's shared
 * simulator node, pool `default` and no class, binds none of these pods), so the placement the operator
 * writes is what puts a pod on a VM node at all.
 *
 * Every set has the realistic shape of cocoonset-harness.ts `realisticSpec` (main + 2 sub-agents on a
 * clone-mode image, a run-mode toolbox and a static toolbox, snapshotPolicy main-only, pool + CPU class).
 * The rig (operator-rig.ts, shared with suspend and flows-crash): one operator for this file, limited to its
 * namespace (WATCH_NAMESPACE) on its own task queue without leader election; it reaches the registry through
 * a proxy that logs the requests (the order of the GC's tag deletes), the simulator and the tests use the
 * registry directly.
 * Each test uses its own set; waits are deadline-bounded polls; timings are asserted only as lower bounds
 * the product promises (rebuild backoff), never as performance.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { Client } from '@temporalio/client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { cocoonSetWorkflowId, vmWorkflowId } from '../../src/api/ids.js';
import {
  Annotations,
  CONDITION_DELETE_FAILING,
  CONDITION_PROGRESSING,
  ConditionReasons,
  EventReasons,
  Finalizers,
  KIND_COCOONSET,
  Labels,
  LifecycleStates,
  Tags,
} from '../../src/api/keys.js';
import { lifecycleOf, podReady, vmIDOf } from '../../src/api/pod.js';
import type { CocoonSet } from '../../src/api/types.js';
import { requiredHostname } from '../../src/cocoonset/pods.js';
import { type KubeClients, mergePatch } from '../../src/kube/client.js';
import type { RegistryProxy } from '../support/registry-proxy.js';
import { waitFor } from '../support/wait.js';
import { VkSimulator } from '../vksim/sim.js';
import {
  type CocoonSets,
  cocoonSetWorkflowState,
  type Placement,
  pushSnapshotTag,
  realisticSpec,
  scheduledActivities,
  workflowRuns,
} from './cocoonset-harness.js';
import {
  type Hibernations,
  headTag,
  type NamespaceRecorder,
  occurrences,
  operatorEvents,
  readyOf,
} from './hibernation-harness.js';
import { metricSum, scrapeMetrics } from './operator-process.js';
import { OperatorRig } from './operator-rig.js';

const rig = new OperatorRig('cs-e2e');
const { ns, registryLog } = rig;
const place: Placement = { pool: `${ns}-pool`, cpuClass: 'e2e-cascade-lake-v1' };
const nodeName = `${ns}-node`;

/** Clone-mode agent images (seeded in the registry, registry-relative like vk-cocoon reads them). */
const AGENT_V1 = 'cocoonset-e2e/agent:v1';
const AGENT_V2 = 'cocoonset-e2e/agent:v2';
/** Run-mode toolbox image (the simulator boots it without a registry lookup). */
const TOOLBOX_IMAGE = 'ghcr.io/cocoonstack/toolbox:1.0';

/** Bounds of the waits: bring-up of a set, and one round of simulator work. Generous: a shared machine. */
const BRING_UP_MS = 150_000;
const QUICK_MS = 60_000;
const POKE_KEY = 'e2e.cocoonstack.io/poke';
/** The history size past which a set's workflow continues as new (src/workflows/cocoonset.ts). */
const HISTORY_BOUND_BYTES = 512 * 1024;

let kube: KubeClients;
let sets: CocoonSets;
let crs: Hibernations;
let rec: NamespaceRecorder;
let sim: VkSimulator;
/** The real registry (`host:port`); the operator uses `proxy` in front of it. */
let registry: string;
let proxy: RegistryProxy;
let temporal: Client;
const setsMade = new Set<string>();

/** VM name of an agent slot or toolbox of set `set`: `vk-<ns>-<set>-<slotOrToolbox>`. */
const vmOf = (set: string, member: string | number) => `vk-${ns}-${set}-${member}`;
const memberNames = (set: string) => [0, 1, 2, 'tools', 'vnc'].map((m) => `${set}-${m}`);

async function createSet(name: string, spec: CocoonSet['spec'], finalizers?: string[]): Promise<CocoonSet> {
  setsMade.add(name);
  return sets.create(name, spec, finalizers);
}

/** The pods labelled with set `name`, by pod name (terminating ones included). */
async function podsOf(name: string): Promise<Map<string, V1Pod>> {
  const list = await kube.core.listNamespacedPod({
    namespace: ns,
    labelSelector: `${Labels.cocoonSet}=${name}`,
  });
  return new Map(list.items.map((p) => [p.metadata!.name!, p]));
}

const live = (p: V1Pod | undefined) => p !== undefined && p.metadata?.deletionTimestamp == null;

/**
 * Waits until set `name` is Running at its current generation with all five pods live and Ready, and
 * `accept` (if given) holds for every pod; returns the set and its pods.
 */
async function waitRunning(
  name: string,
  timeoutMs = BRING_UP_MS,
  accept: (pod: V1Pod) => boolean = () => true,
): Promise<{ cs: CocoonSet; pods: Map<string, V1Pod> }> {
  let seen: unknown;
  return waitFor(
    `set ${name} Running with 5 Ready pods`,
    async () => {
      const cs = await sets.get(name);
      const pods = await podsOf(name);
      seen = {
        phase: cs?.status?.phase,
        gen: [cs?.metadata.generation, cs?.status?.observedGeneration],
        pods: [...pods.values()].map((p) => [
          p.metadata?.name,
          p.status?.phase,
          podReady(p),
          lifecycleOf(p).state,
          live(p),
        ]),
      };
      const ok =
        cs?.status?.phase === 'Running' &&
        cs.status.observedGeneration === cs.metadata.generation &&
        memberNames(name).every((n) => live(pods.get(n)) && podReady(pods.get(n)) && accept(pods.get(n)!));
      return ok ? { cs: cs!, pods } : undefined;
    },
    timeoutMs,
    { intervalMs: 300, describe: () => seen },
  );
}

const uidsOf = (pods: Map<string, V1Pod>) =>
  Object.fromEntries([...pods].map(([n, p]) => [n, p.metadata?.uid ?? '']));

/** The start sources (`wake …`, `restore …`, `clone …`) simulator `node` recorded for VM `vm` since start `from`. */
const sourcesOf = (node: VkSimulator, vm: string, from: number) =>
  node
    .state()
    .started.slice(from)
    .filter((v) => v.name === vm)
    .map((v) => v.source);

/** Waits until VM `vm`'s `:hibernate` tag is gone from the registry. */
async function waitTagGone(vm: string, what: string): Promise<void> {
  await waitFor(
    what,
    async () => ((await headTag(registry, vm, Tags.hibernate)) === 404 ? true : undefined),
    QUICK_MS,
  );
}

async function annotatePod(name: string, annotations: Record<string, string | null>): Promise<void> {
  await kube.core.patchNamespacedPod(
    { name, namespace: ns, body: { metadata: { annotations } } },
    mergePatch,
  );
}

/**
 * Touches pod `pod` (an annotation change the watcher passes on) and waits until the set's workflow has
 * started a pass after it and finished it.
 */
async function pokeAndWaitForPass(set: string, pod: string, n: number): Promise<void> {
  const before = (await cocoonSetWorkflowState(temporal, ns, set)).passes;
  await annotatePod(pod, { [POKE_KEY]: String(n) });
  await waitFor(
    `a pass of set ${set} after poke ${n}`,
    async () => {
      const st = await cocoonSetWorkflowState(temporal, ns, set);
      return st.passes > before && !st.passing;
    },
    QUICK_MS,
    { intervalMs: 250 },
  );
}

async function setEvents(set: string, reason: string) {
  return operatorEvents(kube, ns, set, reason, KIND_COCOONSET);
}

async function metrics(): Promise<string> {
  return scrapeMetrics(rig.op!.metricsUrl);
}

/**
 * Checks the end of set `name`'s released-seat wake of `vm`: `sim` restored it exactly once since its
 * `started` list had `since` entries, the `:hibernate` tag is dropped (waited for), and the wake was scored
 * once with `placement`.
 */
async function expectReleasedWakeDone(
  name: string,
  vm: string,
  sim: VkSimulator,
  since: number,
  placement: 'hint-node' | 'pool',
): Promise<void> {
  const restored = sim
    .state()
    .started.slice(since)
    .filter((v) => v.name === vm);
  expect(restored).toHaveLength(1);
  expect(restored[0]!.source).toMatch(new RegExp(`^restore .*${vm}`));
  await waitFor(
    'the tag dropped once the VM is live',
    async () => ((await headTag(registry, vm, Tags.hibernate)) === 404 ? true : undefined),
    QUICK_MS,
  );
  expect(
    metricSum(await metrics(), 'cocoon_operator_slot_release_wake_total', { cocoonset: name, placement }),
  ).toBe(1);
}

/** A main-only set of `pool` (the e2e CPU class) that releases its seat when suspended. */
function releaseSpec(pool: string): CocoonSet['spec'] {
  return {
    ...realisticSpec(AGENT_V1, TOOLBOX_IMAGE, { pool, cpuClass: place.cpuClass }),
    agent: { image: AGENT_V1, replicas: 0 },
    toolboxes: [],
    hibernatePolicy: 'release',
  };
}

/**
 * Two simulator nodes `<ns>-<tag>-a` and `-b` of a pool of their own (`<ns>-<tag>`) for a migration test, and
 * the spec of a main-only set of that pool pinned to a node; `stop` stops them and deletes their nodes.
 */
function migrationNodes(tag: string) {
  const pool = `${ns}-${tag}`;
  const nodeA = `${pool}-a`;
  const nodeB = `${pool}-b`;
  const sims = [nodeA, nodeB].map(
    (nodeName) =>
      new VkSimulator({ kube: kube.kc, registry, nodeName, pool, cpuClass: place.cpuClass, tickMs: 500 }),
  );
  return {
    pool,
    nodeA,
    nodeB,
    sims,
    spec: (pin: string): CocoonSet['spec'] => ({
      ...realisticSpec(AGENT_V1, TOOLBOX_IMAGE, { pool, cpuClass: place.cpuClass }),
      agent: { image: AGENT_V1, replicas: 0 },
      toolboxes: [],
      nodeName: pin,
    }),
    start: async () => {
      for (const s of sims) await s.start();
    },
    stop: async () => {
      for (const s of sims) await s.stop();
      for (const n of [nodeA, nodeB]) await kube.core.deleteNode({ name: n }).catch(() => undefined);
    },
  };
}

/**
 * Makes the registry proxy reset every DELETE of `<vm>:hibernate` (counted in `refused`) while `down` is
 * true, and forward them once the caller sets it false; other requests pass.
 */
function refuseTagDeletes(vm: string): { refused: number; down: boolean } {
  const deletes = { refused: 0, down: true };
  proxy.intercept = (req) => {
    if (req.method !== 'DELETE' || req.path !== `/v2/${vm}/manifests/${Tags.hibernate}`) return undefined;
    if (!deletes.down) return 'forward';
    deletes.refused++;
    return 'drop';
  };
  return deletes;
}

/** The VMs named `vm` the simulator brings up from now on (restored, cloned, forked), as a reader. */
function startsOf(vm: string): () => ReturnType<VkSimulator['state']>['started'] {
  const before = sim.state().started.length;
  return () =>
    sim
      .state()
      .started.slice(before)
      .filter((v) => v.name === vm);
}

/** Waits (QUICK_MS) for pod `pod` of set `name` to exist with another uid than `oldUID`; resolves it. */
function recreatedPod(name: string, pod: string, oldUID: string | undefined): Promise<V1Pod> {
  return waitFor(
    `${pod} created again`,
    async () => {
      const p = (await podsOf(name)).get(pod);
      return p && p.metadata?.uid !== oldUID ? p : undefined;
    },
    QUICK_MS,
  );
}

/** Waits (2 × QUICK_MS) for pod `pod` of set `name` to be another incarnation than `old`, live; resolves it. */
function newLivePod(name: string, pod: string, old: V1Pod, what: string): Promise<V1Pod> {
  return waitFor(
    what,
    async () => {
      const p = (await podsOf(name)).get(pod);
      return p && p.metadata?.uid !== old.metadata?.uid && live(p) ? p : undefined;
    },
    2 * QUICK_MS,
  );
}

/** Waits until set `name`'s workflow has finished `n` passes more than it had now (a product barrier). */
async function waitForPasses(name: string, n: number, what: string): Promise<void> {
  const before = (await cocoonSetWorkflowState(temporal, ns, name)).passes;
  await waitFor(
    what,
    async () => {
      const st = await cocoonSetWorkflowState(temporal, ns, name);
      return st.passes >= before + n && !st.passing;
    },
    QUICK_MS,
    { intervalMs: 250 },
  );
}

/**
 * Creates set `name` from `spec`, hibernates its main through CocoonHibernation `cr`, then wakes it with the
 * registry refusing every DELETE of the main's `:hibernate` tag, until the CR says so (`Waking`,
 * `SnapshotDeleteFailing` True): the tag is spent. Resolves the DELETE switch (`refuseTagDeletes`).
 */
async function spendMainTag(
  name: string,
  cr: string,
  spec: CocoonSet['spec'],
): Promise<{ refused: number; down: boolean }> {
  await createSet(name, spec);
  await waitRunning(name);
  await crs.create(cr, `${name}-0`, 'Hibernate');
  await crs.waitPhase(cr, 'Hibernated', QUICK_MS);
  const deletes = refuseTagDeletes(vmOf(name, 0));
  await crs.setDesire(cr, 'Wake');
  const spent = await waitFor(
    'the wake reports its failed tag DELETE',
    async () => {
      const got = await crs.get(cr);
      const failing = got?.status?.conditions?.find((c) => c.type === CONDITION_DELETE_FAILING);
      return failing?.status === 'True' ? got : undefined;
    },
    QUICK_MS,
  );
  expect(spent.status?.phase).toBe('Waking');
  return deletes;
}

/**
 * Creates set `name` with the realistic spec, waits until it is Running with its five pods Ready, suspends it
 * (`spec.suspend: true`) and waits until it is Suspended; resolves the pods as they ran before the suspend.
 */
async function suspendedSet(name: string): Promise<Map<string, V1Pod>> {
  await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
  const { pods } = await waitRunning(name);
  await sets.patchSpec(name, { suspend: true });
  await sets.waitPhase(name, 'Suspended', BRING_UP_MS);
  return pods;
}

/** Deletes set `name` and waits until it is gone (a test's cleanup: errors ignored). */
async function dropSet(name: string): Promise<void> {
  await sets.delete(name).catch(() => undefined);
  await sets.waitUntil(name, 'gone', (x) => x === undefined, QUICK_MS).catch(() => undefined);
}

describe('CocoonSet end to end (operator process, local stack, simulator node with pool and CPU class)', () => {
  beforeAll(async () => {
    await rig.start({ images: [AGENT_V1, AGENT_V2] });
    ({ kube, sets, crs, rec, registry, proxy, temporal } = rig);
    sim = await rig.startSim({ nodeName, ...place });
  });

  afterEach(() => {
    sim?.faults.clear();
    // A test that failed half-way must not leave the operator's registry failing for the next one.
    if (proxy) proxy.intercept = undefined;
  });

  afterAll(() =>
    rig.teardown({
      workflowIds: [...setsMade].flatMap((set) => [
        cocoonSetWorkflowId(ns, set),
        ...memberNames(set).map((pod) => vmWorkflowId(ns, pod)),
      ]),
      vms: [...setsMade].flatMap((set) => [0, 1, 2, 'tools', 'vnc'].map((m) => vmOf(set, m))),
    }),
  );

  it('brings a set up: all five pods created on the simulator node and Ready; status rolled up to Running with every agent and toolbox listed', async () => {
    const name = 'roll';
    const created = await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    const { cs, pods } = await waitRunning(name);
    const gen = cs.metadata.generation!;
    expect(gen).toBe(created.metadata.generation);
    expect(cs.metadata.finalizers).toContain(Finalizers.cocoonSet);
    expect([...pods.keys()].sort()).toEqual(memberNames(name).sort());

    const main = pods.get(`${name}-0`)!;
    for (const [podName, pod] of pods) {
      // Placement (docs/cocoonset.md#pods): the pool and class selector put every pod on the simulator's
      // node.
      expect(pod.spec?.nodeSelector, podName).toEqual({
        [Labels.nodePool]: place.pool,
        [Labels.snapshotCPUClass]: place.cpuClass,
      });
      expect(pod.spec?.nodeName, podName).toBe(nodeName);
      expect(pod.metadata?.ownerReferences, podName).toEqual([
        expect.objectContaining({ kind: KIND_COCOONSET, name, uid: cs.metadata.uid, controller: true }),
      ]);
      expect(pod.metadata?.annotations?.[Annotations.cocoonSetGeneration], podName).toBe(String(gen));
      expect(lifecycleOf(pod).state, podName).toBe(LifecycleStates.ready);
    }
    for (const slot of [1, 2]) {
      const sub = pods.get(`${name}-${slot}`)!;
      expect(sub.metadata?.annotations?.[Annotations.forkFrom]).toBe(vmOf(name, 0));
      expect(sub.spec?.nodeName).toBe(main.spec?.nodeName);
    }
    expect(pods.get(`${name}-vnc`)!.metadata?.annotations).not.toHaveProperty(Annotations.managed);
    expect(pods.get(`${name}-tools`)!.metadata?.annotations?.[Annotations.managed]).toBe('true');
    // The simulator cloned the main from the agent image and forked the sub-agents from the main.
    const vms = new Map(sim.state().vms.map((v) => [v.name, v]));
    expect(vms.get(vmOf(name, 0))?.source).toBe(`clone ${AGENT_V1}`);
    expect(vms.get(vmOf(name, 1))?.source).toBe(`fork fork-${vmOf(name, 0)}`);
    expect(vms.get(vmOf(name, 'vnc'))?.source).toBe('adopt');

    const rt = (pod: string) => {
      const p = pods.get(`${name}-${pod}`)!;
      return { vmID: vmIDOf(p), ip: p.metadata?.annotations?.[Annotations.ip] };
    };
    const condition = (type: string, status: string, reason: string, message: string) => ({
      type,
      status,
      reason,
      message,
      observedGeneration: gen,
      lastTransitionTime: expect.any(String),
    });
    expect(cs.status).toEqual({
      observedGeneration: gen,
      phase: 'Running',
      readyAgents: 3,
      desiredAgents: 3,
      readyToolboxes: 2,
      desiredToolboxes: 2,
      agents: [
        { slot: 0, role: 'main', podName: `${name}-0`, vmName: vmOf(name, 0), ...rt('0'), phase: 'Running' },
        ...[1, 2].map((slot) => ({
          slot,
          role: 'sub-agent',
          podName: `${name}-${slot}`,
          vmName: vmOf(name, slot),
          ...rt(String(slot)),
          phase: 'Running',
          forkedFrom: vmOf(name, 0),
        })),
      ],
      toolboxes: [
        {
          name: 'tools',
          podName: `${name}-tools`,
          vmName: vmOf(name, 'tools'),
          ...rt('tools'),
          phase: 'Running',
          connType: 'ssh',
        },
        {
          name: 'vnc',
          podName: `${name}-vnc`,
          vmName: vmOf(name, 'vnc'),
          vmID: 'qemu-1',
          ip: '10.0.0.1',
          phase: 'Running',
          connType: 'vnc',
          vncPort: 5901,
        },
      ],
      conditions: [
        condition('Ready', 'True', 'AllAgentsReady', '3/3 agents ready, 2/2 toolboxes ready'),
        condition('Progressing', 'False', 'Stable', 'Running'),
      ],
    });
    for (const a of cs.status!.agents!) expect(a.vmID, `slot ${a.slot}`).toMatch(/^sim-/);

    // The roll-up never reported Failed on the way.
    expect(rec.cocoonSetHistory(name).map((s) => s.phase)).not.toContain('Failed');
  });

  it('an agent image edit drifts the main and the sub-agents: exactly those are recreated, with the new image; the toolboxes stay', async () => {
    const name = 'drift';
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    const before = uidsOf((await waitRunning(name)).pods);

    const edited = await sets.patchSpec(name, { agent: { image: AGENT_V2 } });
    const gen = edited.metadata.generation!;
    const { cs, pods } = await waitRunning(
      name,
      BRING_UP_MS,
      (p) =>
        p.metadata?.labels?.[Labels.role] === 'toolbox' ||
        p.metadata?.annotations?.[Annotations.image] === AGENT_V2,
    );
    expect(cs.metadata.generation).toBe(gen);
    const after = uidsOf(pods);
    for (const slot of [0, 1, 2]) {
      expect(after[`${name}-${slot}`], `slot ${slot} recreated`).not.toBe(before[`${name}-${slot}`]);
    }
    for (const tb of ['tools', 'vnc']) {
      expect(after[`${name}-${tb}`], `toolbox ${tb} kept`).toBe(before[`${name}-${tb}`]);
      // Kept, but stamped with the new generation (docs/cocoonset.md#generation-stamp), and never asked to
      // terminate.
      expect(pods.get(`${name}-${tb}`)!.metadata?.annotations?.[Annotations.cocoonSetGeneration]).toBe(
        String(gen),
      );
      expect(rec.podHistory(`${name}-${tb}`).some((s) => s.deleting)).toBe(false);
    }
    const vms = new Map(sim.state().vms.map((v) => [v.name, v]));
    expect(vms.get(vmOf(name, 0))?.source).toBe(`clone ${AGENT_V2}`);
    expect(pods.get(`${name}-1`)!.metadata?.annotations?.[Annotations.forkFrom]).toBe(vmOf(name, 0));
    expect(cs.status?.agents?.map((a) => a.vmID)).toEqual(
      [0, 1, 2].map((s) => vmIDOf(pods.get(`${name}-${s}`))),
    );
  });

  it('deliberate (patch failed-hibernate-round-keeps-vm; the reference counts lifecycle failed as terminal and rebuilds it): a sub-agent a CocoonHibernation hibernates while the registry refuses every push keeps its pod and VM through the failed rounds, no rebuild; once the registry takes the push it is Hibernated (new-user finding: the forked VM was deleted three times in 6 s)', async () => {
    const name = 'pushfail';
    const sub = `${name}-1`;
    sim.faults.add({ vm: `^${vmOf(name, 1)}$`, op: 'hibernate.push.fail' });
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    const { pods } = await waitRunning(name);
    const uid = pods.get(sub)!.metadata!.uid!;
    await crs.create(sub, sub, 'Hibernate');
    const failedRounds = () =>
      rec.podHistory(sub).filter((p) => p.lifecycle === LifecycleStates.failed).length;
    await waitFor('two failed hibernate rounds of the sub-agent', () => failedRounds() >= 2, QUICK_MS);
    await pokeAndWaitForPass(name, sub, 1);
    expect(new Set(rec.podHistory(sub).map((p) => p.uid))).toEqual(new Set([uid]));
    expect(rec.podHistory(sub).some((p) => p.deleting)).toBe(false);
    expect(await setEvents(name, EventReasons.subAgentRebuilding)).toEqual([]);
    expect((await crs.get(sub))?.status?.phase).toBe('Hibernating');

    sim.faults.clear();
    await crs.waitPhase(sub, 'Hibernated', QUICK_MS);
    expect((await podsOf(name)).get(sub)?.metadata?.uid).toBe(uid);
    expect(await setEvents(name, EventReasons.subAgentRebuilding)).toEqual([]);
  });

  it("deliberate (patch failed-main-round-keeps-phase; the reference turns the set Failed, then says RecoveredFromFailure at each retry): a main a CocoonHibernation hibernates while the registry refuses every push keeps the set Pending with Progressing HibernateRoundFailed and vk's reason, never Failed, no recovery event; once the registry takes the push it is Hibernated, same pod", async () => {
    const name = 'mainpushfail';
    const main = `${name}-0`;
    sim.faults.add({ vm: `^${vmOf(name, 0)}$`, op: 'hibernate.push.fail' });
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    const { pods } = await waitRunning(name);
    const uid = pods.get(main)!.metadata!.uid!;
    await crs.create(main, main, 'Hibernate');
    const failedRounds = () =>
      rec.podHistory(main).filter((p) => p.lifecycle === LifecycleStates.failed).length;
    await waitFor('two failed hibernate rounds of the main', () => failedRounds() >= 2, QUICK_MS);
    await pokeAndWaitForPass(name, main, 1);
    const held = await sets.waitUntil(
      name,
      'Progressing HibernateRoundFailed',
      (cs) =>
        cs?.status?.conditions?.find((c) => c.type === CONDITION_PROGRESSING)?.reason ===
        'HibernateRoundFailed',
      QUICK_MS,
    );
    expect(held!.status?.phase).toBe('Pending');
    expect(held!.status?.conditions?.find((c) => c.type === CONDITION_PROGRESSING)?.message).toContain(
      'registry push failed',
    );
    expect((await setEvents(name, EventReasons.podLifecycleFailed))[0]?.message).toContain(
      `main pod ${ns}/${main}:`,
    );
    expect((await crs.get(main))?.status?.phase).toBe('Hibernating');

    sim.faults.clear();
    await crs.waitPhase(main, 'Hibernated', QUICK_MS);
    expect((await podsOf(name)).get(main)?.metadata?.uid).toBe(uid);
    expect(rec.podHistory(main).some((p) => p.deleting)).toBe(false);
    expect(rec.cocoonSetHistory(name).map((s) => s.phase)).not.toContain('Failed');
    expect(await setEvents(name, EventReasons.recoveredFromFailure)).toEqual([]);
  });

  it('deliberate (patch set-wake-waits-for-cr, helper-63; the reference looks every 5 s for as long as the CR holds the main): a main a CocoonHibernation keeps hibernated leaves the set Pending with Progressing DesireConflict naming the CR and no pass scheduled; the CR set to Wake, the same main runs again and the set is Running', async () => {
    const name = 'heldmain';
    const main = `${name}-0`;
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    const { pods } = await waitRunning(name);
    const uid = pods.get(main)!.metadata!.uid!;
    await crs.create(main, main, 'Hibernate');
    await crs.waitPhase(main, 'Hibernated', QUICK_MS);
    const held = await sets.waitUntil(
      name,
      'Progressing DesireConflict',
      (cs) =>
        cs?.status?.conditions?.find((c) => c.type === CONDITION_PROGRESSING)?.reason === 'DesireConflict',
      QUICK_MS,
    );
    expect(held!.status?.phase).toBe('Pending');
    expect(held!.status?.conditions?.find((c) => c.type === CONDITION_PROGRESSING)?.message).toBe(
      `main pod ${ns}/${main}: VM ${vmOf(name, 0)} is held hibernated by cocoonhibernation ${main} (desire Hibernate); the set's wake waits until that one wants Wake or is deleted`,
    );
    // The set's workflow is idle with no pass scheduled (without the patch: a pass every 5 s, for ever).
    const idle = await waitFor(
      `set ${name} idle`,
      async () => {
        const st = await cocoonSetWorkflowState(temporal, ns, name);
        return st.busy ? undefined : st;
      },
      QUICK_MS,
      { intervalMs: 250 },
    );
    expect(idle.nextPassAt).toBeNull();

    await crs.setDesire(main, 'Wake');
    await crs.waitPhase(main, 'Active', QUICK_MS);
    const { pods: after } = await waitRunning(name, QUICK_MS);
    expect(after.get(main)?.metadata?.uid).toBe(uid);
    expect(
      (await sets.get(name))?.status?.conditions?.find((c) => c.type === CONDITION_PROGRESSING)?.reason,
    ).not.toBe('DesireConflict');
  });

  it('deliberate (patch failed-round-holds-vm; the reference counts lifecycle failed as terminal: it rebuilds the sub-agent and holds the set Failed for good): a main and a sub-agent whose hibernate rounds fail keep their VMs once their CocoonHibernations are deleted (vk keeps reporting failed), the set Pending with Progressing HibernateRoundFailed saying the round was called off; a suspend and un-suspend once the registry takes pushes brings both back Ready, same pods', async () => {
    const name = 'calledoff';
    const main = `${name}-0`;
    const sub = `${name}-1`;
    sim.faults.add({ vm: `^(${vmOf(name, 0)}|${vmOf(name, 1)})$`, op: 'hibernate.push.fail' });
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    const { pods } = await waitRunning(name);
    await crs.create(main, main, 'Hibernate');
    await crs.create(sub, sub, 'Hibernate');
    const failedRounds = (pod: string) =>
      rec.podHistory(pod).filter((p) => p.lifecycle === LifecycleStates.failed).length;
    await waitFor(
      'failed hibernate rounds of both',
      () => failedRounds(main) >= 2 && failedRounds(sub) >= 2,
      QUICK_MS,
    );
    await pokeAndWaitForPass(name, main, 1);

    // The user gives up: both CRs are deleted; their VM workflows clear the annotations, vk writes nothing more.
    await crs.delete(main);
    await crs.delete(sub);
    const calledOff = await waitFor(
      'both hibernate annotations cleared, lifecycle still failed',
      async () => {
        const now = await podsOf(name);
        const both = [now.get(main), now.get(sub)];
        return both.every(
          (p) =>
            p?.metadata?.annotations?.[Annotations.hibernate] === undefined &&
            lifecycleOf(p!).state === LifecycleStates.failed,
        )
          ? now
          : undefined;
      },
      240_000,
    );
    expect(uidsOf(calledOff)).toEqual(uidsOf(pods));
    await pokeAndWaitForPass(name, sub, 2);
    await pokeAndWaitForPass(name, main, 3);
    const held = await sets.waitUntil(
      name,
      'Progressing HibernateRoundFailed, called off',
      (cs) =>
        cs?.status?.conditions
          ?.find((c) => c.type === CONDITION_PROGRESSING)
          ?.message?.includes('and was called off') === true,
      QUICK_MS,
    );
    expect(held!.status?.phase).toBe('Pending');
    expect(uidsOf(await podsOf(name))).toEqual(uidsOf(pods));
    expect(rec.cocoonSetHistory(name).map((s) => s.phase)).not.toContain('Failed');
    expect(await setEvents(name, EventReasons.subAgentRebuilding)).toEqual([]);

    // The way out that keeps the state: a hibernate round that succeeds, then a wake.
    sim.faults.clear();
    await sets.patchSpec(name, { suspend: true });
    await sets.waitUntil(name, 'Suspended', (cs) => cs?.status?.phase === 'Suspended', BRING_UP_MS);
    await sets.patchSpec(name, { suspend: false });
    const back = await waitRunning(name);
    expect(uidsOf(back.pods)).toEqual(uidsOf(pods));
    expect(rec.podHistory(main).some((p) => p.deleting)).toBe(false);
    expect(rec.podHistory(sub).some((p) => p.deleting)).toBe(false);
    expect(rec.cocoonSetHistory(name).map((s) => s.phase)).not.toContain('Failed');
  }, 600_000);

  it("deliberate (patch failed-round-holds-vm; the reference skips a failed pod and says Suspended with no snapshot taken): a suspend while the registry refuses one sub-agent's push stays Suspending with Progressing HibernateRoundFailed, never Suspended, until the push goes through", async () => {
    const name = 'suspendfail';
    const sub = `${name}-1`;
    sim.faults.add({ vm: `^${vmOf(name, 1)}$`, op: 'hibernate.push.fail' });
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    const { pods } = await waitRunning(name);
    await sets.patchSpec(name, { suspend: true });
    const failedRounds = () =>
      rec.podHistory(sub).filter((p) => p.lifecycle === LifecycleStates.failed).length;
    await waitFor('two failed hibernate rounds of the sub-agent', () => failedRounds() >= 2, QUICK_MS);
    await pokeAndWaitForPass(name, sub, 1);
    const held = await sets.waitUntil(
      name,
      'Suspending with Progressing HibernateRoundFailed',
      (cs) =>
        cs?.status?.conditions?.find((c) => c.type === CONDITION_PROGRESSING)?.reason ===
        'HibernateRoundFailed',
      QUICK_MS,
    );
    expect(held!.status?.phase).toBe('Suspending');
    expect(held!.status?.conditions?.find((c) => c.type === CONDITION_PROGRESSING)?.message).toContain(
      `pod ${ns}/${sub}: vk-cocoon reported its hibernate round failed`,
    );
    expect(rec.cocoonSetHistory(name).map((s) => s.phase)).not.toContain('Suspended');

    sim.faults.clear();
    await sets.waitUntil(name, 'Suspended', (cs) => cs?.status?.phase === 'Suspended', BRING_UP_MS);
    expect(await headTag(registry, vmOf(name, 1), Tags.hibernate)).toBe(200);
    await sets.patchSpec(name, { suspend: false });
    const back = await waitRunning(name);
    expect(uidsOf(back.pods)).toEqual(uidsOf(pods));
  }, 300_000);

  it('deliberate (patch failed-round-holds-vm; the reference rebuilds the sub-agent, and our rebuild would drop its :hibernate tag): a sub-agent whose wake after an un-suspend fails its pull keeps its pod and snapshot, named in Progressing HibernateRoundFailed; once the pull works vk wakes it, same pod', async () => {
    const name = 'wakefail';
    const sub = `${name}-1`;
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    const { pods } = await waitRunning(name);
    await sets.patchSpec(name, { suspend: true });
    await sets.waitUntil(name, 'Suspended', (cs) => cs?.status?.phase === 'Suspended', BRING_UP_MS);
    sim.faults.add({ vm: `^${vmOf(name, 1)}$`, op: 'wake.pull.fail' });
    await sets.patchSpec(name, { suspend: false });
    const failedWakes = () =>
      rec.podHistory(sub).filter((p) => p.lifecycle === LifecycleStates.failed).length;
    await waitFor('a failed wake of the sub-agent', () => failedWakes() >= 1, QUICK_MS);
    await pokeAndWaitForPass(name, sub, 1);
    const held = await sets.waitUntil(
      name,
      'Progressing HibernateRoundFailed naming the sub-agent',
      (cs) =>
        cs?.status?.conditions
          ?.find((c) => c.type === CONDITION_PROGRESSING)
          ?.message?.includes(`pod ${ns}/${sub}: vk-cocoon reported it failed with no VM running`) === true,
      QUICK_MS,
    );
    expect(held!.status?.conditions?.find((c) => c.type === CONDITION_PROGRESSING)?.reason).toBe(
      'HibernateRoundFailed',
    );
    expect(await headTag(registry, vmOf(name, 1), Tags.hibernate)).toBe(200);
    expect(await setEvents(name, EventReasons.subAgentRebuilding)).toEqual([]);

    sim.faults.clear();
    const back = await waitRunning(name);
    expect(uidsOf(back.pods)).toEqual(uidsOf(pods));
    expect(rec.podHistory(sub).some((p) => p.deleting)).toBe(false);
  }, 300_000);

  it("deliberate (patch set-wake-outlives-pod; before it the pod's deletion ended the VM workflow's wake and the tag stayed, for a later re-create to roll the VM back): a main whose wake after an un-suspend fails its pull, deleted by hand, comes back restored from its snapshot, and the tag is dropped once it runs", async () => {
    const name = 'wakegone';
    const mainPod = `${name}-0`;
    const mainVM = vmOf(name, 0);
    const pods = await suspendedSet(name);
    sim.faults.add({ vm: `^${mainVM}$`, op: 'wake.pull.fail' });
    await sets.patchSpec(name, { suspend: false });
    await waitFor(
      'a failed wake of the main',
      () => rec.podHistory(mainPod).some((p) => p.lifecycle === LifecycleStates.failed),
      QUICK_MS,
    );
    const startedBefore = sim.state().started.length;
    await kube.core.deleteNamespacedPod({ name: mainPod, namespace: ns });
    await waitFor(
      'the main created again',
      async () => {
        const p = (await podsOf(name)).get(mainPod);
        return p && p.metadata?.uid !== pods.get(mainPod)!.metadata?.uid ? true : undefined;
      },
      QUICK_MS,
    );
    sim.faults.clear();
    await waitRunning(name);
    expect(sourcesOf(sim, mainVM, startedBefore)).toEqual([
      expect.stringMatching(new RegExp(`^restore .*${mainVM}`)),
    ]);
    await waitTagGone(mainVM, 'the main tag dropped once the new pod runs');
  }, 300_000);

  it('a sub-agent whose VM keeps failing is rebuilt 4 times with 0/1/5/30 s backoff, then dead-lettered (Warning event, metric); a spec edit lifts it', async () => {
    const name = 'rebuild';
    const sub = `${name}-2`;
    // Every incarnation of slot 2 fails after its VM is up (post-clone fixup exhausted: lifecycle failed).
    sim.faults.add({ vm: `^${vmOf(name, 2)}$`, op: 'postclone.fail' });
    const labels = { namespace: ns, cocoonset: name };
    const m0 = await metrics();
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));

    const deadLettered = await waitFor(
      `${sub} dead-lettered`,
      async () => {
        const p = (await podsOf(name)).get(sub);
        return p?.metadata?.annotations?.[Annotations.deadLetter] === 'true' ? p : undefined;
      },
      BRING_UP_MS + 60_000,
      { intervalMs: 500, describe: () => rec.podHistory(sub).slice(-3) },
    );
    expect(lifecycleOf(deadLettered).state).toBe(LifecycleStates.failed);
    await rec.waitSeen('pod', deadLettered);
    // Five incarnations failed: four were rebuilt, the fifth is kept for inspection.
    const failedUids = new Set(
      rec
        .podHistory(sub)
        .filter((s) => s.lifecycle === LifecycleStates.failed)
        .map((s) => s.uid),
    );
    expect(failedUids.size).toBe(5);
    const deletedUids = new Set(
      rec
        .podHistory(sub)
        .filter((s) => s.deleting)
        .map((s) => s.uid),
    );
    expect(deletedUids.size).toBe(4);
    expect(deletedUids.has(deadLettered.metadata!.uid!)).toBe(false);

    // The backoff, from the rebuild history the operator persisted before each delete
    // (docs/cocoonset.md#sub-agent-rebuild-and-dead-letter):
    // counts 1..4, each rebuild at least 0/1/5/30 s after the previous one.
    const entries: { count: number; at: number }[] = [];
    for (const s of rec.cocoonSetHistory(name)) {
      const raw = s.annotations[Annotations.rebuildHistory];
      const e = raw
        ? (JSON.parse(raw) as Record<string, { count: number; lastDeleted: string }>)['2']
        : undefined;
      if (e && entries[entries.length - 1]?.count !== e.count) {
        entries.push({ count: e.count, at: Date.parse(e.lastDeleted) });
      }
    }
    expect(entries.map((e) => e.count)).toEqual([1, 2, 3, 4]);
    const gaps = entries.slice(1).map((e, i) => e.at - entries[i]!.at);
    expect(gaps[0]).toBeGreaterThanOrEqual(1_000);
    expect(gaps[1]).toBeGreaterThanOrEqual(5_000);
    expect(gaps[2]).toBeGreaterThanOrEqual(30_000);

    const rebuilding = await setEvents(name, EventReasons.subAgentRebuilding);
    expect(rebuilding.map((e) => [e.type, e.message, e.count]).sort()).toEqual(
      [1, 2, 3, 4].map((k) => ['Normal', `slot 2 attempt ${k}/4`, 1]),
    );
    // The Warning follows the pod patch and the metric (docs/cocoonset.md#sub-agent-rebuild-and-dead-letter).
    const dead = await waitFor(
      'the SubAgentDeadLetter event',
      async () => {
        const evs = await setEvents(name, EventReasons.subAgentDeadLetter);
        return evs.length > 0 ? evs : undefined;
      },
      QUICK_MS,
    );
    expect(dead.map((e) => [e.type, e.message])).toEqual([
      ['Warning', `slot 2 exhausted 4 rebuilds; pod ${sub} left in dead-letter`],
    ]);
    const m1 = await metrics();
    expect(metricSum(m1, 'cocoon_operator_subagent_rebuild_total', labels)).toBe(
      metricSum(m0, 'cocoon_operator_subagent_rebuild_total', labels) + 4,
    );
    expect(metricSum(m1, 'cocoon_operator_subagent_dead_letter_total', labels)).toBe(
      metricSum(m0, 'cocoon_operator_subagent_dead_letter_total', labels) + 1,
    );

    // Dead-lettered means left alone: later passes keep the pod and the set stays Scaling, Ready=False.
    await pokeAndWaitForPass(name, sub, 1);
    await pokeAndWaitForPass(name, `${name}-0`, 2);
    const kept = (await podsOf(name)).get(sub);
    expect(kept?.metadata?.uid).toBe(deadLettered.metadata?.uid);
    expect(live(kept)).toBe(true);
    const stuck = await sets.waitUntil(name, 'Scaling', (cs) => cs?.status?.phase === 'Scaling', QUICK_MS);
    expect(stuck?.status).toMatchObject({ readyAgents: 2, desiredAgents: 3, readyToolboxes: 2 });
    expect(stuck?.status?.conditions?.find((c) => c.type === 'Ready')).toMatchObject({
      status: 'False',
      message: '2/3 agents ready, 2/2 toolboxes ready',
    });
    expect(occurrences(await setEvents(name, EventReasons.subAgentDeadLetter))).toBe(1);

    // The fix: the VM no longer fails, and the user edits the spec. The dead letter is lifted (the slot's
    // history entry dropped, a fresh budget) and the sub-agent comes back.
    sim.faults.clear();
    await sets.patchSpec(name, { agent: { image: AGENT_V2 } });
    const { cs, pods } = await waitRunning(
      name,
      BRING_UP_MS,
      (p) =>
        p.metadata?.labels?.[Labels.role] === 'toolbox' ||
        p.metadata?.annotations?.[Annotations.image] === AGENT_V2,
    );
    const back = pods.get(sub)!;
    expect(back.metadata?.uid).not.toBe(deadLettered.metadata?.uid);
    expect(back.metadata?.annotations).not.toHaveProperty(Annotations.deadLetter);
    expect(lifecycleOf(back).state).toBe(LifecycleStates.ready);
    const history = JSON.parse(cs.metadata.annotations?.[Annotations.rebuildHistory] ?? '{}');
    expect(history).not.toHaveProperty('2');
    const m2 = await metrics();
    expect(metricSum(m2, 'cocoon_operator_subagent_rebuild_total', labels)).toBe(
      metricSum(m1, 'cocoon_operator_subagent_rebuild_total', labels),
    );
    expect(occurrences(await setEvents(name, EventReasons.subAgentRebuilding))).toBe(4);
  }, 420_000);

  it('a main stuck in a failed lifecycle: phase Failed; PodLifecycleFailed folds into one Event counting every pass (metric per pass), also across a fresh workflow run; a spec edit recovers', async () => {
    const name = 'failing';
    sim.faults.add({ vm: `^${vmOf(name, 0)}$`, op: 'postclone.fail' });
    const lifecycleMetric = 'cocoon_operator_lifecycle_state_failed_observed_total';
    const m0 = await metrics();
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    const failed = await sets.waitUntil(name, 'Failed', (cs) => cs?.status?.phase === 'Failed', BRING_UP_MS);
    expect(failed?.status?.observedGeneration).toBe(failed?.metadata.generation);
    // Nothing past the failed main runs: no sub-agent or toolbox was created.
    expect([...(await podsOf(name)).keys()]).toEqual([`${name}-0`]);

    for (let i = 1; i <= 3; i++) await pokeAndWaitForPass(name, `${name}-0`, i);
    const message = `main pod ${ns}/${name}-0: post-clone fixup of ${vmOf(name, 0)} exhausted (injected)`;
    // The pass that saw the failure plus one per poke: at least 4 occurrences, all on one Event, as many
    // as the passes the metric counted.
    let seen: unknown;
    const events = await waitFor(
      'every pass of the failed main counted on one Event',
      async () => {
        const evs = await setEvents(name, EventReasons.podLifecycleFailed);
        const passes = metricSum(await metrics(), lifecycleMetric) - metricSum(m0, lifecycleMetric);
        seen = { events: evs.map((e) => [e.metadata?.name, e.count]), passes };
        return evs.length === 1 && evs[0]!.count === passes && passes >= 4 ? evs : undefined;
      },
      QUICK_MS,
      { describe: () => seen },
    );
    expect(events[0]).toMatchObject({ type: 'Warning', message });
    const m1 = await metrics();
    expect(
      metricSum(m1, lifecycleMetric, { phase: 'Failed' }) -
        metricSum(m0, lifecycleMetric, { phase: 'Failed' }),
    ).toBeGreaterThanOrEqual(3);

    // A workflow run started afresh for the same set (here the old one is terminated by hand; the next
    // signal starts a new run) keeps counting: its emits must not pass for retries of the old run's.
    const handle = temporal.workflow.getHandle(cocoonSetWorkflowId(ns, name));
    const oldRun = await handle.describe();
    const oldPasses = (await cocoonSetWorkflowState(temporal, ns, name)).passes;
    await handle.terminate('cocoonset e2e: a fresh run must keep counting Events');
    await annotatePod(`${name}-0`, { [POKE_KEY]: 'fresh-run' });
    await waitFor(
      'a fresh run of the set workflow',
      async () => (await handle.describe()).runId !== oldRun.runId,
      QUICK_MS,
    );
    for (let i = 1; i <= oldPasses + 1; i++) await pokeAndWaitForPass(name, `${name}-0`, 100 + i);
    await waitFor(
      'the fresh run counted on the same Event',
      async () => {
        const evs = await setEvents(name, EventReasons.podLifecycleFailed);
        const passes = metricSum(await metrics(), lifecycleMetric) - metricSum(m0, lifecycleMetric);
        seen = { events: evs.map((e) => [e.metadata?.name, e.count]), passes };
        return evs.length === 1 && evs[0]!.count === passes && passes >= events[0]!.count! + oldPasses + 1;
      },
      QUICK_MS,
      { describe: () => seen },
    );

    // The way out is a spec edit: the terminal main drifts, is deleted and recreated.
    sim.faults.clear();
    await sets.patchSpec(name, { agent: { image: AGENT_V2 } });
    await waitRunning(name);
    expect(await setEvents(name, EventReasons.podLifecycleFailed)).toHaveLength(1);
  }, 300_000);

  it('a set workflow keeps its history small: it continues as new before 512 KiB (a worker restart replays it), without disturbing the set', async () => {
    const name = 'history';
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    const before = uidsOf((await waitRunning(name)).pods);
    // Each pass records what it read (the set and its pods, ~16 KB here): poke until the set's
    // workflow has written well over the bound in total.
    let runs = await workflowRuns(temporal, ns, name);
    for (let i = 1; runs.reduce((n, r) => n + r.historySize, 0) < 1.5 * HISTORY_BOUND_BYTES; i++) {
      expect(i, 'pokes needed to grow the history').toBeLessThan(200);
      await pokeAndWaitForPass(name, `${name}-${i % 2 === 0 ? 'tools' : '0'}`, i);
      if (i % 5 === 0) runs = await workflowRuns(temporal, ns, name);
    }
    expect(runs.length, JSON.stringify(runs)).toBeGreaterThanOrEqual(2);
    // Checked whenever the workflow is idle between passes, so a run ends a few passes past the bound at most.
    for (const r of runs)
      expect(r.historySize, JSON.stringify(r)).toBeLessThan(HISTORY_BOUND_BYTES + 256 * 1024);
    expect(runs.slice(0, -1).map((r) => r.status)).toEqual(runs.slice(0, -1).map(() => 'CONTINUED_AS_NEW'));
    const { pods } = await waitRunning(name, QUICK_MS);
    expect(uidsOf(pods)).toEqual(before);
  }, 300_000);

  it('adopts pods written by the reference operator (built by its construction rules) without recreating them', async () => {
    const name = 'adopt';
    // The Go operator made this set and its pods; then the cluster switches to this operator.
    await rig.stopOp();
    const spec = realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place);
    spec.agent.storage = '100Gi';
    const cs = await createSet(name, spec, [Finalizers.cocoonSet]);
    const gen = cs.metadata.generation!;
    expect(gen).toBe(1);

    /**
     * A pod exactly as the reference builds it, written out from its construction rules
     * (docs/cocoonset.md#pods: the managed-pod skeleton, the agent and toolbox rows, the storage mirror; cf.
     * the worked example in test/unit/cocoonset-pods.test.ts), not from src/cocoonset.
     */
    const referencePod = (
      podName: string,
      role: string,
      slot: string,
      annotations: Record<string, string>,
      extra: { storage?: string; nodeName?: string } = {},
    ): V1Pod => ({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        name: podName,
        namespace: ns,
        labels: {
          'cocoonset.cocoonstack.io/name': name,
          'cocoonset.cocoonstack.io/role': role,
          'cocoonset.cocoonstack.io/slot': slot,
          'app.kubernetes.io/name': name,
        },
        annotations: { 'cocoonset.cocoonstack.io/generation': String(gen), ...annotations },
        ownerReferences: [
          {
            apiVersion: 'cocoonset.cocoonstack.io/v1',
            kind: 'CocoonSet',
            name,
            uid: cs.metadata.uid!,
            controller: true,
            blockOwnerDeletion: true,
          },
        ],
      },
      spec: {
        terminationGracePeriodSeconds: 1,
        tolerations: [
          { key: 'virtual-kubelet.io/provider', operator: 'Exists' },
          { key: 'node.kubernetes.io/not-ready', operator: 'Exists', effect: 'NoExecute' },
          { key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute' },
        ],
        nodeSelector: {
          'cocoonstack.io/pool': place.pool,
          'cocoonstack.io/snapshot-cpu-class': place.cpuClass,
        },
        ...(extra.nodeName ? { nodeName: extra.nodeName } : {}),
        containers: [
          {
            name: 'agent',
            image: 'ghcr.io/cocoonstack/placeholder:latest',
            resources: extra.storage
              ? {
                  requests: { 'ephemeral-storage': extra.storage },
                  limits: { 'ephemeral-storage': extra.storage },
                }
              : {},
          },
        ],
      },
    });
    const agentAnnotations = (slot: number): Record<string, string> => ({
      'vm.cocoonstack.io/name': vmOf(name, slot),
      'cocoonset.cocoonstack.io/image': AGENT_V1,
      'cocoonset.cocoonstack.io/mode': 'clone',
      'cocoonset.cocoonstack.io/os': 'linux',
      'cocoonset.cocoonstack.io/storage': '100Gi',
      'cocoonset.cocoonstack.io/snapshot-policy': 'main-only',
      'cocoonset.cocoonstack.io/managed': 'true',
      'vm.cocoonstack.io/backend': 'cloud-hypervisor',
      ...(slot > 0 ? { 'vm.cocoonstack.io/fork-from': vmOf(name, 0) } : {}),
    });
    const create = (body: V1Pod) => kube.core.createNamespacedPod({ namespace: ns, body });
    await create(referencePod(`${name}-0`, 'main', '0', agentAnnotations(0), { storage: '100Gi' }));
    const main = await waitFor(
      'reference main Ready',
      async () => {
        const p = (await podsOf(name)).get(`${name}-0`);
        return p && podReady(p) ? p : undefined;
      },
      QUICK_MS,
    );
    for (const slot of [1, 2]) {
      await create(
        referencePod(`${name}-${slot}`, 'sub-agent', String(slot), agentAnnotations(slot), {
          storage: '100Gi',
          nodeName: main.spec!.nodeName!,
        }),
      );
    }
    await create(
      referencePod(`${name}-tools`, 'toolbox', 'tools', {
        'vm.cocoonstack.io/name': vmOf(name, 'tools'),
        'cocoonset.cocoonstack.io/image': TOOLBOX_IMAGE,
        'cocoonset.cocoonstack.io/mode': 'run',
        'cocoonset.cocoonstack.io/os': 'linux',
        'cocoonset.cocoonstack.io/snapshot-policy': 'main-only',
        'cocoonset.cocoonstack.io/managed': 'true',
        'vm.cocoonstack.io/backend': 'cloud-hypervisor',
      }),
    );
    await create(
      referencePod(`${name}-vnc`, 'toolbox', 'vnc', {
        'vm.cocoonstack.io/name': vmOf(name, 'vnc'),
        'cocoonset.cocoonstack.io/mode': 'static',
        'cocoonset.cocoonstack.io/os': 'linux',
        'cocoonset.cocoonstack.io/snapshot-policy': 'main-only',
        'vm.cocoonstack.io/backend': 'cloud-hypervisor',
        'vm.cocoonstack.io/id': 'qemu-1',
        'vm.cocoonstack.io/ip': '10.0.0.1',
        'vm.cocoonstack.io/vnc-port': '5901',
      }),
    );
    const before = await waitFor(
      'all reference pods Ready',
      async () => {
        const pods = await podsOf(name);
        return memberNames(name).every((n) => podReady(pods.get(n))) ? pods : undefined;
      },
      QUICK_MS,
    );

    await rig.startOp();
    const { pods } = await waitRunning(name, QUICK_MS);
    expect(uidsOf(pods)).toEqual(uidsOf(before));
    // Several more passes (each triggered by a pod change) still leave every pod alone.
    for (const [i, pod] of [`${name}-0`, `${name}-1`, `${name}-vnc`].entries()) {
      await pokeAndWaitForPass(name, pod, i + 1);
    }
    expect((await cocoonSetWorkflowState(temporal, ns, name)).passes).toBeGreaterThanOrEqual(4);
    expect(uidsOf(await podsOf(name))).toEqual(uidsOf(before));
    for (const n of memberNames(name))
      expect(
        rec.podHistory(n).some((s) => s.deleting),
        n,
      ).toBe(false);
    // No create, delete or pod patch at all: the generation stamps already matched.
    const types = new Set((await scheduledActivities(temporal, ns, name)).map((a) => a.type));
    expect(types.has('cocoonSetReadWorld')).toBe(true);
    for (const t of ['cocoonSetCreatePod', 'cocoonSetDeletePod', 'cocoonSetPatchPodAnnotations']) {
      expect(types.has(t), t).toBe(false);
    }
  }, 300_000);

  it('deleting a set deletes its pods, GCs the tags per main-only (:hibernate of all, :latest of sub-agents and toolboxes), drops the finalizer; the CR is gone and the workflow completes', async () => {
    const name = 'gc';
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    await waitRunning(name);
    const members: (string | number)[] = [0, 1, 2, 'tools', 'vnc'];
    // Tags for every VM, so each delete (or its absence) is observable.
    for (const m of members) {
      for (const tag of [Tags.hibernate, Tags.latest])
        await pushSnapshotTag(registry, vmOf(name, m), tag, AGENT_V1);
    }
    for (const m of members) expect(await headTag(registry, vmOf(name, m), Tags.latest)).toBe(200);
    const mark = registryLog.mark();

    await sets.delete(name);
    await sets.waitUntil(name, 'gone', (x) => x === undefined, QUICK_MS);

    expect((await podsOf(name)).size).toBe(0);
    const history = rec.cocoonSetHistory(name);
    expect(history.some((s) => s.deleting && s.finalizers.includes(Finalizers.cocoonSet))).toBe(true);
    const sortedVMs = members.map((m) => vmOf(name, m)).sort();
    // Deletion step 1 (docs/cocoonset.md#deletion-and-registry-gc): the VM names were stashed on the set
    // before its pods went.
    expect(history.some((s) => s.annotations[Annotations.deleteVMNames] === sortedVMs.join(','))).toBe(true);
    for (const m of members) {
      expect(await headTag(registry, vmOf(name, m), Tags.hibernate), `${m}:hibernate`).toBe(404);
      expect(await headTag(registry, vmOf(name, m), Tags.latest), `${m}:latest`).toBe(m === 0 ? 200 : 404);
    }
    // Each DELETE once: :hibernate always, then :latest unless kept (main-only keeps only the main's). They
    // run together, so in any order (the workflow tests check they are scheduled in sorted VM order).
    const deletes = registryLog
      .since(mark)
      .filter((r) => r.method === 'DELETE')
      .map((r) => r.path.replace(/^\/v2\/(.*)\/manifests\/(.*)$/, '$1:$2'));
    expect(deletes.sort()).toEqual(
      sortedVMs
        .flatMap((vm) => (vm === vmOf(name, 0) ? [`${vm}:hibernate`] : [`${vm}:hibernate`, `${vm}:latest`]))
        .sort(),
    );
    const handle = temporal.workflow.getHandle(cocoonSetWorkflowId(ns, name));
    await waitFor(
      'cocoonset workflow completed',
      async () => (await handle.describe()).status.name === 'COMPLETED',
      QUICK_MS,
    );
  });

  it('deleting a set whose main and a sub-agent have Wake CocoonHibernations (Active): each CR ends Pending, never Waking or Failed (deliberate fix: the reference goes Waking on the stopping VM, then Failed at 5m0s)', async () => {
    const name = 'gc-crs';
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    await waitRunning(name);
    const held = { 'wake-main': `${name}-0`, 'wake-sub': `${name}-1` };
    for (const [cr, pod] of Object.entries(held)) await crs.create(cr, pod, 'Wake');
    for (const cr of Object.keys(held)) await crs.waitPhase(cr, 'Active', QUICK_MS);

    await sets.delete(name);
    await sets.waitUntil(name, 'gone', (x) => x === undefined, QUICK_MS);
    for (const [cr, pod] of Object.entries(held)) {
      // The situation the rule is for: the watch showed the pod deleting with its VM stopped.
      expect(
        rec.podHistory(pod).some((s) => s.deleting && !s.running),
        pod,
      ).toBe(true);
      await waitFor(
        `${cr} Pending: pod gone`,
        async () => {
          const got = await crs.get(cr);
          return got?.status?.phase === 'Pending' &&
            readyOf(got)?.message === `pod ${ns}/${pod} not yet present`
            ? true
            : undefined;
        },
        QUICK_MS,
        { describe: () => rec.crHistory(cr).slice(-4) },
      );
      const phases = rec.phases(cr);
      expect(phases.slice(phases.indexOf('Active')), cr).toEqual(['Active', 'Pending']);
    }
    for (const cr of Object.keys(held)) await crs.delete(cr);
    for (const cr of Object.keys(held)) await crs.waitGone(cr, QUICK_MS);
  }, 180_000);

  it('suspend (retain): every managed VM hibernated with its :hibernate tag, phase Suspended with the same pods; un-suspend: each VM woken from its own snapshot, Running again; no tag deleted while suspended, the leftovers dropped once the VMs run', async () => {
    const name = 'suspend';
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    const { pods } = await waitRunning(name);
    const before = uidsOf(pods);
    // The static toolbox (`vnc`) has no VM lifecycle: the suspend gate skips it.
    const managed = [0, 1, 2, 'tools'];
    const mark = registryLog.mark();

    await sets.patchSpec(name, { suspend: true });
    const suspended = await sets.waitPhase(name, 'Suspended', BRING_UP_MS);
    await rec.waitSeen('cocoonset', suspended);
    // Suspending first (the watch recorder sees every status write, however short the phase).
    const phases = rec.cocoonSetHistory(name).map((x) => x.phase);
    expect(phases.lastIndexOf('Suspending')).toBeGreaterThan(phases.lastIndexOf('Running'));
    expect(suspended.status?.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'False',
      reason: 'Stable',
    });
    const hibernated = await podsOf(name);
    expect(uidsOf(hibernated)).toEqual(before);
    for (const m of managed) {
      const pod = hibernated.get(`${name}-${m}`)!;
      expect(pod.metadata?.annotations?.[Annotations.hibernate], `${m}`).toBe('true');
      expect(lifecycleOf(pod).state, `${m}`).toBe(LifecycleStates.hibernated);
      expect(await headTag(registry, vmOf(name, m), Tags.hibernate), `${m}:hibernate`).toBe(200);
      expect(
        sim.state().vms.some((v) => v.name === vmOf(name, m)),
        `${m} VM stopped`,
      ).toBe(false);
    }
    // One writer per VM: the annotation was written by each pod's VM workflow (started by the set's ask).
    for (const m of managed) {
      const d = await temporal.workflow.getHandle(vmWorkflowId(ns, `${name}-${m}`)).describe();
      expect(d.status.name, `${m}`).toBe('RUNNING');
    }

    const startedBefore = sim.state().started.length;
    // Nothing deleted a tag while the set suspended.
    expect(registryLog.since(mark).filter((r) => r.method === 'DELETE')).toEqual([]);
    await sets.patchSpec(name, { suspend: false });
    const after = await waitRunning(name);
    expect(uidsOf(after.pods)).toEqual(before);
    const woken = sim.state().started.slice(startedBefore);
    for (const m of managed) {
      const vm = vmOf(name, m);
      const mine = woken.filter((v) => v.name === vm);
      expect(mine, `${vm} woken once`).toHaveLength(1);
      // From its own hibernate snapshot (the node-local copy of it, or a pull of the tag): the VM's state.
      expect(mine[0]!.source, vm).toMatch(new RegExp(`^wake .*${vm}`));
      expect(after.pods.get(`${name}-${m}`)!.metadata?.annotations?.[Annotations.hibernate]).toBeUndefined();
    }
    // Once each VM runs again its leftover tag is dropped (vk would restore from it on a later create).
    for (const m of managed) {
      await waitFor(
        `${m}:hibernate dropped after the wake`,
        async () => ((await headTag(registry, vmOf(name, m), Tags.hibernate)) === 404 ? true : undefined),
        QUICK_MS,
      );
    }
    // The VM workflows asked to wake are done: no CocoonHibernation targets these pods.
    for (const m of managed) {
      const h = temporal.workflow.getHandle(vmWorkflowId(ns, `${name}-${m}`));
      await waitFor(
        `${m} VM workflow completed`,
        async () => (await h.describe()).status.name === 'COMPLETED',
        QUICK_MS,
      );
    }
  });

  it('deliberate (patch sub-agents-restore-suspend-state; the Go operator forks it again, and vk-cocoon refuses a fork over its snapshot for good): a sub-agent deleted while the set is suspended is not re-created while suspended; at the un-suspend it comes back restored from its own snapshot, Running, and its tag is dropped once it runs', async () => {
    const name = 'subgone';
    const subPod = `${name}-1`;
    const subVM = vmOf(name, 1);
    const pods = await suspendedSet(name);
    const firstUID = pods.get(subPod)!.metadata?.uid;
    expect(await headTag(registry, subVM, Tags.hibernate)).toBe(200);
    await kube.core.deleteNamespacedPod({ name: subPod, namespace: ns });
    await waitFor('the sub-agent gone', async () => !(await podsOf(name)).has(subPod) || undefined, QUICK_MS);
    // A pass after the delete, still suspended: nothing created (the reference's rule).
    await pokeAndWaitForPass(name, `${name}-0`, 1);
    expect((await podsOf(name)).has(subPod)).toBe(false);
    expect((await sets.get(name))?.status?.phase).toBe('Suspended');
    const startedBefore = sim.state().started.length;

    await sets.patchSpec(name, { suspend: false });
    const after = await waitRunning(name);
    const sub = after.pods.get(subPod)!;
    expect(sub.metadata?.uid).not.toBe(firstUID);
    expect(sub.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBe('true');
    expect(sourcesOf(sim, subVM, startedBefore)).toEqual([
      expect.stringMatching(new RegExp(`^restore .*${subVM}`)),
    ]);
    await waitTagGone(subVM, 'the sub-agent tag dropped once it runs');
  });

  it('deliberate (patch sub-agents-restore-open-wake; the Go operator forks it again, and vk-cocoon refuses a fork over its snapshot for good): a sub-agent deleted during the un-suspend before its VM runs again comes back restored from its own snapshot, Running, and its tag is dropped once it runs', async () => {
    const name = 'subwake';
    const subPod = `${name}-1`;
    const subVM = vmOf(name, 1);
    await suspendedSet(name);
    // vk-cocoon cannot pull the sub-agent's snapshot: its VM stays in the tag after the un-suspend.
    sim.faults.add({ vm: `^${subVM}$`, op: 'wake.pull.fail' });
    await sets.patchSpec(name, { suspend: false });
    await waitFor(
      'a failed wake of the sub-agent',
      () => rec.podHistory(subPod).some((p) => p.lifecycle === LifecycleStates.failed) || undefined,
      QUICK_MS,
    );
    const state = () => cocoonSetWorkflowState(temporal, ns, name);
    expect((await state()).wakesOpen).toContain(subPod);
    const firstUID = (await podsOf(name)).get(subPod)!.metadata?.uid;
    const startedBefore = sim.state().started.length;

    await kube.core.deleteNamespacedPod({ name: subPod, namespace: ns });
    const created = await recreatedPod(name, subPod, firstUID);
    expect(created.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBe('true');
    expect(await headTag(registry, subVM, Tags.hibernate)).toBe(200);
    sim.faults.clear();
    await waitRunning(name);
    expect(sourcesOf(sim, subVM, startedBefore)).toEqual([
      expect.stringMatching(new RegExp(`^restore .*${subVM}`)),
    ]);
    await waitTagGone(subVM, 'the sub-agent tag dropped once it runs');
    await waitFor(
      'the wake seen',
      async () => ((await state()).wakesOpen.length === 0 ? true : undefined),
      QUICK_MS,
    );
  }, 300_000);

  it('deliberate (patch sub-agents-restore-open-wake, helper-58): a sub-agent deleted the moment its VM runs again after the un-suspend, before its VM workflow dropped the tag, comes back Running (restored from the tag while it is there, as vk-cocoon does for a main), not forked over the tag and refused for good; the tag is dropped once it runs', async () => {
    const name = 'subran';
    const subPod = `${name}-1`;
    const subVM = vmOf(name, 1);
    const pods = await suspendedSet(name);
    const firstUID = pods.get(subPod)!.metadata?.uid;
    await sets.patchSpec(name, { suspend: false });
    // Delete the pod as soon as its VM runs: its VM workflow looks every 5 s, so the tag is still there.
    await waitFor(
      'the sub-agent VM running again',
      async () => {
        const p = (await podsOf(name)).get(subPod);
        return p && vmIDOf(p) !== '' && (p.status?.containerStatuses ?? []).some((c) => c.state?.running)
          ? p
          : undefined;
      },
      QUICK_MS,
      { intervalMs: 10 },
    );
    await kube.core.deleteNamespacedPod({ name: subPod, namespace: ns });
    const tagAtDelete = await headTag(registry, subVM, Tags.hibernate);
    const startedBefore = sim.state().started.length;
    const created = await recreatedPod(name, subPod, firstUID);
    await waitRunning(name);
    await waitTagGone(subVM, 'the sub-agent tag dropped once it runs');
    // While the tag was there the new pod restores it; once gone (the VM workflow was quicker) it is forked.
    const restored = created.metadata?.annotations?.[Annotations.restoreFromHibernate] === 'true';
    if (tagAtDelete === 200 && restored)
      expect(sourcesOf(sim, subVM, startedBefore)).toEqual([expect.stringMatching(/^restore /)]);
    else expect(sourcesOf(sim, subVM, startedBefore)).toEqual([expect.stringMatching(/^fork /)]);
    expect(await setEvents(name, EventReasons.subAgentRebuilding)).toEqual([]);
  }, 300_000);

  it('deliberate (patch vm-tells-set-spent-tag; before it the set did not know, and vk-cocoon restored the new main from the spent tag, rolling the VM back): an un-suspend whose tag DELETE the registry refuses after the VM ran, then the main deleted: no main is created while the tag is there (the set retries the DELETE, ReconcileFailed saying so); once the registry takes it the main is created fresh, not restored', async () => {
    const name = 'spentdel';
    const mainPod = `${name}-0`;
    const mainVM = vmOf(name, 0);
    await suspendedSet(name);
    const deletes = refuseTagDeletes(mainVM);
    await sets.patchSpec(name, { suspend: false });
    await waitRunning(name);
    // The main's VM workflow tells the set once its DELETE failed (the activity's retries spent).
    await waitFor(
      'the set told the main tag is spent',
      async () =>
        (await cocoonSetWorkflowState(temporal, ns, name)).spentTags?.[mainPod] === mainVM || undefined,
      QUICK_MS,
    );
    expect(deletes.refused).toBeGreaterThan(0);
    expect(await headTag(registry, mainVM, Tags.hibernate)).toBe(200);
    const started = startsOf(mainVM);

    await kube.core.deleteNamespacedPod({ name: mainPod, namespace: ns });
    const refusedAtDelete = deletes.refused;
    // The set retries the DELETE itself before it would create the main; a refusal fails its pass, saying so.
    const held = await waitFor(
      'the pass failed on the spent tag',
      async () => {
        const c = (await sets.get(name))?.status?.conditions?.find((x) => x.type === CONDITION_PROGRESSING);
        return c?.message.startsWith(`drop spent hibernate snapshot ${mainVM}: `) ? c : undefined;
      },
      2 * QUICK_MS,
    );
    expect(held.reason).toBe(ConditionReasons.reconcileFailed);
    expect(deletes.refused).toBeGreaterThan(refusedAtDelete);
    expect((await podsOf(name)).has(mainPod)).toBe(false);
    expect(started()).toEqual([]);

    deletes.down = false;
    await waitTagGone(mainVM, 'the spent tag dropped once the registry takes the DELETE');
    await waitRunning(name);
    // Booted from the image (the VM ran after the tag: its state went with the deleted pod), not restored.
    expect(started().map((v) => v.source)).toEqual([expect.not.stringMatching(/^(restore|wake) /)]);
  }, 300_000);

  it("deliberate (patch replaced-main-keeps-snapshot; before it the drifted main's :hibernate tag was dropped with the pod, and the Go operator keeps it too): a suspended set un-suspended together with a resources edit gets a new main with the new resources, restored from the main's own snapshot, not booted fresh; the toolbox wakes in place; every tag dropped once the VMs run (the sub-agents, woken in place, are re-forked from the restored main once nothing holds their drift back)", async () => {
    const name = 'resize';
    const before = uidsOf(await suspendedSet(name));
    const mainVM = vmOf(name, 0);
    expect(await headTag(registry, mainVM, Tags.hibernate)).toBe(200);
    const startedBefore = sim.state().started.length;

    const resources = {
      requests: { cpu: '250m', memory: '128Mi' },
      limits: { cpu: '500m', memory: '256Mi' },
    };
    await sets.patchSpec(name, { suspend: false, agent: { resources } });
    const after = await waitRunning(
      name,
      BRING_UP_MS,
      (p) =>
        p.metadata?.labels?.[Labels.role] !== 'main' ||
        p.spec?.containers[0]?.resources?.requests?.cpu === '250m',
    );
    const main = after.pods.get(`${name}-0`)!;
    expect(main.metadata?.uid).not.toBe(before[`${name}-0`]);
    const started = sim.state().started.slice(startedBefore);
    const mainStarts = started.filter((v) => v.name === mainVM);
    // Once: the old pod was replaced without being woken first; the new one from the main's own snapshot
    // (the set's wake marks it restore-from-hibernate; the image is unchanged). Booted fresh it would say
    // `clone`.
    expect(mainStarts.map((v) => v.source)).toEqual([
      expect.stringMatching(new RegExp(`^restore .*${mainVM}`)),
    ]);
    expect(after.pods.get(`${name}-tools`)!.metadata?.uid).toBe(before[`${name}-tools`]);
    expect(started.find((v) => v.name === vmOf(name, 'tools'))?.source).toMatch(/^wake /);
    for (const m of [0, 1, 2, 'tools']) {
      await waitFor(
        `${m}:hibernate dropped once its VM runs`,
        async () => ((await headTag(registry, vmOf(name, m), Tags.hibernate)) === 404 ? true : undefined),
        QUICK_MS,
      );
    }
  });

  it("deliberate (patch replaced-main-keeps-snapshot; before it the main was woken once its round ended, then replaced running and booted fresh): a suspend undone together with a resources edit while vk still pushes the main's snapshot: the main is not woken; once the push lands it is replaced and restored from that snapshot with the new resources, the tag dropped once it runs", async () => {
    const name = 'midround';
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    const { pods } = await waitRunning(name);
    const before = uidsOf(pods);
    const mainPod = `${name}-0`;
    const mainVM = vmOf(name, 0);
    await sim.addFault({ vm: `^${mainVM}$`, op: 'hibernate.push.delay', delayMs: 4_000, count: 1 });
    await sets.patchSpec(name, { suspend: true });
    await waitFor(
      'the main hibernating',
      async () =>
        lifecycleOf((await podsOf(name)).get(mainPod)!).state === LifecycleStates.hibernating || undefined,
      QUICK_MS,
    );
    const startedBefore = sim.state().started.length;
    await sets.patchSpec(name, { suspend: false, agent: { resources: { requests: { cpu: '250m' } } } });
    const after = await waitRunning(
      name,
      BRING_UP_MS,
      (p) =>
        p.metadata?.labels?.[Labels.role] !== 'main' ||
        p.spec?.containers[0]?.resources?.requests?.cpu === '250m',
    );
    expect(after.pods.get(mainPod)!.metadata?.uid).not.toBe(before[mainPod]);
    expect(sourcesOf(sim, mainVM, startedBefore)).toEqual([
      expect.stringMatching(new RegExp(`^restore .*${mainVM}`)),
    ]);
    await waitTagGone(mainVM, 'the main tag dropped once it runs');
  });

  it('deliberate (patch replaced-main-keeps-snapshot; before it the main was replaced and booted fresh on the new image, its state dropped): a suspended set un-suspended together with an agent image edit keeps its main hibernated, its snapshot in, and says SnapshotImageMismatch with both ways out; the image set back, the main wakes in place from its snapshot and the tag goes', async () => {
    const name = 'reimage';
    const before = uidsOf(await suspendedSet(name));
    const mainVM = vmOf(name, 0);
    const startedBefore = sim.state().started.length;

    await sets.patchSpec(name, { suspend: false, agent: { image: AGENT_V2 } });
    const held = await waitFor(
      'SnapshotImageMismatch on Progressing',
      async () => {
        const cs = await sets.get(name);
        const c = cs?.status?.conditions?.find((x) => x.type === 'Progressing');
        return c?.reason === 'SnapshotImageMismatch' ? c : undefined;
      },
      QUICK_MS,
    );
    expect(held.message).toContain(`set spec.agent.image back to ${AGENT_V1} to keep that state`);
    expect(held.message).toContain(`delete the snapshot to boot ${AGENT_V2} fresh`);
    const main = (await podsOf(name)).get(`${name}-0`)!;
    expect(main.metadata?.uid).toBe(before[`${name}-0`]);
    expect(main.metadata?.annotations?.[Annotations.hibernate]).toBe('true');
    expect(await headTag(registry, mainVM, Tags.hibernate)).toBe(200);
    expect(sourcesOf(sim, mainVM, startedBefore)).toEqual([]);

    await sets.patchSpec(name, { agent: { image: AGENT_V1 } });
    const after = await waitRunning(name);
    expect(after.pods.get(`${name}-0`)!.metadata?.uid).toBe(before[`${name}-0`]);
    expect(sourcesOf(sim, mainVM, startedBefore)).toEqual([
      expect.stringMatching(new RegExp(`^wake .*${mainVM}`)),
    ]);
    await waitTagGone(mainVM, 'the main tag dropped once it runs');
  });

  it("deliberate (patch restores-check-snapshot-image; before it the set re-created the main restore-marked under the new image and vk-cocoon brought the old VM back under it): a suspended set whose agent image is edited and whose main pod is then deleted creates no main, says SnapshotImageMismatch naming the snapshot's image; the image set back, the main is restored from its snapshot", async () => {
    const name = 'reimagedel';
    const mainPod = `${name}-0`;
    const mainVM = vmOf(name, 0);
    await suspendedSet(name);
    await sets.patchSpec(name, { agent: { image: AGENT_V2 } });
    const startedBefore = sim.state().started.length;
    await kube.core.deleteNamespacedPod({ name: mainPod, namespace: ns });
    const held = await waitFor(
      'SnapshotImageMismatch on Progressing',
      async () => {
        const c = (await sets.get(name))?.status?.conditions?.find((x) => x.type === 'Progressing');
        return c?.reason === 'SnapshotImageMismatch' ? c : undefined;
      },
      QUICK_MS,
    );
    expect(held.message).toContain(`set spec.agent.image back to ${AGENT_V1} to keep that state`);
    expect((await podsOf(name)).has(mainPod)).toBe(false);
    expect(await headTag(registry, mainVM, Tags.hibernate)).toBe(200);

    await sets.patchSpec(name, { agent: { image: AGENT_V1 } });
    await waitFor(
      'the main created again',
      async () => (await podsOf(name)).has(mainPod) || undefined,
      QUICK_MS,
    );
    await sets.waitPhase(name, 'Suspended', BRING_UP_MS);
    expect(sourcesOf(sim, mainVM, startedBefore)).toEqual([
      expect.stringMatching(new RegExp(`^restore .*${mainVM}`)),
    ]);
  }, 300_000);

  it('deliberate (patch replaced-main-keeps-snapshot): a pinned set (spec.nodeName) suspended, then un-suspended together with a resources edit: its main is not woken in place first (the drift would then replace the running VM) but replaced, restored on the pinned node from its snapshot with the new resources, the tag dropped once it runs', async () => {
    const mig = migrationNodes('pinresize');
    const { nodeA, sims } = mig;
    const name = 'pinresize';
    const vm = vmOf(name, 0);
    try {
      await mig.start();
      await createSet(name, mig.spec(nodeA));
      await sets.waitPhase(name, 'Running', BRING_UP_MS);
      const first = (await podsOf(name)).get(`${name}-0`)!;
      await sets.patchSpec(name, { suspend: true });
      await sets.waitPhase(name, 'Suspended', BRING_UP_MS);
      expect(await headTag(registry, vm, Tags.hibernate)).toBe(200);
      const startedBefore = sims[0]!.state().started.length;

      await sets.patchSpec(name, { suspend: false, agent: { resources: { requests: { cpu: '250m' } } } });
      const main = await waitFor(
        `${name}-0 running again with the new resources`,
        async () => {
          const p = (await podsOf(name)).get(`${name}-0`);
          return p &&
            live(p) &&
            podReady(p) &&
            vmIDOf(p) !== '' &&
            p.spec?.containers[0]?.resources?.requests?.cpu === '250m'
            ? p
            : undefined;
        },
        BRING_UP_MS,
      );
      expect(main.metadata?.uid).not.toBe(first.metadata?.uid);
      expect(main.spec?.nodeName).toBe(nodeA);
      const starts = sims[0]!
        .state()
        .started.slice(startedBefore)
        .filter((v) => v.name === vm);
      expect(starts.map((v) => v.source)).toEqual([expect.stringMatching(new RegExp(`^restore .*${vm}`))]);
      await sets.waitPhase(name, 'Running', BRING_UP_MS);
      await waitFor(
        'the tag dropped once the VM runs',
        async () => ((await headTag(registry, vm, Tags.hibernate)) === 404 ? true : undefined),
        QUICK_MS,
      );
    } finally {
      await dropSet(name);
      await mig.stop();
    }
  });

  it('a scale-down while suspended: un-suspended, the removed sub-agent is deleted and its :hibernate tag dropped; scaled up again, the slot comes back as a fresh fork of the main (a leftover tag would make vk-cocoon refuse the clone)', async () => {
    const name = 'shrink';
    const spec = { ...realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place), toolboxes: [] };
    await createSet(name, { ...spec, agent: { ...spec.agent, replicas: 2 } });
    await sets.waitPhase(name, 'Running', BRING_UP_MS);
    const removed = vmOf(name, 2);
    await sets.patchSpec(name, { suspend: true });
    await sets.waitPhase(name, 'Suspended', BRING_UP_MS);
    expect(await headTag(registry, removed, Tags.hibernate)).toBe(200);

    await sets.patchSpec(name, { agent: { ...spec.agent, replicas: 1 } });
    await sets.patchSpec(name, { suspend: false });
    await sets.waitPhase(name, 'Running', BRING_UP_MS);
    await waitFor(
      `${name}-2 deleted`,
      async () => ((await podsOf(name)).has(`${name}-2`) ? undefined : true),
      QUICK_MS,
    );
    await waitFor(
      `${removed}:hibernate dropped`,
      async () => ((await headTag(registry, removed, Tags.hibernate)) === 404 ? true : undefined),
      QUICK_MS,
    );

    const startedBefore = sim.state().started.length;
    await sets.patchSpec(name, { agent: { ...spec.agent, replicas: 2 } });
    const running = await sets.waitPhase(name, 'Running', BRING_UP_MS);
    expect(running.status?.readyAgents).toBe(3);
    const up = sim
      .state()
      .started.slice(startedBefore)
      .filter((v) => v.name === removed);
    expect(up).toHaveLength(1);
    expect(up[0]!.source).toMatch(/^fork /);
    await sets.delete(name);
    await sets.waitUntil(name, 'gone', (x) => x === undefined, QUICK_MS);
  });

  it('deliberate (patch removed-gone-drops-tag; found by helper-55: before it the tag stayed, and the slot scaled up again was restored from the old snapshot): a sub-agent deleted while suspended and then scaled away has its :hibernate tag dropped at the un-suspend; scaled up again, the slot is a fresh fork of the main', async () => {
    const name = 'shrinkgone';
    const spec = { ...realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place), toolboxes: [] };
    await createSet(name, { ...spec, agent: { ...spec.agent, replicas: 2 } });
    await sets.waitPhase(name, 'Running', BRING_UP_MS);
    const removed = vmOf(name, 2);
    await sets.patchSpec(name, { suspend: true });
    await sets.waitPhase(name, 'Suspended', BRING_UP_MS);
    await kube.core.deleteNamespacedPod({ name: `${name}-2`, namespace: ns });
    await waitFor(
      `${name}-2 gone`,
      async () => !(await podsOf(name)).has(`${name}-2`) || undefined,
      QUICK_MS,
    );
    expect(await headTag(registry, removed, Tags.hibernate)).toBe(200);

    await sets.patchSpec(name, { agent: { ...spec.agent, replicas: 1 } });
    await sets.patchSpec(name, { suspend: false });
    await sets.waitPhase(name, 'Running', BRING_UP_MS);
    await waitTagGone(removed, `${removed}:hibernate dropped`);

    const startedBefore = sim.state().started.length;
    await sets.patchSpec(name, { agent: { ...spec.agent, replicas: 2 } });
    const running = await sets.waitPhase(name, 'Running', BRING_UP_MS);
    expect(running.status?.readyAgents).toBe(3);
    expect(sourcesOf(sim, removed, startedBefore)).toEqual([expect.stringMatching(/^fork /)]);
    await sets.delete(name);
    await sets.waitUntil(name, 'gone', (x) => x === undefined, QUICK_MS);
  });

  it('hibernatePolicy release on a one-seat node: suspend frees the seat (pod deleted, tag kept, node hint); with the seat taken meanwhile the wake reports WakeNoCapacity, and a re-suspend then releases the waiting restore pod at once; once the seat frees the main is restored on the hinted node from its snapshot, the tag dropped, the hint cleared', async () => {
    const pool = `${ns}-rel`;
    const node = `${ns}-rel-node`;
    const one = new VkSimulator({
      kube: kube.kc,
      registry,
      nodeName: node,
      pool,
      cpuClass: place.cpuClass,
      seats: 1,
      tickMs: 500,
    });
    const name = 'release';
    const mainPod = `${name}-0`;
    const vm = vmOf(name, 0);
    try {
      await one.start();
      await createSet(name, releaseSpec(pool));
      await sets.waitPhase(name, 'Running', BRING_UP_MS);
      const first = (await podsOf(name)).get(mainPod)!;
      expect(first.spec?.nodeName).toBe(node);

      await sets.patchSpec(name, { suspend: true });
      const suspended = await sets.waitPhase(name, 'Suspended', BRING_UP_MS);
      await waitFor(
        'the main pod deleted',
        async () => ((await podsOf(name)).has(mainPod) ? undefined : true),
        QUICK_MS,
      );
      expect(suspended.metadata.annotations?.[Annotations.hibernatedOnNode]).toBe(node);
      expect(suspended.metadata.annotations?.[Annotations.deleteVMNames]).toBe(vm);
      expect(await headTag(registry, vm, Tags.hibernate)).toBe(200);
      // The keep-snapshot flag was on the pod before its delete (the recorder saw every version of it).
      expect(rec.podHistory(mainPod).some((x) => x.uid === first.metadata?.uid && x.keepSnapshot)).toBe(true);
      expect(
        metricSum(await metrics(), 'cocoon_operator_slot_release_pods_deleted_total', { cocoonset: name }),
      ).toBe(1);

      // Another set takes the only seat meanwhile.
      await createSet('blocker', releaseSpec(pool));
      await sets.waitPhase('blocker', 'Running', BRING_UP_MS);

      const startedBefore = one.state().started.length;
      await sets.patchSpec(name, { suspend: false });
      await waitFor(
        'WakeNoCapacity',
        async () => ((await setEvents(name, EventReasons.wakeNoCapacity)).length > 0 ? true : undefined),
        QUICK_MS,
      );
      const [noCapacity] = await setEvents(name, EventReasons.wakeNoCapacity);
      expect(noCapacity!.type).toBe('Warning');
      expect(noCapacity!.message).toContain(`main pod ${mainPod} unschedulable: 0/1 nodes are available`);
      expect((await sets.get(name))?.status?.phase).toBe('Waking');
      const restorePod = (await podsOf(name)).get(mainPod)!;
      expect(restorePod.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBe('true');
      expect(restorePod.spec?.nodeName ?? '').toBe('');
      expect(await headTag(registry, vm, Tags.hibernate)).toBe(200);
      expect(
        metricSum(await metrics(), 'cocoon_operator_slot_release_wake_unschedulable_total', {
          cocoonset: name,
        }),
      ).toBeGreaterThan(0);

      // Suspended again while the restore pod waits for the seat: it runs no VM, so it is released as it is
      // (no hibernate round that no node could ever finish); the tag and the hint stay for the next wake.
      await sets.patchSpec(name, { suspend: true });
      const again = await sets.waitPhase(name, 'Suspended', QUICK_MS);
      expect(again.metadata.annotations?.[Annotations.hibernatedOnNode]).toBe(node);
      await waitFor(
        'the unbound restore pod deleted',
        async () => ((await podsOf(name)).has(mainPod) ? undefined : true),
        QUICK_MS,
      );
      expect(await headTag(registry, vm, Tags.hibernate)).toBe(200);
      await sets.patchSpec(name, { suspend: false });
      await sets.waitPhase(name, 'Waking', QUICK_MS);

      await sets.delete('blocker');
      await sets.waitUntil('blocker', 'gone', (x) => x === undefined, QUICK_MS);
      const running = await sets.waitPhase(name, 'Running', BRING_UP_MS);
      expect(running.metadata.annotations?.[Annotations.hibernatedOnNode]).toBeUndefined();
      expect((await podsOf(name)).get(mainPod)?.spec?.nodeName).toBe(node);
      await expectReleasedWakeDone(name, vm, one, startedBefore, 'hint-node');
    } finally {
      for (const set of [name, 'blocker']) await sets.delete(set).catch(() => undefined);
      for (const set of [name, 'blocker'])
        await sets.waitUntil(set, 'gone', (x) => x === undefined, QUICK_MS).catch(() => undefined);
      await one.stop();
      await kube.core.deleteNode({ name: node }).catch(() => undefined);
    }
  }, 300_000);

  it('a released wake whose restore main waits for a seat follows a nodePool edit: the unbound pod is deleted and recreated in the new pool, restored there from the same tag, the tag dropped, the hint cleared, placement "pool" (fails without released-wake-follows-placement: it waited Waking on the old pod)', async () => {
    const full = `${ns}-wk-full`;
    const free = `${ns}-wk-free`;
    const [fullNode, freeNode] = [`${full}-node`, `${free}-node`];
    const simOf = (pool: string, nodeName: string, seats: number) =>
      new VkSimulator({
        kube: kube.kc,
        registry,
        nodeName,
        pool,
        cpuClass: place.cpuClass,
        seats,
        tickMs: 500,
      });
    const sims = [simOf(full, fullNode, 1), simOf(free, freeNode, 4)];
    const name = 'wake-moves';
    const mainPod = `${name}-0`;
    const vm = vmOf(name, 0);
    try {
      for (const s of sims) await s.start();
      await createSet(name, releaseSpec(full));
      await sets.waitPhase(name, 'Running', BRING_UP_MS);
      await sets.patchSpec(name, { suspend: true });
      await sets.waitPhase(name, 'Suspended', BRING_UP_MS);
      await waitFor(
        'the main pod deleted',
        async () => ((await podsOf(name)).has(mainPod) ? undefined : true),
        QUICK_MS,
      );
      await createSet('wake-blocker', releaseSpec(full));
      await sets.waitPhase('wake-blocker', 'Running', BRING_UP_MS);

      await sets.patchSpec(name, { suspend: false });
      await waitFor(
        'WakeNoCapacity',
        async () => ((await setEvents(name, EventReasons.wakeNoCapacity)).length > 0 ? true : undefined),
        QUICK_MS,
      );
      const waiting = (await podsOf(name)).get(mainPod)!;
      expect(waiting.spec?.nodeName ?? '').toBe('');
      expect(waiting.spec?.nodeSelector?.[Labels.nodePool]).toBe(full);

      const startedOnFree = sims[1]!.state().started.length;
      await sets.patchSpec(name, { nodePool: free });
      const moved = await waitFor(
        `${mainPod} running on ${freeNode}`,
        async () => {
          const p = (await podsOf(name)).get(mainPod);
          return p && p.spec?.nodeName === freeNode && podReady(p) && vmIDOf(p) !== '' ? p : undefined;
        },
        QUICK_MS,
        { describe: () => rec.podHistory(mainPod).slice(-2) },
      );
      expect(moved.metadata?.uid).not.toBe(waiting.metadata?.uid);
      expect(moved.spec?.nodeSelector?.[Labels.nodePool]).toBe(free);
      expect(moved.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBe('true');
      const running = await sets.waitPhase(name, 'Running', QUICK_MS);
      expect(running.metadata.annotations?.[Annotations.hibernatedOnNode]).toBeUndefined();
      await expectReleasedWakeDone(name, vm, sims[1]!, startedOnFree, 'pool');
      // The pod that waited for a seat was never bound and never ran a VM.
      const versions = rec.podHistory(mainPod).filter((x) => x.uid === waiting.metadata?.uid);
      expect(versions.filter((x) => x.vmID !== '' || x.running)).toEqual([]);
    } finally {
      for (const set of [name, 'wake-blocker']) await sets.delete(set).catch(() => undefined);
      for (const set of [name, 'wake-blocker'])
        await sets.waitUntil(set, 'gone', (x) => x === undefined, QUICK_MS).catch(() => undefined);
      for (const s of sims) await s.stop();
      for (const n of [fullNode, freeNode]) await kube.core.deleteNode({ name: n }).catch(() => undefined);
    }
  }, 300_000);

  it('a set created without a CPU class that gains one (adding it is allowed once): the classless main is adopted, and a new sub-agent comes up next to it without the class selector, which the node would refuse (fails without sub-agents-follow-main-class: refused for ever)', async () => {
    const name = 'gains-class';
    const classless = realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place);
    delete classless.snapshotCompatibilityClass;
    classless.agent = { image: AGENT_V1, replicas: 0 };
    classless.toolboxes = [];
    try {
      await createSet(name, classless);
      await sets.waitPhase(name, 'Running', BRING_UP_MS);
      const main = (await podsOf(name)).get(`${name}-0`)!;
      expect(main.spec?.nodeSelector?.[Labels.snapshotCPUClass]).toBeUndefined();

      await sets.patchSpec(name, { snapshotCompatibilityClass: 'e2e-other-class', agent: { replicas: 1 } });
      const sub = await waitFor(
        `${name}-1 Ready next to the main`,
        async () => {
          const p = (await podsOf(name)).get(`${name}-1`);
          return p && podReady(p) && vmIDOf(p) !== '' ? p : undefined;
        },
        QUICK_MS,
        { describe: () => rec.podHistory(`${name}-1`).slice(-2) },
      );
      expect(sub.spec?.nodeName).toBe(main.spec?.nodeName);
      expect(sub.spec?.nodeSelector?.[Labels.snapshotCPUClass]).toBeUndefined();
      expect((await podsOf(name)).get(`${name}-0`)?.metadata?.uid).toBe(main.metadata?.uid);
      await sets.waitUntil(
        name,
        'Running with 2 agents',
        (cs) => cs?.status?.phase === 'Running' && cs.status.readyAgents === 2,
        QUICK_MS,
      );
    } finally {
      await dropSet(name);
    }
  }, 300_000);

  it('a pinned set moved to a second node (spec.nodeName edited): Migrating, the main snapshotted on the first node, deleted there only once vk reports it hibernated (vk takes 8 s from the push to the removal: fails without migration-waits-for-quiesce), recreated on the second and restored from its snapshot (its state kept), the tag dropped once it runs there', async () => {
    const mig = migrationNodes('mig');
    const { nodeA, nodeB, sims } = mig;
    const name = 'migrate';
    const mainPod = `${name}-0`;
    const vm = vmOf(name, 0);
    try {
      await mig.start();
      await createSet(name, mig.spec(nodeA));
      await sets.waitPhase(name, 'Running', BRING_UP_MS);
      const first = (await podsOf(name)).get(mainPod)!;
      expect(first.spec?.nodeName).toBe(nodeA);
      const startedOnB = sims[1]!.state().started.length;
      // vk takes longer from the push to the VM's removal than the migration's 5 s look: the tag is in
      // while the old main still says `hibernating`.
      await sims[0]!.addFault({ vm: `^${vm}$`, op: 'hibernate.remove.delay', delayMs: 8_000, count: 1 });

      await sets.patchSpec(name, { nodeName: nodeB });
      const moved = await waitFor(
        `${mainPod} running on ${nodeB}`,
        async () => {
          const p = (await podsOf(name)).get(mainPod);
          return p && live(p) && p.spec?.nodeName === nodeB && podReady(p) && vmIDOf(p) !== ''
            ? p
            : undefined;
        },
        BRING_UP_MS,
      );
      expect(moved.metadata?.uid).not.toBe(first.metadata?.uid);
      expect(moved.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBe('true');
      const restored = sims[1]!
        .state()
        .started.slice(startedOnB)
        .filter((v) => v.name === vm);
      expect(restored).toHaveLength(1);
      expect(restored[0]!.source).toMatch(new RegExp(`^restore .*${vm}`));
      await rec.waitSeen('cocoonset', await sets.waitPhase(name, 'Running', BRING_UP_MS));
      // Migrating was written before the old main was asked to hibernate, and vk had reported the old pod
      // hibernated (after the push and the removal) before its delete.
      const phases = rec.cocoonSetHistory(name).map((x) => x.phase);
      expect(phases).toContain('Migrating');
      const old = rec.podHistory(mainPod).filter((x) => x.uid === first.metadata?.uid);
      const asked = old.findIndex((x) => x.hibernate === 'true');
      expect(asked).toBeGreaterThanOrEqual(0);
      const deleting = old.find((x) => x.deleting || x.type === 'DELETED');
      expect({ hibernate: deleting?.hibernate, lifecycle: deleting?.lifecycle }).toEqual({
        hibernate: 'true',
        lifecycle: LifecycleStates.hibernated,
      });
      await waitFor(
        'the tag dropped once the VM runs on the new node',
        async () => ((await headTag(registry, vm, Tags.hibernate)) === 404 ? true : undefined),
        QUICK_MS,
      );
    } finally {
      await dropSet(name);
      await mig.stop();
    }
  });

  it('a migration whose final :hibernate tag DELETE keeps failing (the registry resets every DELETE of that tag) stays Migrating with Progressing ReconcileFailed carrying the error, the main already running on the new node; once the registry answers the tag is deleted and the set goes Running (fails without migration-failure-keeps-phase: the failed pass wrote Running, the tag still in)', async () => {
    const mig = migrationNodes('migdel');
    const { nodeA, nodeB } = mig;
    const name = 'mig-del';
    const mainPod = `${name}-0`;
    const vm = vmOf(name, 0);
    try {
      await mig.start();
      await createSet(name, mig.spec(nodeA));
      await sets.waitPhase(name, 'Running', BRING_UP_MS);
      const deletes = refuseTagDeletes(vm);

      const edited = await sets.patchSpec(name, { nodeName: nodeB });
      const dropError = `migrate: drop hibernate snapshot ${vm}: `;
      // The pass ends failed once the DELETE activity's retries are spent; the set's status says so (read
      // from the watch: a pass after the backoff may overwrite it).
      const failed = await waitFor(
        'a pass failed on the tag drop',
        () =>
          rec
            .cocoonSetHistory(name)
            .find(
              (x) =>
                x.generation === edited.metadata.generation && x.progressing.message.startsWith(dropError),
            ),
        QUICK_MS,
        { describe: () => rec.cocoonSetHistory(name).slice(-3) },
      );
      expect({
        phase: failed.phase,
        status: failed.progressing.status,
        reason: failed.progressing.reason,
      }).toEqual({
        phase: 'Migrating',
        status: 'False',
        reason: ConditionReasons.reconcileFailed,
      });
      // Every attempt of the DELETE activity (3) was refused.
      expect(deletes.refused).toBeGreaterThanOrEqual(3);
      const main = (await podsOf(name)).get(mainPod)!;
      expect({ node: main.spec?.nodeName, vmID: vmIDOf(main) !== '' }).toEqual({ node: nodeB, vmID: true });
      expect(await headTag(registry, vm, Tags.hibernate)).toBe(200);

      deletes.down = false;
      await waitFor(
        'the tag dropped once the registry answers',
        async () => ((await headTag(registry, vm, Tags.hibernate)) === 404 ? true : undefined),
        QUICK_MS,
      );
      const running = await sets.waitPhase(name, 'Running', QUICK_MS);
      expect(running.status?.conditions?.find((c) => c.type === CONDITION_PROGRESSING)?.reason).not.toBe(
        ConditionReasons.reconcileFailed,
      );
      await rec.waitSeen('cocoonset', running);
      // From the edit on, the set said Migrating, through every failed pass, until it said Running.
      const history = rec.cocoonSetHistory(name).filter((x) => x.generation === running.metadata.generation);
      const phases = history.map((x) => x.phase).filter((p, i, all) => p !== all[i - 1]);
      expect(phases.slice(phases.indexOf('Migrating'))).toEqual(['Migrating', 'Running']);
      const failedPhases = history
        .filter((x) => x.progressing.message.startsWith(dropError))
        .map((x) => x.phase);
      expect(new Set(failedPhases)).toEqual(new Set(['Migrating']));
    } finally {
      await dropSet(name);
      await mig.stop();
    }
  }, 180_000);

  it('a migration to a node that never takes the pod (a Node of the pool that no vk-cocoon serves) leaves the restore main unbound; the pin moved to a real node, that pod is deleted and recreated with the new pin, restored there from the tag, the tag dropped, the set Running (fails without migration-follows-pin: it stalled Migrating)', async () => {
    const mig = migrationNodes('ghost');
    const { nodeA, nodeB, sims } = mig;
    const ghost = `${ns}-ghost-node`;
    const name = 'mig-ghost';
    const mainPod = `${name}-0`;
    const vm = vmOf(name, 0);
    try {
      await mig.start();
      // A Node object with the pool's labels and nothing behind it: the placement gate lets the migration
      // start (a pin to a node that does not exist at all is NoMatchingNode, e2e cocoonset-faults a5).
      await kube.core.createNode({
        body: {
          metadata: {
            name: ghost,
            labels: {
              [Labels.nodePool]: mig.pool,
              [Labels.snapshotCPUClass]: place.cpuClass,
              [Labels.hostname]: ghost,
            },
          },
        },
      });
      await createSet(name, mig.spec(nodeA));
      await sets.waitPhase(name, 'Running', BRING_UP_MS);
      const first = (await podsOf(name)).get(mainPod)!;

      await sets.patchSpec(name, { nodeName: ghost });
      const stuck = await waitFor(
        `the restore main pinned to ${ghost}`,
        async () => {
          const p = (await podsOf(name)).get(mainPod);
          return p && live(p) && p.metadata?.uid !== first.metadata?.uid && requiredHostname(p) === ghost
            ? p
            : undefined;
        },
        QUICK_MS,
      );
      expect(stuck.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBe('true');
      expect(stuck.spec?.nodeName ?? '').toBe('');
      expect(await headTag(registry, vm, Tags.hibernate)).toBe(200);
      expect((await sets.get(name))?.status?.phase).toBe('Migrating');

      const startedOnB = sims[1]!.state().started.length;
      await sets.patchSpec(name, { nodeName: nodeB });
      const moved = await waitFor(
        `${mainPod} running on ${nodeB}`,
        async () => {
          const p = (await podsOf(name)).get(mainPod);
          return p && live(p) && p.spec?.nodeName === nodeB && podReady(p) && vmIDOf(p) !== ''
            ? p
            : undefined;
        },
        QUICK_MS,
        { describe: () => rec.podHistory(mainPod).slice(-2) },
      );
      expect(moved.metadata?.uid).not.toBe(stuck.metadata?.uid);
      expect(requiredHostname(moved)).toBe(nodeB);
      expect(moved.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBe('true');
      const restored = sims[1]!
        .state()
        .started.slice(startedOnB)
        .filter((v) => v.name === vm);
      expect(restored).toHaveLength(1);
      expect(restored[0]!.source).toMatch(new RegExp(`^restore .*${vm}`));
      await waitFor(
        'the tag dropped once the VM runs on the new node',
        async () => ((await headTag(registry, vm, Tags.hibernate)) === 404 ? true : undefined),
        QUICK_MS,
      );
      await sets.waitPhase(name, 'Running', QUICK_MS);
      // The pod pinned to the missing node was never bound and never ran a VM.
      const ghostVersions = rec.podHistory(mainPod).filter((x) => x.uid === stuck.metadata?.uid);
      expect(ghostVersions.filter((x) => x.vmID !== '' || x.running)).toEqual([]);
    } finally {
      await dropSet(name);
      await mig.stop();
      await kube.core.deleteNode({ name: ghost }).catch(() => undefined);
    }
  }, 180_000);

  it('a main hibernated by a CocoonHibernation and then deleted is recreated with restore-from-hibernate, and its VM comes back from the snapshot', async () => {
    const name = 'restore';
    const mainPod = `${name}-0`;
    const vm = vmOf(name, 0);
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    const { pods } = await waitRunning(name);
    const original = pods.get(mainPod)!;
    const firstId = vmIDOf(original);

    await crs.create('hib-main', mainPod, 'Hibernate');
    await crs.waitPhase('hib-main', 'Hibernated', QUICK_MS);
    expect(await headTag(registry, vm, Tags.hibernate)).toBe(200);
    const hibernated = (await podsOf(name)).get(mainPod)!;
    expect(lifecycleOf(hibernated).state).toBe(LifecycleStates.hibernated);
    expect(vmIDOf(hibernated)).toBe('');
    expect(sim.state().vms.some((v) => v.name === vm)).toBe(false);

    // The simulator's log of every VM it brought up is the record (no sampling can miss a short-lived one).
    const startedSince = startsOf(vm);
    await kube.core.deleteNamespacedPod({ name: mainPod, namespace: ns });
    const recreated = await waitFor(
      'main recreated with restore-from-hibernate',
      async () => {
        const p = (await podsOf(name)).get(mainPod);
        return p && p.metadata?.uid !== original.metadata?.uid && live(p) ? p : undefined;
      },
      QUICK_MS,
    );
    expect(recreated.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBe('true');
    await waitFor('the restored VM in the simulator', () => startedSince().length > 0, QUICK_MS);
    const restored = startedSince();
    expect(restored).toHaveLength(1);
    expect(restored[0]!.id).not.toBe(firstId);
    expect(restored[0]!.source).toMatch(new RegExp(`^restore .*${vm}(:hibernate)?$`));
    // The new incarnation ran the restored VM (a running container with its VM id) at some point.
    const incarnation = await waitFor(
      'the recreated main running the restored VM',
      () => {
        const v = rec
          .podHistory(mainPod)
          .filter((s) => s.uid !== original.metadata?.uid && s.vmID === restored[0]!.id && s.running);
        return v.length > 0 ? v : undefined;
      },
      QUICK_MS,
      { describe: () => rec.podHistory(mainPod).slice(-6) },
    );
    expect(incarnation.every((s) => s.restore)).toBe(true);
  });

  it.each([
    {
      name: 'spent',
      flow: 'unpinned (the main create)',
      patch: 'create-waits-for-spent-tag',
      phase: undefined,
    },
    {
      name: 'spent-pin',
      flow: 'pinned (the migration restores)',
      patch: 'main-restores-wait-for-spent-tag',
      phase: 'Migrating',
    },
    {
      name: 'spent-susp',
      flow: 'retain-suspended (the suspend restores)',
      patch: 'main-restores-wait-for-spent-tag',
      phase: 'Suspending',
    },
    {
      name: 'spent-del',
      flow: 'unpinned, the CR then deleted',
      patch: 'spent-tag-outlives-cr',
      phase: undefined,
      deleteCR: true,
    },
  ] as {
    name: string;
    flow: string;
    patch: string;
    phase?: 'Migrating' | 'Suspending';
    deleteCR?: true;
  }[])(
    'a main woken by a CocoonHibernation whose spent :hibernate tag the registry will not DELETE (Waking, SnapshotDeleteFailing), then deleted, the set $flow: not recreated while the tag is there (vk-cocoon would restore from it), the set says why (Progressing=False SpentSnapshotTag) and the CR keeps retrying the DELETE without the pod; once the registry answers the main is recreated and boots fresh (deviation, fails without $patch: the VM came back as it was at the hibernate)',
    async ({ name, phase, deleteCR }) => {
      const mainPod = `${name}-0`;
      const vm = vmOf(name, 0);
      const cr = `${name}-main`;
      let deletes: { refused: number; down: boolean } | undefined;
      try {
        const spec = realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place);
        deletes = await spendMainTag(name, cr, phase === 'Migrating' ? { ...spec, nodeName } : spec);
        if (phase === 'Suspending') {
          // The CR holds the VM awake: the set's hibernate request loses, the set stays Suspending.
          await sets.patchSpec(name, { suspend: true });
          await sets.waitUntil(name, 'Suspending', (cs) => cs?.status?.phase === 'Suspending', QUICK_MS);
        }

        const startedSince = startsOf(vm);
        const woken = (await podsOf(name)).get(mainPod)!;
        await kube.core.deleteNamespacedPod({ name: mainPod, namespace: ns });
        await waitFor(
          'the old main gone',
          async () => ((await podsOf(name)).has(mainPod) ? undefined : true),
          QUICK_MS,
        );
        // The set's pass that found the main missing says why it does not create it.
        const spentCondition = (cs: CocoonSet | undefined) =>
          cs?.status?.conditions?.find(
            (c) => c.type === CONDITION_PROGRESSING && c.reason === ConditionReasons.spentSnapshotTag,
          );
        const heldSet = await sets.waitUntil(
          name,
          'Progressing=False SpentSnapshotTag',
          (cs) => spentCondition(cs) !== undefined,
          QUICK_MS,
        );
        const held = spentCondition(heldSet)!;
        expect(held.status).toBe('False');
        expect(held.message).toContain(`pod ${ns}/${mainPod} (VM ${vm}, cocoonhibernation ${cr})`);
        expect(heldSet?.status?.phase).toBe(phase ?? 'Pending');
        expect((await podsOf(name)).has(mainPod)).toBe(false);
        // The CR's wake goes on retrying the DELETE with the pod gone.
        const refusedAtDelete = deletes.refused;
        await waitFor(
          'a DELETE retried with the pod gone',
          () => deletes!.refused > refusedAtDelete,
          QUICK_MS,
        );
        expect(await headTag(registry, vm, Tags.hibernate)).toBe(200);
        expect(startedSince()).toEqual([]);
        if (deleteCR) {
          // The CR's deletion retries the DELETE too, the CR kept and the main held meanwhile: two passes of
          // the set that began after the deletion (it looks again every 5 s while it holds) created nothing.
          await crs.delete(cr);
          await waitFor(
            'the CR being deleted',
            async () => (await crs.get(cr))?.metadata?.deletionTimestamp !== undefined,
            QUICK_MS,
          );
          await waitForPasses(name, 2, 'two passes of the set since the CR deletion');
          expect((await crs.get(cr))?.metadata?.deletionTimestamp).toBeDefined();
          expect((await podsOf(name)).has(mainPod)).toBe(false);
          expect(await headTag(registry, vm, Tags.hibernate)).toBe(200);
          expect(startedSince()).toEqual([]);
        }

        deletes.down = false;
        // The failed pass retries on its error backoff (1 s doubling to 60 s), then the set's 5 s look.
        const recreated = await newLivePod(name, mainPod, woken, 'main recreated');
        expect(await headTag(registry, vm, Tags.hibernate)).toBe(404);
        expect(recreated.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBeUndefined();
        await waitFor('the VM brought up again in the simulator', () => startedSince().length > 0, QUICK_MS);
        const started = startedSince();
        expect(started).toHaveLength(1);
        expect(started[0]!.source).not.toMatch(/^restore /);
        if (deleteCR) await crs.waitGone(cr, QUICK_MS);
        else {
          const done = await crs.waitPhase(cr, 'Active', QUICK_MS);
          expect(done.status?.conditions?.map((c) => c.type)).not.toContain(CONDITION_DELETE_FAILING);
        }
        if (phase === 'Suspending') await sets.patchSpec(name, { suspend: false });
        await waitRunning(name);
      } finally {
        if (deletes) deletes.down = false;
        await crs.delete(cr).catch(() => undefined);
        await crs.waitGone(cr, QUICK_MS).catch(() => undefined);
        await dropSet(name);
      }
    },
    300_000,
  );

  it('a main whose spent :hibernate tag the registry will not DELETE, its image then edited: the running main is not deleted for the re-create while the tag is there (the re-create would wait for it, the VM down), the set says why; once the registry answers the main is replaced, booted fresh with the new image (deviation, fails without drift-waits-for-spent-tag: deleted at once, then held)', async () => {
    const name = 'spent-drift';
    const mainPod = `${name}-0`;
    const vm = vmOf(name, 0);
    const cr = `${name}-main`;
    let deletes: { refused: number; down: boolean } | undefined;
    try {
      deletes = await spendMainTag(name, cr, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
      const woken = (await podsOf(name)).get(mainPod)!;
      const startedSince = startsOf(vm);
      await sets.patchSpec(name, { agent: { image: AGENT_V2 } });
      const heldSet = await sets.waitUntil(
        name,
        'Progressing=False SpentSnapshotTag',
        (cs) =>
          cs?.status?.conditions?.some(
            (c) => c.type === CONDITION_PROGRESSING && c.reason === ConditionReasons.spentSnapshotTag,
          ) === true,
        QUICK_MS,
      );
      expect(heldSet?.status?.observedGeneration).toBe(2);
      // Two more passes of the set (it looks again every 5 s while it holds) keep the running main.
      await waitForPasses(name, 2, 'two passes of the set since the hold');
      const kept = (await podsOf(name)).get(mainPod);
      expect(kept?.metadata?.uid).toBe(woken.metadata?.uid);
      expect(kept?.metadata?.deletionTimestamp).toBeUndefined();
      expect(startedSince()).toEqual([]);

      deletes.down = false;
      const replaced = await newLivePod(name, mainPod, woken, 'main replaced');
      expect(replaced.metadata?.annotations?.[Annotations.image]).toBe(AGENT_V2);
      expect(replaced.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBeUndefined();
      await waitFor('the VM brought up again in the simulator', () => startedSince().length > 0, QUICK_MS);
      expect(startedSince()[0]!.source).toBe(`clone ${AGENT_V2}`);
      expect(await headTag(registry, vm, Tags.hibernate)).toBe(404);
      await waitRunning(name);
    } finally {
      if (deletes) deletes.down = false;
      await crs.delete(cr).catch(() => undefined);
      await crs.waitGone(cr, QUICK_MS).catch(() => undefined);
      await dropSet(name);
    }
  }, 300_000);

  it('a main the released-seat wake restored whose :hibernate tag the registry will not DELETE, then deleted: not restored from that spent tag, the set retries the DELETE and says why; once the registry answers the main is created fresh (deviation, fails without set-spent-tag-holds: the VM came back as it was at the suspend)', async () => {
    const name = 'spent-rel';
    const mainPod = `${name}-0`;
    const vm = vmOf(name, 0);
    let deletes: { refused: number; down: boolean } | undefined;
    const progressing = async () =>
      (await sets.get(name))?.status?.conditions?.find((c) => c.type === CONDITION_PROGRESSING);
    try {
      await createSet(name, releaseSpec(place.pool));
      await sets.waitPhase(name, 'Running', BRING_UP_MS);
      await sets.patchSpec(name, { suspend: true });
      await sets.waitPhase(name, 'Suspended', BRING_UP_MS);
      await waitFor(
        'the main pod released',
        async () => ((await podsOf(name)).has(mainPod) ? undefined : true),
        QUICK_MS,
      );
      deletes = refuseTagDeletes(vm);
      await sets.patchSpec(name, { suspend: false });
      await waitFor(
        "the wake's tag DELETE refused",
        async () =>
          (await progressing())?.message?.includes('wake: drop hibernate snapshot') ? true : undefined,
        QUICK_MS,
      );
      const woken = (await podsOf(name)).get(mainPod)!;
      expect(live(woken)).toBe(true);
      const startedSince = startsOf(vm);
      await kube.core.deleteNamespacedPod({ name: mainPod, namespace: ns });
      await waitFor(
        'the old main gone',
        async () => ((await podsOf(name)).has(mainPod) ? undefined : true),
        QUICK_MS,
      );
      const held = await waitFor(
        'the set retrying the DELETE of the spent tag',
        async () => {
          const c = await progressing();
          return c?.message?.includes('drop spent hibernate snapshot') ? c : undefined;
        },
        2 * QUICK_MS,
      );
      expect(held.message).toContain(`pod ${ns}/${mainPod} is created once it is gone`);
      const refusedAtHold = deletes.refused;
      await waitFor('another DELETE refused', () => deletes!.refused > refusedAtHold, 2 * QUICK_MS);
      expect((await podsOf(name)).has(mainPod)).toBe(false);
      expect(startedSince()).toEqual([]);
      expect(await headTag(registry, vm, Tags.hibernate)).toBe(200);

      deletes.down = false;
      const recreated = await newLivePod(name, mainPod, woken, 'main recreated');
      expect(recreated.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBeUndefined();
      await waitFor('the VM brought up again in the simulator', () => startedSince().length > 0, QUICK_MS);
      expect(startedSince()[0]!.source).not.toMatch(/^restore /);
      expect(await headTag(registry, vm, Tags.hibernate)).toBe(404);
      await sets.waitPhase(name, 'Running', QUICK_MS);
    } finally {
      if (deletes) deletes.down = false;
      await dropSet(name);
    }
  }, 300_000);

  /**
   * Deletes the main pod of set `name` and CocoonHibernation `cr` at once, then expects the set's
   * recreated main to come back from the main's `:hibernate` snapshot (one VM brought up, restored), the
   * CR's deletion to end once that VM runs, the spent tag to be gone, and the set Running. Returns the
   * recreated main as first seen.
   */
  async function deleteMainWithCR(name: string, cr: string, original: V1Pod): Promise<V1Pod> {
    const mainPod = `${name}-0`;
    const vm = vmOf(name, 0);
    const startedSince = startsOf(vm);
    await Promise.all([kube.core.deleteNamespacedPod({ name: mainPod, namespace: ns }), crs.delete(cr)]);
    const recreated = await waitFor(
      'main recreated',
      async () => {
        const p = (await podsOf(name)).get(mainPod);
        return p && p.metadata?.uid !== original.metadata?.uid ? p : undefined;
      },
      QUICK_MS,
    );
    await waitFor('the VM brought up again in the simulator', () => startedSince().length > 0, QUICK_MS);
    const restored = startedSince();
    expect(restored).toHaveLength(1);
    expect(restored[0]!.source).toMatch(new RegExp(`^restore .*${vm}(:hibernate)?$`));
    // The CR's deletion ends once the restored VM runs, and only then drops the spent tag.
    await crs.waitGone(cr, QUICK_MS);
    expect(await headTag(registry, vm, Tags.hibernate)).toBe(404);
    await waitFor(
      'the recreated main running the restored VM',
      () =>
        rec
          .podHistory(mainPod)
          .some((s) => s.uid !== original.metadata?.uid && s.vmID === restored[0]!.id && s.running) ||
        undefined,
      QUICK_MS,
    );
    await waitRunning(name);
    return recreated;
  }

  it('a main hibernated by a CocoonHibernation, deleted together with that CR, still comes back from its snapshot; the tag goes once it runs (deliberate fix: the reference drops the tag at once and the recreated main boots fresh)', async () => {
    const name = 'restore-both';
    const mainPod = `${name}-0`;
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    const { pods } = await waitRunning(name);
    await crs.create('hib-both', mainPod, 'Hibernate');
    await crs.waitPhase('hib-both', 'Hibernated', QUICK_MS);
    expect(await headTag(registry, vmOf(name, 0), Tags.hibernate)).toBe(200);
    const recreated = await deleteMainWithCR(name, 'hib-both', pods.get(mainPod)!);
    // The deleting CR's phase is the set's restore intent, and the tag was still there for its probe.
    expect(recreated.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBe('true');
  }, 120_000);

  it('a main whose pod and CocoonHibernation are deleted while vk pushes its snapshot comes back from that snapshot once the push lands; the tag goes once it runs (found by a new-user run: the tag was dropped 0.3 s after the push)', async () => {
    const name = 'restore-mid';
    const mainPod = `${name}-0`;
    const vm = vmOf(name, 0);
    await createSet(name, realisticSpec(AGENT_V1, TOOLBOX_IMAGE, place));
    const { pods } = await waitRunning(name);
    await sim.addFault({ vm: `^${vm}$`, op: 'hibernate.push.delay', delayMs: 4_000, count: 1 });
    await crs.create('hib-mid', mainPod, 'Hibernate');
    await crs.waitPhase('hib-mid', 'Hibernating', QUICK_MS);
    await waitFor(
      'the simulator pushing',
      async () =>
        lifecycleOf((await podsOf(name)).get(mainPod)!).state === LifecycleStates.hibernating || undefined,
      QUICK_MS,
    );
    // End to end only: without the rule this fails when the deletion's DELETE beats the recreated pod's
    // create (1 of 2 runs here; otherwise the simulator's tag check at create wins the race). The rule's
    // deterministic proof is vm-hibernation.test.ts, "a hibernate round that ends while its pod and CR…".
    await deleteMainWithCR(name, 'hib-mid', pods.get(mainPod)!);
  }, 120_000);
});
