/**
 * CocoonSet faults end to end: the operator process (`src/worker.ts`) against the local stack's
 * kube-apiserver, Temporal dev server and registry, with the stack's vk-cocoon simulator running the VMs
 * (pool `default`, run-mode agents, so no base image is needed).
 *
 * (a) A Running set whose `agent.storage` is edited to `-5Gi`: the apiserver would reject the rebuilt pods,
 *     so no pod is deleted (same uids), the set says why (Progressing=False InvalidSpec and a Warning Event
 *     with the apiserver's wording) and still counts its Ready pods; the edit back is taken without a
 *     recreate (deliberate: the reference deletes the main first and then fails the create with 422).
 * (b) A set of 60 pods: the pass reads each pod as its compact summary (payload measured from the
 *     workflow history against the pods as the apiserver serves them), it scales to 0 and is deleted.
 *     The 1000-pod bound is proven at the workflow level (test/workflow/cocoonset-faults.test.ts): 1000
 *     simulated VMs are too heavy for this CI machine.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { Client } from '@temporalio/client';
import type { temporal as proto } from '@temporalio/proto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cocoonSetWorkflowId } from '../../src/api/ids.js';
import { Annotations, KIND_COCOONSET, Labels, VK_DEFAULT_NODE_NAME } from '../../src/api/keys.js';
import { podReady } from '../../src/api/pod.js';
import type { CocoonSet } from '../../src/api/types.js';
import { NO_IMAGE_RECHECK_MS } from '../../src/cocoonset/plan.js';
import { summarizePod } from '../../src/cocoonset/summary.js';
import type { KubeClients } from '../../src/kube/client.js';
import { waitFor } from '../support/wait.js';
import { pushBaseImage } from '../vksim/oci.js';
import { type CocoonSets, cocoonSetWorkflowState } from './cocoonset-harness.js';
import { operatorEvents } from './hibernation-harness.js';
import { OperatorRig } from './operator-rig.js';

const rig = new OperatorRig('cs-faults');
const { ns } = rig;
const IMAGE = 'ghcr.io/cocoonstack/agent:1.0';
const BRING_UP_MS = 240_000;

let kube: KubeClients;
let sets: CocoonSets;
let temporal: Client;
const made: string[] = [];

function spec(replicas: number, storage: string): CocoonSet['spec'] {
  return { agent: { image: IMAGE, mode: 'run', os: 'linux', replicas, storage } };
}

async function podsOf(name: string): Promise<V1Pod[]> {
  return (await kube.core.listNamespacedPod({ namespace: ns, labelSelector: `${Labels.cocoonSet}=${name}` }))
    .items;
}

const uids = (pods: V1Pod[]) => Object.fromEntries(pods.map((p) => [p.metadata!.name!, p.metadata!.uid!]));
const progressing = (cs: CocoonSet | undefined) =>
  cs?.status?.conditions?.find((c) => c.type === 'Progressing');
const current = (cs: CocoonSet | undefined) =>
  cs !== undefined && cs.status?.observedGeneration === cs.metadata.generation;

/** Waits until the pass set `name`'s workflow is in (or last ran) has finished: its `state` query's barrier. */
async function passFinished(name: string): Promise<void> {
  const st = await cocoonSetWorkflowState(temporal, ns, name);
  await waitFor(
    'that pass to finish',
    async () => {
      const s = await cocoonSetWorkflowState(temporal, ns, name);
      return s.passes >= st.passes && !s.passing ? s : undefined;
    },
    30_000,
  );
}

/** Waits until set `name` shows `Progressing=False InvalidSpec` at its current generation (60 s). */
async function invalidSpec(name: string): Promise<CocoonSet | undefined> {
  return sets.waitUntil(
    name,
    'Progressing=False InvalidSpec at the current generation',
    (cs) => current(cs) && progressing(cs)?.reason === 'InvalidSpec',
    60_000,
  );
}

/** Waits until set `name` shows `Progressing` reason `Stable` at its current generation (60 s). */
async function stable(name: string): Promise<CocoonSet | undefined> {
  return sets.waitUntil(
    name,
    'Progressing back to Stable at the current generation',
    (cs) => current(cs) && progressing(cs)?.reason === 'Stable',
    60_000,
  );
}

/** Sets (or, with undefined, removes) the rig namespace's `pod-security.kubernetes.io/enforce` label. */
async function setPodSecurity(level: string | undefined): Promise<void> {
  const key = 'pod-security.kubernetes.io/enforce';
  const current = await kube.core.readNamespace({ name: ns });
  const labels = { ...(current.metadata?.labels ?? {}) };
  if (level === undefined) delete labels[key];
  else labels[key] = level;
  await kube.core.replaceNamespace({
    name: ns,
    body: { ...current, metadata: { ...current.metadata, labels } },
  });
}

async function waitRunning(name: string, agents: number): Promise<CocoonSet> {
  return (await sets.waitUntil(
    name,
    `Running with ${agents} Ready agents`,
    (cs) => current(cs) && cs!.status?.phase === 'Running' && cs!.status.readyAgents === agents,
    BRING_UP_MS,
  ))!;
}

/**
 * The byte sizes of the results of the pod reads (`cocoonSetReadWorld`, `cocoonSetListPods`) in the set's
 * open run: local activity markers (`core_local_activity`: type in `data`, the result in `result`) and
 * regular activities (a run an older version started).
 */
async function podReadResultBytes(name: string): Promise<number[]> {
  // Every run of the set's workflow, newest first: a run that has just continued as new may not have
  // read anything yet (its pass starts with the next signal).
  const out: number[] = [];
  let runId: string | undefined;
  for (let runs = 0; runs < 50; runs++) {
    const history = await temporal.workflow.getHandle(cocoonSetWorkflowId(ns, name), runId).fetchHistory();
    out.push(...podReadsIn(history.events ?? []));
    runId =
      history.events?.[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId ?? undefined;
    if (!runId) break;
  }
  return out;
}

/** The result sizes of the pod reads (local or regular activities) in one run's history. */
function podReadsIn(events: proto.api.history.v1.IHistoryEvent[]): number[] {
  const types = new Map<string, string>();
  const out: number[] = [];
  const isPodRead = (type: string | undefined) =>
    type === 'cocoonSetReadWorld' || type === 'cocoonSetListPods';
  const bytes = (payloads: { data?: Uint8Array | null }[] | null | undefined) =>
    (payloads ?? []).reduce((n, p) => n + (p.data?.length ?? 0), 0);
  for (const e of events) {
    const m = e.markerRecordedEventAttributes;
    if (m?.markerName === 'core_local_activity') {
      const data = m.details?.data?.payloads?.[0]?.data;
      const marker = data
        ? (JSON.parse(Buffer.from(data).toString('utf8')) as { activity_type?: string })
        : {};
      if (isPodRead(marker.activity_type)) out.push(bytes(m.details?.result?.payloads));
      continue;
    }
    const s = e.activityTaskScheduledEventAttributes;
    if (s) types.set(String(e.eventId), s.activityType?.name ?? '');
    const c = e.activityTaskCompletedEventAttributes;
    if (!c) continue;
    if (!isPodRead(types.get(String(c.scheduledEventId)))) continue;
    out.push(bytes(c.result?.payloads));
  }
  return out;
}

describe('CocoonSet faults end to end (operator process, local stack)', () => {
  beforeAll(async () => {
    await rig.start();
    ({ kube, sets, temporal } = rig);
  }, 180_000);

  afterAll(
    () => rig.teardown({ workflowIds: made.map((name) => cocoonSetWorkflowId(ns, name)), vms: [] }),
    120_000,
  );

  it('(a) storage edited to -5Gi on a Running set: no pod deleted, Progressing=False InvalidSpec and a Warning Event in the apiserver wording, Ready pods still counted; the edit back is taken without a recreate', async () => {
    const name = 'edit';
    made.push(name);
    await sets.create(name, spec(1, '10Gi'));
    await waitRunning(name, 2);
    const before = uids(await podsOf(name));
    expect(Object.keys(before).sort()).toEqual(['edit-0', 'edit-1']);

    await sets.patchSpec(name, { agent: { storage: '-5Gi' } });
    const blocked = await invalidSpec(name);
    expect(progressing(blocked)?.status).toBe('False');
    expect(progressing(blocked)?.message).toContain(
      'spec.containers[0].resources.limits[ephemeral-storage]: Invalid value: "-5Gi": must be greater than or equal to 0 (from spec.agent.storage)',
    );
    expect(blocked?.status).toMatchObject({ phase: 'Running', readyAgents: 2, desiredAgents: 2 });
    // The pass that wrote the condition decided to touch nothing: every pod is the one from before, live.
    await passFinished(name);
    const during = await podsOf(name);
    expect(uids(during)).toEqual(before);
    expect(during.every((p) => p.metadata?.deletionTimestamp == null && podReady(p))).toBe(true);
    const events = await operatorEvents(kube, ns, name, 'InvalidSpec', KIND_COCOONSET);
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ type: 'Warning', message: progressing(blocked)?.message });

    await sets.patchSpec(name, { agent: { storage: '10Gi' } });
    const fixed = await stable(name);
    expect(fixed?.status).toMatchObject({ phase: 'Running', readyAgents: 2 });
    expect(uids(await podsOf(name))).toEqual(before);
  });

  it('(a2) agent.replicas edited to 2147483647 (the CRD admits any int32): InvalidSpec naming the bound, no pod touched, the operator process still up; the edit back is taken (new-user finding: it aborted the process on every start); then a clone image with a registry port: InvalidSpec with the webhook message, the main kept', async () => {
    const name = 'many';
    made.push(name);
    await sets.create(name, spec(1, '10Gi'));
    await waitRunning(name, 2);
    const before = uids(await podsOf(name));

    await sets.patchSpec(name, { agent: { replicas: 2147483647 } });
    const blocked = await invalidSpec(name);
    expect(progressing(blocked)?.message).toBe(
      "invalid spec, no pod changed: spec.agent.replicas: Invalid value: 2147483647: must be at most 1000 (this operator's bound on sub-agents per CocoonSet)",
    );
    // The pass that wrote it has finished, and nothing was touched.
    await passFinished(name);
    expect(uids(await podsOf(name))).toEqual(before);
    expect(rig.op?.child.exitCode).toBeNull();
    expect(rig.op?.child.signalCode).toBeNull();

    await sets.patchSpec(name, { agent: { replicas: 1 } });
    await stable(name);
    expect(uids(await podsOf(name))).toEqual(before);

    // A clone image vk-cocoon cannot resolve under its registry (a registry port): the webhook's rule, so the
    // live main is kept instead of being replaced by one that fails to come up.
    await sets.patchSpec(name, { agent: { mode: 'clone', image: 'localhost:5000/agent:1.0' } });
    const badImage = await invalidSpec(name);
    expect(progressing(badImage)?.message).toBe(
      'invalid spec, no pod changed: spec.agent.image "localhost:5000/agent:1.0" must be repo[:tag] when mode is clone (no registry port or digest)',
    );
    await passFinished(name);
    expect(uids(await podsOf(name))).toEqual(before);
    await sets.patchSpec(name, { agent: { mode: 'run', image: IMAGE } });
    await stable(name);
    expect(uids(await podsOf(name))).toEqual(before);
  });

  it('(a5) a nodePool no node has, then a pin to a node that does not exist: Progressing=False NoMatchingNode naming the labels, the live pods kept (new-user finding: the main was deleted and its replacement stayed Pending); the edit back is taken', async () => {
    const name = 'placed';
    made.push(name);
    await sets.create(name, spec(1, '10Gi'));
    await waitRunning(name, 2);
    const before = uids(await podsOf(name));
    const noNode = async (labels: string) => {
      const held = await sets.waitUntil(
        name,
        `Progressing=False NoMatchingNode for ${labels}`,
        (cs) =>
          current(cs) &&
          progressing(cs)?.reason === 'NoMatchingNode' &&
          progressing(cs)!.message!.includes(labels),
        60_000,
      );
      expect(progressing(held)?.message).toBe(
        `no node has the labels the spec gives the main (${labels}): main pod ${ns}/${name}-0 is kept and no pod changed; add such a node or change the spec`,
      );
      expect(held?.status?.phase).toBe('Running');
      await passFinished(name);
      expect(uids(await podsOf(name))).toEqual(before);
    };

    await sets.patchSpec(name, { nodePool: 'nowhere' });
    await noNode(`${Labels.nodePool}=nowhere`);
    const main = (await podsOf(name)).find((p) => p.metadata?.name === `${name}-0`);
    const pool = main?.spec?.nodeSelector?.[Labels.nodePool];
    await sets.patchSpec(name, { nodePool: pool, nodeName: 'no-such-node' });
    await noNode(`${Labels.nodePool}=${pool},${Labels.hostname}=no-such-node`);

    await sets.patchSpec(name, { nodeName: null });
    await stable(name);
    expect(uids(await podsOf(name))).toEqual(before);
  });

  it('(a6) a clone-mode image edit of the agent and a toolbox to a tag the registry lacks (a typo): Progressing=False ImageNotFound naming it for both, the live pods kept (new-user findings: the main, or the toolbox, was deleted and its replacement never came up); once the image is pushed the next look (30 s) takes the edit: main, sub-agent and toolbox recreated with it; later suspended and un-suspended together with another typo: held before any VM is woken (fails without drift-waits-for-clone-image)', async () => {
    const name = 'typo';
    made.push(name);
    const [v1, v2] = [`faults-e2e/${ns}:v1`, `faults-e2e/${ns}:v2`];
    await pushBaseImage(rig.registry, v1);
    await sets.create(name, {
      agent: { image: v1, mode: 'clone', replicas: 1, storage: '10Gi' },
      toolboxes: [{ name: 'tools', mode: 'clone', image: v1 }],
    });
    await waitRunning(name, 2);
    const before = uids(await podsOf(name));

    await sets.patchSpec(name, {
      agent: { image: v2 },
      toolboxes: [{ name: 'tools', mode: 'clone', image: v2 }],
    });
    const held = await sets.waitUntil(
      name,
      'Progressing=False ImageNotFound',
      (cs) => current(cs) && progressing(cs)?.reason === 'ImageNotFound',
      60_000,
    );
    expect(progressing(held)?.message).toBe(
      `clone image ${v2} is not in the registry: main pod ${ns}/${name}-0 is kept; clone image ${v2} is not in the registry: toolbox pod ${ns}/${name}-tools is kept and no pod changed; push the image or change spec.agent.image, spec.toolboxes[0].image`,
    );
    expect(held?.status?.phase).toBe('Running');
    const [event] = await operatorEvents(kube, ns, name, 'ImageNotFound', KIND_COCOONSET);
    expect(event?.type).toBe('Warning');
    await passFinished(name);
    expect(uids(await podsOf(name))).toEqual(before);

    await pushBaseImage(rig.registry, v2);
    const replaced = await waitFor(
      'main, sub-agent and toolbox recreated with the pushed image',
      async () => {
        const pods = await podsOf(name);
        const done =
          pods.length === 3 &&
          pods.every(
            (p) =>
              p.metadata?.uid !== before[p.metadata?.name ?? ''] &&
              p.metadata?.annotations?.[Annotations.image] === v2 &&
              podReady(p),
          );
        return done ? pods : undefined;
      },
      NO_IMAGE_RECHECK_MS + BRING_UP_MS,
    );
    expect(replaced).toHaveLength(3);
    await waitRunning(name, 2);

    // Suspended (retain), then un-suspended together with a typo: held before any VM is woken, the
    // hibernated pods kept with their tags (new-user finding: woken, deleted, tags dropped, replacement failed).
    await sets.patchSpec(name, { suspend: true });
    await sets.waitUntil(
      name,
      'Suspended',
      (cs) => current(cs) && cs?.status?.phase === 'Suspended',
      BRING_UP_MS,
    );
    const hibernated = uids(await podsOf(name));
    const v3 = `faults-e2e/${ns}:v3`;
    await sets.patchSpec(name, { suspend: false, agent: { image: v3 } });
    const heldAsleep = await sets.waitUntil(
      name,
      'Progressing=False ImageNotFound at the un-suspend',
      (cs) => current(cs) && progressing(cs)?.reason === 'ImageNotFound',
      60_000,
    );
    expect(heldAsleep?.status?.phase).toBe('Suspended');
    await passFinished(name);
    const asleep = await podsOf(name);
    expect(uids(asleep)).toEqual(hibernated);
    expect(asleep.every((p) => p.metadata?.annotations?.[Annotations.hibernate] === 'true')).toBe(true);
  }, 600_000);

  it('(a7) a set created pinned to a node that does not exist (a typo): its main waits unbound and the set says so (NoMatchingNode naming the pin; fails without pending-main-names-missing-node); suspended (retain), it is Suspended at once; un-suspended with the pin fixed, that pod is deleted and created again on the real node, Running (fails without retain-suspend-skips-unbound: Suspending for ever; and without unbound-main-follows-pin: Pending on the old pin for ever)', async () => {
    const name = 'pinfix';
    made.push(name);
    await sets.create(name, { ...spec(0, '10Gi'), nodeName: 'cocoon-pol' });
    const stuck = await waitFor(
      'the main created, pinned to the typo, unbound',
      async () => {
        const main = (await podsOf(name)).find((p) => p.metadata?.name === `${name}-0`);
        return main && (main.spec?.nodeName ?? '') === '' ? main : undefined;
      },
      60_000,
    );
    // The set says why it waits (fails without pending-main-names-missing-node: Pending Reconciling).
    const waiting = await sets.waitUntil(
      name,
      'Pending with Progressing=False NoMatchingNode',
      (cs) => current(cs) && progressing(cs)?.reason === 'NoMatchingNode',
      60_000,
    );
    expect(waiting?.status?.phase).toBe('Pending');
    expect(progressing(waiting)?.message).toContain(`${Labels.hostname}=cocoon-pol`);
    // Suspended meanwhile: nothing runs in that pod, so there is nothing to hibernate or wait for.
    await sets.patchSpec(name, { suspend: true });
    await sets.waitUntil(name, 'Suspended', (cs) => current(cs) && cs?.status?.phase === 'Suspended', 60_000);
    expect((await podsOf(name)).map((p) => p.metadata?.uid)).toEqual([stuck.metadata?.uid]);

    await sets.patchSpec(name, { suspend: false, nodeName: VK_DEFAULT_NODE_NAME });
    await sets.waitUntil(name, 'Running', (cs) => current(cs) && cs?.status?.phase === 'Running', 60_000);
    const main = (await podsOf(name)).find((p) => p.metadata?.name === `${name}-0`)!;
    expect(main.metadata?.uid).not.toBe(stuck.metadata?.uid);
    expect(main.spec?.nodeName).toBe(VK_DEFAULT_NODE_NAME);
  }, 240_000);

  it('(a3) a set named past 63 characters (the CRD admits 253; its pods cannot carry that label): InvalidSpec naming the label, no pod created; deleting it completes (new-user finding: every pass failed at the pod List with no status)', async () => {
    const name = 'a'.repeat(70);
    made.push(name);
    await sets.create(name, spec(1, '10Gi'));
    const blocked = await invalidSpec(name);
    expect(progressing(blocked)?.message).toContain(
      `pod ${name}-0 would be rejected: metadata.labels[${Labels.cocoonSet}]: Invalid value: "${name}": must be no more than 63 characters`,
    );
    const pods = (await kube.core.listNamespacedPod({ namespace: ns })).items;
    expect(pods.filter((p) => p.metadata?.name?.startsWith(name))).toEqual([]);
    await sets.delete(name);
    await sets.waitUntil(name, 'gone', (cs) => cs === undefined, 60_000);
  });

  it("(a4) a toolbox whose VM never comes up (a clone image the registry lacks): Progressing=False ToolboxFailing with vk-cocoon's message, recreated at most once per 30 s (new-user finding: a hot loop of hundreds of passes a minute)", async () => {
    const name = 'tbfail';
    made.push(name);
    const created = Date.now();
    await sets.create(name, {
      ...spec(0, '10Gi'),
      toolboxes: [{ name: 'tb', mode: 'clone', image: 'cocoonset-faults/missing:1' }],
    });
    const failing = await sets.waitUntil(
      name,
      'Progressing=False ToolboxFailing',
      (cs) => current(cs) && progressing(cs)?.reason === 'ToolboxFailing',
      90_000,
    );
    expect(progressing(failing)?.message).toContain(`toolbox pod ${ns}/${name}-tb failed: `);
    expect(progressing(failing)?.message).toContain('cocoonset-faults/missing:1');
    // Let one recreate happen, then count the toolbox pods the set created in all that time.
    const first = (await podsOf(name)).find((p) => p.metadata?.name === `${name}-tb`)?.metadata?.uid;
    await waitFor(
      'the toolbox recreated after its 30 s',
      async () => {
        const now = (await podsOf(name)).find((p) => p.metadata?.name === `${name}-tb`)?.metadata?.uid;
        return now !== undefined && now !== first ? now : undefined;
      },
      90_000,
    );
    await rig.rec.waitSeen('pod', (await podsOf(name)).find((p) => p.metadata?.name === `${name}-tb`)!);
    const uids = new Set(rig.rec.podHistory(`${name}-tb`).map((s) => s.uid));
    const elapsedS = (Date.now() - created) / 1000;
    expect(uids.size).toBeGreaterThanOrEqual(2);
    expect(uids.size).toBeLessThanOrEqual(Math.ceil(elapsedS / 30) + 1);
    const events = await operatorEvents(kube, ns, name, 'ToolboxFailing', KIND_COCOONSET);
    expect(events.length).toBeGreaterThanOrEqual(1);
  });

  it('(a8) a namespace whose LimitRange defaults cpu, a set that names memory only and a toolbox with a request for one resource and a limit for another: its pods carry the admitted defaults and stay (fails without drift-compares-admitted-resources: every pod drifted at once and was deleted again, on every pass, as in the reference)', async () => {
    const name = 'lrdefaults';
    made.push(name);
    await kube.core.createNamespacedLimitRange({
      namespace: ns,
      body: {
        metadata: { name: 'cpu-defaults' },
        spec: { limits: [{ type: 'Container', _default: { cpu: '500m' }, defaultRequest: { cpu: '250m' } }] },
      },
    });
    try {
      // The agent names a memory limit only; the toolbox a memory request and a cpu limit only (the
      // apiserver defaults its cpu request to that limit: the reference's rule saw drift there too).
      const memoryOnly = (replicas: number): CocoonSet['spec'] => ({
        agent: { ...spec(replicas, '10Gi').agent, resources: { limits: { memory: '1Gi' } } },
        toolboxes: [
          {
            name: 'tools',
            mode: 'run',
            image: IMAGE,
            resources: { requests: { memory: '64Mi' }, limits: { cpu: '1' } },
          },
        ],
      });
      await sets.create(name, memoryOnly(1));
      await waitRunning(name, 2);
      const before = await podsOf(name);
      const main = before.find((p) => p.metadata?.name === `${name}-0`)!;
      // The stack's apiserver did default them: the case is real, not staged.
      expect(main.metadata?.annotations?.['kubernetes.io/limit-ranger']).toBe(
        'LimitRanger plugin set: cpu request for container agent; cpu limit for container agent',
      );
      expect(main.spec?.containers[0]?.resources?.limits?.cpu).toBe('500m');
      // Another pass over the same pods (a scale-up): none of them drifts.
      await sets.patchSpec(name, { agent: { replicas: 2 } });
      await waitRunning(name, 3);
      const after = uids(await podsOf(name));
      expect(after).toMatchObject(uids(before));
    } finally {
      await kube.core.deleteNamespacedLimitRange({ namespace: ns, name: 'cpu-defaults' });
    }
  }, 300_000);

  it("(a9) a resources edit the namespace's ResourceQuota, LimitRange or Pod Security level would refuse: Progressing=False ExceedsNamespaceLimits with the apiserver's wording, the live main kept; an edit that fits once the old main no longer counts is taken (fails without drift-checks-namespace-limits: the main was deleted and its replacement refused, 403)", async () => {
    const name = 'quota';
    made.push(name);
    // No quota controller runs on the stack: the test writes the quota's status as it would (hard, and
    // nothing used yet); the apiserver's admission then counts each pod it admits into `used`.
    const hard = { 'limits.memory': '3Gi' };
    await kube.core.createNamespacedResourceQuota({
      namespace: ns,
      body: { metadata: { name: 'mem' }, spec: { hard } },
    });
    const quota = await kube.core.readNamespacedResourceQuota({ namespace: ns, name: 'mem' });
    quota.status = { hard, used: { 'limits.memory': '0' } };
    await kube.core.replaceNamespacedResourceQuotaStatus({ namespace: ns, name: 'mem', body: quota });
    await kube.core.createNamespacedLimitRange({
      namespace: ns,
      body: {
        metadata: { name: 'mem-max' },
        spec: { limits: [{ type: 'Container', max: { memory: '8Gi' } }] },
      },
    });
    try {
      const withMemory = (memory: string) => ({ agent: { resources: { limits: { memory } } } });
      await sets.create(name, { agent: { ...spec(0, '10Gi').agent, ...withMemory('1Gi').agent } });
      await waitRunning(name, 1);
      const counted = await kube.core.readNamespacedResourceQuota({ namespace: ns, name: 'mem' });
      expect(counted.status?.used?.['limits.memory']).toBe('1Gi');
      const before = uids(await podsOf(name));

      await sets.patchSpec(name, withMemory('4Gi'));
      const overQuota = await sets.waitUntil(
        name,
        'Progressing=False ExceedsNamespaceLimits',
        (cs) => current(cs) && progressing(cs)?.reason === 'ExceedsNamespaceLimits',
        60_000,
      );
      expect(progressing(overQuota)?.message).toBe(
        `the namespace would not admit a pod the spec needs: pods "${name}-0" is forbidden: exceeded quota: mem, requested: limits.memory=4Gi, used: limits.memory=0, limited: limits.memory=3Gi; the live pods (${ns}/${name}-0) are kept and no pod changed; change the spec's resources or storage, or the namespace's LimitRange or ResourceQuota`,
      );
      const [event] = await operatorEvents(kube, ns, name, 'ExceedsNamespaceLimits', KIND_COCOONSET);
      expect(event?.type).toBe('Warning');
      await passFinished(name);
      expect(uids(await podsOf(name))).toEqual(before);

      await sets.patchSpec(name, withMemory('16Gi'));
      const overMax = await sets.waitUntil(
        name,
        'ExceedsNamespaceLimits naming the LimitRange maximum',
        (cs) => current(cs) && (progressing(cs)?.message ?? '').includes('maximum memory usage'),
        60_000,
      );
      expect(progressing(overMax)?.message).toContain(
        `pods "${name}-0" is forbidden: maximum memory usage per Container is 8Gi, but limit is 16Gi`,
      );
      await passFinished(name);
      expect(uids(await podsOf(name))).toEqual(before);

      // 2Gi fits once the old main (1Gi) no longer counts: taken.
      await sets.patchSpec(name, withMemory('2Gi'));
      const replaced = await waitFor(
        'the main replaced with 2Gi',
        async () => {
          const main = (await podsOf(name)).find((p) => p.metadata?.name === `${name}-0`);
          return main && main.metadata?.uid !== before[`${name}-0`] && podReady(main) ? main : undefined;
        },
        BRING_UP_MS,
      );
      expect(replaced.spec?.containers[0]?.resources?.limits?.memory).toBe('2Gi');
      await stable(name);

      // The namespace now enforces the restricted Pod Security level, which the operator's pods (no
      // securityContext) never meet: the next edit keeps the main (found by a new-user run: deleted, then
      // every create refused).
      await setPodSecurity('restricted');
      const running = uids(await podsOf(name));
      await sets.patchSpec(name, withMemory('1Gi'));
      const insecure = await sets.waitUntil(
        name,
        'ExceedsNamespaceLimits naming PodSecurity',
        (cs) => current(cs) && (progressing(cs)?.message ?? '').includes('violates PodSecurity'),
        60_000,
      );
      expect(progressing(insecure)?.message).toContain(
        `pods "${name}-0" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false`,
      );
      await passFinished(name);
      expect(uids(await podsOf(name))).toEqual(running);
    } finally {
      await setPodSecurity(undefined);
      await kube.core.deleteNamespacedResourceQuota({ namespace: ns, name: 'mem' });
      await kube.core.deleteNamespacedLimitRange({ namespace: ns, name: 'mem-max' });
    }
  }, 300_000);

  it('(b) a set of 60 pods: the pass reads compact pods (payload per pod measured), scales to 0 and is deleted', async () => {
    const name = 'big';
    made.push(name);
    await sets.create(name, spec(59, '1Gi'));
    await waitRunning(name, 60);

    const served = await podsOf(name);
    const fullPerPod = Buffer.byteLength(JSON.stringify(served)) / served.length;
    const summaryPerPod = Buffer.byteLength(JSON.stringify(served.map(summarizePod))) / served.length;
    const reads = await podReadResultBytes(name);
    expect(reads.length).toBeGreaterThan(0);
    const biggest = Math.max(...reads);
    console.log(
      `[payload] 60 pods: as served ${fullPerPod.toFixed(0)} B a pod, as the pass reads it ${summaryPerPod.toFixed(0)} B a pod; largest pod-read result in the history ${biggest} B (${(biggest / 60).toFixed(0)} B a pod)`,
    );
    expect(biggest / 60).toBeLessThan(2000);
    expect(summaryPerPod * 3).toBeLessThan(fullPerPod);

    await sets.patchSpec(name, { agent: { replicas: 0 } });
    const scaled = await sets.waitUntil(
      name,
      'scaled to the main alone',
      (cs) => current(cs) && cs!.status?.phase === 'Running' && cs!.status.desiredAgents === 1,
      BRING_UP_MS,
    );
    expect(scaled?.status?.readyAgents).toBe(1);
    await waitFor(
      'the 59 sub-agents gone',
      async () => ((await podsOf(name)).length === 1 ? true : undefined),
      BRING_UP_MS,
    );

    await sets.delete(name);
    await waitFor(
      'the set and its pods gone',
      async () =>
        (await sets.get(name)) === undefined && (await podsOf(name)).length === 0 ? true : undefined,
      BRING_UP_MS,
    );
  });
});
