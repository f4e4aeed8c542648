/**
 * The watcher's echo filter end to end inside one process (src/watcher/index.ts with src/kube/own-writes.ts):
 * an event of an object one of our activities is writing waits for that write's answer, and the echo of
 * the write is not signalled back to its writer, while a later change by someone else is. The informers'
 * Kubernetes boundary and the Temporal delivery are faked (the interfaces the watcher takes).
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import type { Client } from '@temporalio/client';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { Annotations } from '../../src/api/keys.js';
import type { KubeClients } from '../../src/kube/client.js';
import { OwnWrites } from '../../src/kube/own-writes.js';
import { type Signaller, startWatcher, type Watcher, type WatchSource } from '../../src/watcher/index.js';
import type { WatchEventType } from '../../src/watcher/informer.js';

/** A list+watch whose list is fixed and whose one watch the test drives. */
class Source implements WatchSource<KubernetesObject> {
  send?: (type: WatchEventType, obj: unknown) => void;
  /** `listDelayMs`: how long the list takes to answer (which informer lists first). */
  constructor(
    private readonly items: KubernetesObject[],
    private readonly listDelayMs = 0,
  ) {}
  async list() {
    if (this.listDelayMs) await new Promise((r) => setTimeout(r, this.listDelayMs));
    return { items: structuredClone(this.items), resourceVersion: '10' };
  }
  async watch(_rv: string, onEvent: (type: WatchEventType, obj: unknown) => void) {
    this.send = onEvent;
    return { abort: () => {} };
  }
}

const cr = (rv: string, phase?: string) => ({
  apiVersion: 'cocoonset.cocoonstack.io/v1',
  kind: 'CocoonHibernation',
  metadata: { name: 'h1', namespace: 'ns', uid: 'uid-h1', resourceVersion: rv, generation: 1 },
  spec: { podRef: { name: 'p1' }, desire: 'Hibernate' },
  status: phase ? { phase } : undefined,
});
const pod = {
  metadata: {
    name: 'p1',
    namespace: 'ns',
    uid: 'uid-p1',
    resourceVersion: '5',
    annotations: { [Annotations.vmName]: 'vk-ns-p1' },
  },
  spec: { containers: [] },
};

let watcher: Watcher | undefined;
afterEach(async () => {
  await watcher?.stop();
  watcher = undefined;
});

type Sent = Array<{ workflowId: string; signal: string; payload: unknown }>;

/**
 * Starts the watcher on `sources` with `ownWrites`, synced and idle (stopped after the test); what it signals
 * lands in `sent`.
 */
async function watch(
  sources: Record<string, Source>,
  ownWrites: OwnWrites,
): Promise<{ sent: Sent; w: Watcher }> {
  const sent: Sent = [];
  const signaller: Signaller = {
    async signalWithStart(workflowId, signal, payload) {
      sent.push({ workflowId, signal, payload });
    },
  };
  const w = await startWatcher({
    kube: {} as KubeClients,
    client: {} as Client,
    taskQueue: 'q',
    log: pino({ level: 'silent' }),
    signaller,
    sources,
    ownWrites,
  });
  watcher = w;
  await w.waitForSync();
  await w.idle();
  return { sent, w };
}

describe('the watcher with the activities write record', () => {
  it("holds an object's events while our write to it is in flight, drops the write's echo for its writer, and sends the next change", async () => {
    const crs = new Source([cr('7')]);
    const ownWrites = new OwnWrites();
    const { sent, w } = await watch({ cocoonhibernation: crs, pod: new Source([pod]) }, ownWrites);
    const start = sent.length;
    expect(start).toBeGreaterThan(0);

    // The VM workflow patches the CR's status; the watch delivers the result before the answer arrives.
    const answered = ownWrites.begin('cocoonhibernation', 'ns', 'h1', 'vm/ns/p1');
    crs.send?.('MODIFIED', cr('8', 'Hibernated'));
    await new Promise((r) => setImmediate(r));
    expect(sent).toHaveLength(start);
    answered('8');
    await w.idle();
    expect(sent).toHaveLength(start); // the echo: not signalled to its writer
    expect(w.stats().router.echoes).toBe(1);

    // Someone else's change afterwards has a newer version and goes through.
    crs.send?.('MODIFIED', cr('9', 'Failed'));
    await w.idle();
    expect(sent.slice(start).map((s) => s.workflowId)).toEqual(['vm/ns/p1']);
    expect(sent[start]?.payload).toMatchObject({ resourceVersion: '9', status: { phase: 'Failed' } });
  });

  it('a CR whose first event is the echo of a write made before the watcher started (a restarted operator whose workers ran first) still brings its pod to the workflow (found by a new-user run: the pod waited for the 60 s re-read)', async () => {
    const ownWrites = new OwnWrites();
    ownWrites.record('cocoonhibernation', 'ns', 'h1', '7', 'vm/ns/p1');
    // The pods are listed first: their events find no CR targeting them yet.
    const { sent } = await watch(
      { pod: new Source([pod]), cocoonhibernation: new Source([cr('7', 'Hibernating')], 50) },
      ownWrites,
    );
    const toWorkflow = sent.filter((s) => s.workflowId === 'vm/ns/p1');
    const pods = toWorkflow.flatMap((s) => {
      const p = s.payload as { pod?: { resourceVersion?: string }; name?: string; resourceVersion?: string };
      if (p.pod) return [p.pod.resourceVersion];
      return s.signal === 'podObserved' ? [p.resourceVersion] : [];
    });
    expect(pods).toEqual(['5']);
  });
});
