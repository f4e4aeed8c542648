/**
 * CocoonHibernation under faults, end to end on the real local stack (the operator process, kube-apiserver,
 * Temporal dev server, registry, vk-cocoon simulator), set up as test/e2e/hibernation.test.ts is: the
 * operator watches only this file's namespace and reaches the registry through a proxy
 * (test/support/registry-proxy.ts) that can reset or hang its requests.
 *
 * The deadline test takes three minutes of real time (the hibernate deadline is 3m0s) and is the suite's
 * only test that waits out a deadline (it also covers the registry coming back).
 */
import type { Client } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { vmWorkflowId } from '../../src/api/ids.js';
import { CONDITION_PROBE_FAILING, EventReasons, LifecycleStates } from '../../src/api/keys.js';
import { containerRunning, lifecycleOf, vmIDOf, vmNameForPod } from '../../src/api/pod.js';
import type { CocoonHibernation } from '../../src/api/types.js';
import type { KubeClients } from '../../src/kube/client.js';
import { simPod } from '../support/builders.js';
import type { RegistryProxy } from '../support/registry-proxy.js';
import { waitFor } from '../support/wait.js';
import { VkSimClient } from '../vksim/client.js';
import {
  type Hibernations,
  type NamespaceRecorder,
  occurrences,
  operatorEvents,
  readyOf,
  settle,
} from './hibernation-harness.js';
import { OperatorRig } from './operator-rig.js';
import { stackEnv } from './stack-harness.js';

const rig = new OperatorRig('hib-faults');
const { ns } = rig;
const QUICK_MS = 45_000;

let kube: KubeClients;
let crs: Hibernations;
let rec: NamespaceRecorder;
let sim: VkSimClient;
let pool: string;
let proxy: RegistryProxy;
let temporal: Client;
const podsMade = new Set<string>();
const workflowsMade = new Set<string>();

const probeFailing = (cr: CocoonHibernation | undefined) =>
  cr?.status?.conditions?.find((c) => c.type === CONDITION_PROBE_FAILING);

describe('CocoonHibernation under faults (operator process, local stack)', () => {
  beforeAll(async () => {
    await rig.start();
    ({ kube, crs, rec, proxy, temporal } = rig);
    sim = new VkSimClient((await stackEnv()).vksimUrl);
    await waitFor('simulator /healthz', async () => sim.healthy(), 30_000, { intervalMs: 250 });
    ({ pool } = await sim.state());
  }, 180_000);

  afterAll(() =>
    rig.teardown({ workflowIds: [...workflowsMade], vms: [...podsMade].map((pod) => vmNameForPod(ns, pod)) }),
  );

  it('a podRef no pod can have: Failed with the reason at once, not Pending for ever; deleting it is not blocked', async () => {
    const long = `a${'b'.repeat(253)}`;
    for (const [name, podRef] of [
      ['bad-slash', 'Foo_Bar/x'],
      ['bad-long', long],
    ] as const) {
      workflowsMade.add(vmWorkflowId(ns, podRef));
      await crs.create(name, podRef, 'Hibernate');
    }
    const slash = await crs.waitPhase('bad-slash', 'Failed', QUICK_MS);
    expect(readyOf(slash)).toMatchObject({
      status: 'False',
      reason: 'Failed',
      message:
        "spec.podRef.name \"Foo_Bar/x\" can never name a pod: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
    });
    const tooLong = await crs.waitPhase('bad-long', 'Failed', QUICK_MS);
    expect(readyOf(tooLong)?.message).toBe(
      `spec.podRef.name "${long}" can never name a pod: must be no more than 253 characters (it has 254)`,
    );
    await rec.waitSeen('cocoonhibernation', slash);
    expect(rec.phases('bad-slash')).toEqual(['', 'Failed']);
    for (const name of ['bad-slash', 'bad-long']) {
      await crs.delete(name);
      await crs.waitGone(name, QUICK_MS);
    }
  });

  it('registry failing through the deadline (reset, then hanging): the status says the probes fail, Failed comes within 2 s of 3m0s, Hibernated once the registry is back', async () => {
    const pod = 'f1';
    const vm = vmNameForPod(ns, pod);
    podsMade.add(pod);
    workflowsMade.add(vmWorkflowId(ns, pod));
    await kube.core.createNamespacedPod({
      namespace: ns,
      body: simPod({ namespace: ns, name: pod, vmName: vm, pool: pool, app: 'hibernation-e2e' }),
    });
    await waitFor(
      'f1 running',
      async () => {
        const p = await kube.core.readNamespacedPod({ name: pod, namespace: ns });
        return containerRunning(p) && vmIDOf(p) !== '';
      },
      QUICK_MS,
    );
    proxy.down = true;
    const requestsBefore = proxy.total();
    await crs.create(pod, pod, 'Hibernate');
    // vk-cocoon (the simulator, on the real registry) finishes its round; the operator cannot confirm it.
    await waitFor(
      'simulator reports f1 hibernated',
      async () =>
        lifecycleOf(await kube.core.readNamespacedPod({ name: pod, namespace: ns })).state ===
        LifecycleStates.hibernated,
      QUICK_MS,
    );
    let cr: CocoonHibernation | undefined;
    await waitFor(
      'the probe failure on the status',
      async () => {
        cr = await crs.get(pod);
        return cr?.status?.phase === 'Hibernating' && probeFailing(cr) !== undefined;
      },
      QUICK_MS,
      { describe: () => cr?.status },
    );
    const attemptStart = Date.parse(readyOf(cr)!.lastTransitionTime!);
    expect(probeFailing(cr)).toMatchObject({ status: 'True', reason: 'RegistryError' });
    expect(probeFailing(cr)!.message).toContain(`probe hibernate snapshot ${vm}: `);
    expect(probeFailing(cr)!.message).toContain(
      `retrying until ${new Date(attemptStart + 180_000).toISOString().replace('.000Z', 'Z')}, then Failed`,
    );
    // From now on the registry hangs: a probe in flight at the deadline must not hold the CR past it.
    proxy.down = false;
    proxy.hang = true;

    await rec.waitSeen('cocoonhibernation', await crs.waitPhase(pod, 'Failed', 240_000));
    const failedSeen = rec.crHistory(pod).find((s) => s.phase === 'Failed')!.at;
    const late = failedSeen - attemptStart;
    console.log(`[hibernation faults e2e] Failed ${(late / 1000).toFixed(2)} s after the attempt started`);
    // Strictly past 3m0s at second precision (the start is truncated to the second): (180 s, 182 s], plus
    // the watch's delivery.
    expect(late).toBeGreaterThan(180_000);
    expect(late).toBeLessThanOrEqual(182_500);
    const failed = await crs.get(pod);
    expect(readyOf(failed)?.message).toBe('hibernate not confirmed within 3m0s');
    expect(probeFailing(failed)?.status).toBe('True');
    expect(rec.phases(pod)).toEqual(['', 'Hibernating', 'Failed']);
    // Retried meanwhile (the client's first request may be its `GET /v2/` ping, not a HEAD).
    expect(proxy.total() - requestsBefore).toBeGreaterThanOrEqual(3);
    const timedOut = await operatorEvents(kube, ns, pod, EventReasons.hibernateTimedOut);
    expect(occurrences(timedOut)).toBe(1);
    expect(timedOut[0]).toMatchObject({
      type: 'Warning',
      message: `snapshot ${vm} not confirmed in the registry within 3m0s`,
    });
    expect(occurrences(await operatorEvents(kube, ns, pod, EventReasons.hibernated))).toBe(0);

    // The registry answers again: the retry 30 s after Failed completes, and the probe condition goes.
    proxy.hang = false;
    const back = await crs.waitPhase(pod, 'Hibernated', 90_000);
    expect(back.status?.vmName).toBe(vm);
    expect(probeFailing(back)).toBeUndefined();
    await settle(temporal, vmWorkflowId(ns, pod));
    expect(
      occurrences(await operatorEvents(kube, ns, pod, EventReasons.retryRequested)),
    ).toBeGreaterThanOrEqual(1);
    expect(occurrences(await operatorEvents(kube, ns, pod, EventReasons.hibernated))).toBe(1);
    expect(occurrences(await operatorEvents(kube, ns, pod, EventReasons.hibernateTimedOut))).toBe(1);
  }, 360_000);
});
