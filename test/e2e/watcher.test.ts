/**
 * The watcher against the real local stack: the kube-apiserver (CRDs applied) and the Temporal dev
 * server. A Worker on a unique task queue runs a recording stand-in registered as 'vmWorkflow'
 * (fixtures/watcher-recorder-workflow.ts), so every signal-with-start the watcher makes is observable.
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import type { V1Pod } from '@kubernetes/client-node';
import { Client, Connection, WorkflowNotFoundError } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { vmWorkflowId } from '../../src/api/ids.js';
import {
  Annotations,
  GROUP,
  KIND_COCOONHIBERNATION,
  PLURAL_COCOONHIBERNATIONS,
  VERSION,
} from '../../src/api/keys.js';
import { type KubeClients, mergePatch } from '../../src/kube/client.js';
import { startWatcher, type Watcher } from '../../src/watcher/index.js';
import { waitFor } from '../support/wait.js';
import { type RecordedSignal, signalsQuery } from './fixtures/watcher-recorder-workflow.js';
import { kubeClients, stackEnv } from './stack-harness.js';

const log = pino({ level: process.env.LOG_LEVEL ?? 'warn' });
const ns = `watcher-e2e-${randomUUID().slice(0, 8)}`;
const taskQueue = `watcher-e2e-${randomUUID()}`;

let kube: KubeClients;
let connection: Connection;
let client: Client;
let nativeConnection: NativeConnection;
let worker: Worker;
let workerRun: Promise<void>;
let watcher: Watcher | undefined;
const startedIds = new Set<string>();
/** Stall timeout of the second watcher: far below the apiserver's ~1 min bookmark period, so idle watches stall. */
const STALL_MS = 1_500;

/** Signals the recording workflow of pod `name` has received (throws WorkflowNotFoundError if none ran). */
async function recorded(pod: string): Promise<RecordedSignal[]> {
  const id = vmWorkflowId(ns, pod);
  startedIds.add(id);
  const r = await client.workflow.getHandle(id).query(signalsQuery);
  return r.signals;
}

/** Waits until the watcher has seen `events` more informer events than `since` and delivered everything. */
async function settled(since: number, events = 1): Promise<void> {
  const w = watcher!;
  await waitFor('watcher to see the event', () => w.stats().eventsSeen >= since + events);
  await w.idle();
}

function podBody(name: string): V1Pod {
  return {
    metadata: { name, namespace: ns, annotations: { [Annotations.vmName]: `vk-${ns}-${name}` } },
    spec: { containers: [{ name: 'vm', image: 'example.invalid/vm:latest' }] },
  };
}

async function startTestWatcher(stallTimeoutMs?: number): Promise<Watcher> {
  const w = await startWatcher({ kube, client, taskQueue, namespace: ns, log, stallTimeoutMs });
  await w.waitForSync();
  await w.idle();
  return w;
}

beforeAll(async () => {
  const env = await stackEnv();
  kube = kubeClients(env.kubeconfig);
  await kube.core.createNamespace({ body: { metadata: { name: ns } } });
  const address = env.temporalAddress;
  const namespace = env.temporalNamespace;
  connection = await Connection.connect({ address });
  client = new Client({ connection, namespace });
  nativeConnection = await NativeConnection.connect({ address });
  worker = await Worker.create({
    connection: nativeConnection,
    namespace,
    taskQueue,
    workflowsPath: fileURLToPath(new URL('./fixtures/watcher-recorder-workflow.ts', import.meta.url)),
  });
  workerRun = worker.run();
});

afterAll(async () => {
  await watcher?.stop();
  for (const id of startedIds) {
    await client?.workflow
      .getHandle(id)
      .terminate('test done')
      .catch(() => {});
  }
  if (worker) {
    worker.shutdown();
    await workerRun;
  }
  await nativeConnection?.close();
  await connection?.close();
  await kube?.core.deleteNamespace({ name: ns }).catch(() => {});
});

describe('watcher e2e (real apiserver + Temporal dev server)', () => {
  const cr = {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: KIND_COCOONHIBERNATION,
    metadata: { name: 'h1', namespace: ns },
    spec: { podRef: { name: 'p1' }, desire: 'Hibernate' },
  };
  const crApi = { group: GROUP, version: VERSION, namespace: ns, plural: PLURAL_COCOONHIBERNATIONS };

  it('starts the VM workflow on a CocoonHibernation before its pod exists', async () => {
    watcher = await startTestWatcher();
    expect(watcher.synced()).toBe(true);
    await kube.custom.createNamespacedCustomObject({ ...crApi, body: cr });
    const sigs = await waitFor('hibernationObserved', async () => {
      const s = await recorded('p1');
      return s.length >= 1 ? s : undefined;
    });
    expect(sigs).toHaveLength(1);
    expect(sigs[0]).toMatchObject({
      name: 'hibernationObserved',
      payload: { exists: true, namespace: ns, name: 'h1', podRef: 'p1', desire: 'Hibernate' },
    });
  });

  it('signals the targeted pod on create and on an annotation change', async () => {
    await kube.core.createNamespacedPod({ namespace: ns, body: podBody('p1') });
    await waitFor('podObserved (create)', async () => (await recorded('p1')).length >= 2);
    await kube.core.patchNamespacedPod(
      {
        name: 'p1',
        namespace: ns,
        body: { metadata: { annotations: { [Annotations.lifecycleState]: 'ready' } } },
      },
      mergePatch,
    );
    const sigs = await waitFor('podObserved (annotation)', async () => {
      const s = await recorded('p1');
      return s.length >= 3 ? s : undefined;
    });
    expect(sigs.slice(1).map((s) => s.name)).toEqual(['podObserved', 'podObserved']);
    expect(sigs[1]?.payload).toMatchObject({ exists: true, name: 'p1', containerRunning: false });
    expect(sigs[2]?.payload).toMatchObject({ annotations: { [Annotations.lifecycleState]: 'ready' } });
  });

  it('drops status churn no gate reads (condition timestamps) and sends a container-running flip', async () => {
    const w = watcher!;
    await w.idle();
    const before = await recorded('p1');
    const sentBefore = w.stats().signalsSent;
    const droppedBefore = w.stats().signalsDropped;
    const cond = (probe: string) => ({
      status: {
        conditions: [
          {
            type: 'PodScheduled',
            status: 'True',
            lastProbeTime: probe,
            lastTransitionTime: '2026-01-01T00:00:00Z',
          },
        ],
      },
    });
    for (const probe of ['2026-01-01T00:00:01Z', '2026-01-01T00:00:02Z', '2026-01-01T00:00:03Z']) {
      const seen = w.stats().eventsSeen;
      await kube.core.patchNamespacedPodStatus({ name: 'p1', namespace: ns, body: cond(probe) }, mergePatch);
      await settled(seen);
    }
    expect(w.stats().signalsSent).toBe(sentBefore);
    expect(w.stats().signalsDropped).toBe(droppedBefore + 3);
    expect(await recorded('p1')).toEqual(before);

    await kube.core.patchNamespacedPodStatus(
      {
        name: 'p1',
        namespace: ns,
        body: {
          status: {
            containerStatuses: [
              {
                name: 'vm',
                image: 'example.invalid/vm:latest',
                imageID: '',
                ready: false,
                restartCount: 0,
                state: { running: { startedAt: '2026-01-01T00:01:00Z' } },
              },
            ],
          },
        },
      },
      mergePatch,
    );
    const sigs = await waitFor('podObserved (running)', async () => {
      const s = await recorded('p1');
      return s.length > before.length ? s : undefined;
    });
    expect(sigs.length).toBe(before.length + 1);
    expect(sigs[sigs.length - 1]).toMatchObject({ name: 'podObserved', payload: { containerRunning: true } });
  });

  it('ignores pods no CocoonHibernation targets', async () => {
    const w = watcher!;
    const seen = w.stats().eventsSeen;
    const sent = w.stats().signalsSent;
    await kube.core.createNamespacedPod({ namespace: ns, body: podBody('p2') });
    await kube.core.patchNamespacedPod(
      { name: 'p2', namespace: ns, body: { metadata: { annotations: { x: 'y' } } } },
      mergePatch,
    );
    await settled(seen, 2);
    expect(w.stats().signalsSent).toBe(sent);
    await expect(recorded('p2')).rejects.toBeInstanceOf(WorkflowNotFoundError);
  });

  it('resumes after its watches are killed: a steady relist sends nothing, the next change is signalled', async () => {
    const w = watcher!;
    const before = await recorded('p1');
    const restarts = Object.values(w.stats().informers).reduce((n, s) => n + s.restarts, 0);
    const lists = Object.values(w.stats().informers).reduce((n, s) => n + s.lists, 0);
    w.restartWatches(true);
    await waitFor('informers to relist', () => {
      const s = Object.values(w.stats().informers);
      return (
        s.reduce((n, x) => n + x.restarts, 0) >= restarts + 2 &&
        s.reduce((n, x) => n + x.lists, 0) >= lists + 2 &&
        s.every((x) => x.watchesStarted > 1)
      );
    });
    await w.idle();
    expect(await recorded('p1')).toEqual(before);

    await kube.core.patchNamespacedPod(
      {
        name: 'p1',
        namespace: ns,
        body: { metadata: { annotations: { [Annotations.lifecycleState]: 'hibernating' } } },
      },
      mergePatch,
    );
    const sigs = await waitFor('podObserved after restart', async () => {
      const s = await recorded('p1');
      return s.length > before.length ? s : undefined;
    });
    expect(sigs[sigs.length - 1]?.payload).toMatchObject({
      annotations: { [Annotations.lifecycleState]: 'hibernating' },
    });
  });

  it('a fresh watcher process resends each object once (the resync), then nothing', async () => {
    const before = await recorded('p1');
    await watcher!.stop();
    watcher = await startTestWatcher(STALL_MS);
    // The CR once; the pod once: in its own signal, or riding in the CR's when the pod informer listed
    // first (a CR newly targeting a cached pod carries it).
    const count = (signals: RecordedSignal[]) => {
      const crs = signals.filter((s) => s.name === 'hibernationObserved');
      const ownPod = signals.filter((s) => s.name === 'podObserved').length;
      const riding = crs.filter((s) => (s.payload as { pod?: unknown }).pod !== undefined).length;
      return { crs: crs.length, pods: ownPod + riding, all: signals.length };
    };
    await waitFor('resync signals', async () => {
      const c = count((await recorded('p1')).slice(before.length));
      return c.crs >= 1 && c.pods >= 1;
    });
    await watcher.idle();
    expect(count((await recorded('p1')).slice(before.length))).toEqual({
      crs: 1,
      pods: 1,
      all: expect.any(Number),
    });
    const fresh = (await recorded('p1')).slice(before.length);
    expect(fresh.every((s) => s.name === 'hibernationObserved' || s.name === 'podObserved')).toBe(true);
    expect(fresh.length).toBeLessThanOrEqual(2);
  });

  it('restarts a silent watch (no event, no bookmark within the stall timeout) and keeps the cache', async () => {
    const w = watcher!;
    const sent = w.stats().signalsSent;
    await waitFor('both informers to detect a stall and reopen', () =>
      Object.values(w.stats().informers).every((s) => s.stalls >= 1 && s.watchesStarted >= 2),
    );
    const inf = w.stats().informers;
    expect(inf.pod).toMatchObject({ lists: 1, gone: 0, cached: 2 });
    expect(inf.cocoonhibernation).toMatchObject({ lists: 1, gone: 0, cached: 1 });
    await w.idle();
    expect(w.stats().signalsSent).toBe(sent);
  });

  it('sends exists:false when the CocoonHibernation is deleted (through a stall-restarted watch), then stops routing its pod', async () => {
    const w = watcher!;
    const created = (await kube.custom.getNamespacedCustomObject({ ...crApi, name: 'h1' })) as {
      metadata: { uid: string };
    };
    const before = await recorded('p1');
    await kube.custom.deleteNamespacedCustomObject({ ...crApi, name: 'h1' });
    const sigs = await waitFor('hibernationObserved exists:false', async () => {
      const s = await recorded('p1');
      return s.length > before.length ? s : undefined;
    });
    expect(sigs[sigs.length - 1]).toEqual({
      name: 'hibernationObserved',
      payload: { exists: false, namespace: ns, name: 'h1', uid: created.metadata.uid },
    });
    const seen = w.stats().eventsSeen;
    await kube.core.patchNamespacedPod(
      { name: 'p1', namespace: ns, body: { metadata: { annotations: { after: 'delete' } } } },
      mergePatch,
    );
    await settled(seen);
    expect(await recorded('p1')).toHaveLength(sigs.length);
  });
});
