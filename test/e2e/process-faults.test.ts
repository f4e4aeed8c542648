/**
 * The operator process (`tsx src/worker.ts`, what `npm start` runs) against faults of its surroundings on
 * the real local stack:
 * (a) a fresh Temporal namespace without the custom search attributes: the process registers them at
 *     start and its workflows run there (without that, every workflow task fails with BadSearchAttributes);
 * (b) a kube-apiserver restart (the stack's component stopped and started): /readyz answers 503 while the
 *     watches are not synced, an edit made right after the restart is acted on within 2 s, and the
 *     vk-cocoon simulator finishes by itself the hibernate it had in flight and one requested after;
 * (c) start→ready with the workflow bundle from the content-hash cache (the figure is printed).
 * Intervals are measured with the monotonic clock: this machine's wall clock has been seen to jump.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bundleWorkflows } from '../../scripts/bundle-workflows.js';
import { LifecycleStates } from '../../src/api/keys.js';
import { containerRunning, hibernateRequested, lifecycleOf, vmIDOf } from '../../src/api/pod.js';
import type { KubeClients } from '../../src/kube/client.js';
import { requiredSearchAttributes } from '../../src/search-attributes.js';
import { simPod } from '../support/builders.js';
import { freePort } from '../support/ports.js';
import { waitFor } from '../support/wait.js';
import { VkSimClient } from '../vksim/client.js';
import { Hibernations } from './hibernation-harness.js';
import {
  cleanEnv,
  type OperatorProcess,
  ROOT,
  stackEnv,
  startOperator,
  startReadyOperator,
  stopOperator,
  waitFor200,
} from './operator-process.js';
import { kubeClients } from './stack-harness.js';

const id = randomBytes(3).toString('hex');
const ns = `faults-e2e-${id}`;
const QUICK_MS = 45_000;

let stack: Record<string, string>;
let kube: KubeClients;
let sim: VkSimClient;
let pool: string;
const operators: OperatorProcess[] = [];

/** The stack's CLI (`npm run -s stack -- <args>`), e.g. `down kube-apiserver`. */
function stackCli(...args: string[]): void {
  execFileSync('npm', ['run', '-s', 'stack', '--', ...args], {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

/** The stack's Temporal CLI against its dev server. */
function temporalCli(args: string[]): string {
  return execFileSync(stack.TEMPORAL_CLI!, [...args, '--address', stack.TEMPORAL_ADDRESS!], {
    encoding: 'utf8',
  });
}

/** Environment of one operator on its own task queue, Kubernetes namespace scope and probe port. */
async function operatorEnv(extra: Record<string, string> = {}) {
  const probePort = await freePort();
  const env = cleanEnv({
    ...stack,
    TEMPORAL_TASK_QUEUE: `faults-e2e-${id}-${operators.length}`,
    WATCH_NAMESPACE: ns,
    LEADER_ELECT: 'false',
    PROBE_ADDR: `127.0.0.1:${probePort}`,
    METRICS_ADDR: '0',
    OPERATOR_LOG_LEVEL: 'info',
    ...extra,
  });
  return { env, probePort };
}

async function readPod(name: string): Promise<V1Pod> {
  return kube.core.readNamespacedPod({ name, namespace: ns });
}

/** Creates a pod the simulator runs and waits until its VM is ready. */
async function runningPod(name: string): Promise<void> {
  await kube.core.createNamespacedPod({
    namespace: ns,
    body: simPod({
      namespace: ns,
      name: name,
      vmName: `vk-${ns}-${name}`,
      pool: pool,
      app: 'hibernation-e2e',
    }),
  });
  await waitFor(
    `pod ${name} running with a ready VM`,
    async () => {
      const p = await readPod(name);
      return containerRunning(p) && vmIDOf(p) !== '' && lifecycleOf(p).state === LifecycleStates.ready;
    },
    QUICK_MS,
  );
}

beforeAll(async () => {
  stack = stackEnv();
  kube = kubeClients(stack.KUBECONFIG);
  sim = new VkSimClient(stack.VKSIM_URL!);
  await waitFor('simulator /healthz', () => sim.healthy(), 30_000);
  ({ pool } = await sim.state());
  await kube.core.createNamespace({ body: { metadata: { name: ns } } });
  await bundleWorkflows(); // the content-hash cache: later starts load it instead of bundling
});

afterAll(async () => {
  await sim?.clearFaults().catch(() => undefined);
  for (const op of operators) await stopOperator(op, 'SIGKILL');
  const crs = new Hibernations(kube, ns);
  for (const cr of (await crs.list().catch(() => [])) ?? []) await crs.forceDelete(cr.metadata.name!);
  await kube?.core.deleteNamespace({ name: ns }).catch(() => undefined);
  const logFile = join(tmpdir(), `${ns}-operators.log`);
  writeFileSync(logFile, operators.map((p) => p.stdout() + p.stderr()).join('\n--- next operator ---\n'));
  console.log(`[process-faults e2e] operator logs in ${logFile}`);
});

describe('operator process against faults of its surroundings', () => {
  it('(c) starts ready from the cached workflow bundle without bundling', async () => {
    const { env, probePort } = await operatorEnv();
    const t0 = performance.now();
    const op = startOperator(env, [], { probePort, launcher: 'tsx' });
    operators.push(op);
    await waitFor200(`${op.probeUrl}/readyz`, 60_000);
    const ms = Math.round(performance.now() - t0);
    const loaded = op.logs.find((l) => l.msg === 'loaded prebuilt workflow bundle');
    expect(loaded, 'the worker must load the cached bundle').toMatchObject({ origin: 'cached' });
    // The bundler's report (webpack's asset summary) is not an info line.
    expect(op.logs.some((l) => /webpack|asset workflow-bundle/i.test(String(l.msg)))).toBe(false);
    console.log(`[process-faults e2e] start→ready with the cached bundle: ${ms} ms`);
    expect(ms).toBeLessThan(30_000); // generous: the figure itself goes in the report
    await stopOperator(op);
  }, 90_000);

  it('(a) registers the search attributes in a fresh Temporal namespace and its workflows run there', async () => {
    const temporalNs = `faults-e2e-${id}`;
    temporalCli(['operator', 'namespace', 'create', '--namespace', temporalNs, '--retention', '24h']);
    const before = temporalCli(['operator', 'search-attribute', 'list', '--namespace', temporalNs]);
    for (const n of requiredSearchAttributes) expect(before).not.toContain(n);

    const { env, probePort } = await operatorEnv({ TEMPORAL_NAMESPACE: temporalNs });
    const op = await waitFor(
      'an operator started in the new namespace',
      async () => {
        // The dev server may take a moment to serve a just-created namespace.
        const p = await startReadyOperator(env, { probePort, metricsPort: 0, launcher: 'tsx' }, 60_000);
        operators.push(p);
        return p;
      },
      70_000,
      { intervalMs: 1000 },
    );
    // A CocoonHibernation for a pod that does not exist: its VM workflow reports Pending on the CR, and the
    // watcher's start set its search attributes, so a visibility query by them finds it (a start with
    // attributes the namespace lacks is refused instead, over and over).
    const crs = new Hibernations(kube, ns);
    await crs.create('fresh-ns', 'no-such-pod', 'Hibernate');
    const cr = await crs.waitPhase('fresh-ns', 'Pending', QUICK_MS);
    expect(cr.status?.phase).toBe('Pending');
    const query = `CocoonNamespace = "${ns}" AND CocoonKind = "VM"`;
    const found = await waitFor(
      'the VM workflow listed by its search attributes',
      () => {
        const out = temporalCli([
          'workflow',
          'list',
          '--namespace',
          temporalNs,
          '--query',
          query,
          '--output',
          'json',
        ]);
        const rows = JSON.parse(out || '[]') as Array<{ execution?: { workflowId?: string } }>;
        return rows.length > 0 ? rows : undefined;
      },
      20_000,
      { intervalMs: 500 },
    );
    expect(found[0]?.execution?.workflowId).toBe(`vm/${ns}/no-such-pod`);
    expect(op.logs.find((l) => l.msg === 'registered missing search attributes')).toMatchObject({
      namespace: temporalNs,
      searchAttributes: [...requiredSearchAttributes],
    });
    const after = temporalCli(['operator', 'search-attribute', 'list', '--namespace', temporalNs]);
    for (const n of requiredSearchAttributes) expect(after).toContain(n);

    expect(op.logs.some((l) => /BadSearchAttributes/.test(JSON.stringify(l)))).toBe(false);
    await stopOperator(op);
    await crs.forceDelete('fresh-ns');
  }, 180_000);

  it('(b) after an apiserver restart: /readyz 503 until the watches sync, an edit acted on within 2 s, the simulator recovers', async () => {
    await runningPod('inflight');
    await runningPod('after');
    const { env, probePort } = await operatorEnv();
    const op = await startReadyOperator(env, { probePort, metricsPort: 0, launcher: 'tsx' }, 60_000);
    operators.push(op);
    const crs = new Hibernations(kube, ns);

    // Work in flight in the simulator across the restart: a hibernate whose registry push is slowed.
    await sim.addFault({ vm: `^vk-${ns}-inflight$`, op: 'hibernate.push.delay', delayMs: 4_000, count: 1 });
    await crs.create('inflight', 'inflight', 'Hibernate');
    await waitFor(
      'the simulator to start the in-flight hibernate',
      async () => lifecycleOf(await readPod('inflight')).state === LifecycleStates.hibernating,
      QUICK_MS,
      { intervalMs: 50 },
    );

    stackCli('down', 'kube-apiserver');
    try {
      const notReady = await waitFor(
        '/readyz to fail while the apiserver is down',
        async () => {
          const res = await fetch(`${op.probeUrl}/readyz`);
          return res.status === 503 ? res.text() : undefined;
        },
        30_000,
        { intervalMs: 100 },
      );
      expect(notReady).toContain('[-]watcher failed: informers not synced');
      // The simulator's /healthz reflects its blind watches too (after its 15 s grace).
      await waitFor(
        'the simulator /healthz to fail while its watches cannot sync',
        async () => !(await sim.healthy()),
        30_000,
        {
          intervalMs: 250,
        },
      );
    } finally {
      stackCli('up', 'kube-apiserver'); // also when the assertion failed: later tests need it
    }

    // The edit, right after the apiserver answers again.
    const t0 = performance.now();
    await crs.create('after', 'after', 'Hibernate');
    await waitFor(
      'the operator to set the hibernate annotation',
      async () => hibernateRequested(await readPod('after')),
      10_000,
      { intervalMs: 25 },
    );
    const actedMs = Math.round(performance.now() - t0);
    console.log(`[process-faults e2e] edit after the apiserver restart acted on in ${actedMs} ms`);
    expect(actedMs).toBeLessThan(2_000);
    expect(await waitFor200(`${op.probeUrl}/readyz`, 10_000)).toBe('ok');

    // The simulator finishes both hibernates by itself (no restart of it), and the operator sees them.
    for (const name of ['inflight', 'after']) {
      await crs.waitPhase(name, 'Hibernated', 60_000);
      expect(lifecycleOf(await readPod(name)).state).toBe(LifecycleStates.hibernated);
    }
    await waitFor('the simulator /healthz to recover', () => sim.healthy(), 30_000);
    await stopOperator(op);
  }, 240_000);
});
