/**
 * The CocoonSet controller's steady-state cost, counted on the wire against the real local stack
 * (restore intent, docs/cocoonset.md#restore-from-hibernation; the no-op status diff,
 * docs/cocoonset.md#status-roll-up; the reference's `restore_intent_test.go`;
 * docs/cocoonset.md#a-pass-in-order: "a steady pass lists no CocoonHibernations and calls no registry", and a
 * pass that must build pods looks restore intent up exactly once; the seed PR's lazy memo).
 *
 * The real operator process (`src/worker.ts`) runs as the ServiceAccount the shipped ClusterRole is bound
 * to (a TokenRequest kubeconfig), with that kubeconfig's server pointed at a counting HTTPS proxy in front
 * of the kube-apiserver (test/support/kube-proxy.ts: the bearer token passes through, so the apiserver
 * authenticates and authorizes the operator itself), and with OCI_REGISTRY pointed at the counting
 * registry proxy (test/support/registry-proxy.ts). Both write one ordered RequestLog. A reconcile pass
 * starts with one read of its CocoonSet (`cocoonSetReadWorld`: GET the CocoonSet, LIST its pods), so the
 * log is cut into passes at each GET of the CocoonSet; watches and the informers' paginated lists are
 * the watcher's, not a pass's, and are reported apart. The workflow's `state` query (`passes`,
 * `passing`) says when a pass has finished.
 *
 * Scope: own namespace (WATCH_NAMESPACE), own task queue, no leader election (no Lease traffic in the
 * counts); no CocoonHibernation exists during the steady test, so no VM workflow runs then. The second
 * test parks requests at the proxy (the measured pass's first GET, the toolbox VM workflow's first
 * PATCH) so that exactly one pass sees both pods missing and no other workflow's request falls inside it.
 * Each run prints every pass's requests in order and writes them to `$TMPDIR/<ns>-requests.txt`.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { bundleWorkflows } from '../../scripts/bundle-workflows.js';
import { pkiFiles } from '../../scripts/stack/pki.js';
import { cocoonSetWorkflowId, vmWorkflowId } from '../../src/api/ids.js';
import {
  Annotations,
  Finalizers,
  GROUP,
  KIND_COCOONSET,
  Labels,
  LifecycleStates,
  PLURAL_COCOONHIBERNATIONS,
  PLURAL_COCOONSETS,
  Tags,
  VERSION,
} from '../../src/api/keys.js';
import { lifecycleOf, podReady, vmNameForPod } from '../../src/api/pod.js';
import type { CocoonSet } from '../../src/api/types.js';
import { type KubeClients, mergePatch, statusCodeOf } from '../../src/kube/client.js';
import { cocoonSetStateQuery } from '../../src/workflows/cocoonset.js';
import { SIM_IMAGE } from '../support/builders.js';
import { KubeApiProxy } from '../support/kube-proxy.js';
import { freePort } from '../support/ports.js';
import { RegistryProxy } from '../support/registry-proxy.js';
import { formatBreakdown, formatSequence, type RecordedRequest, RequestLog } from '../support/request-log.js';
import { waitFor } from '../support/wait.js';
import { VkSimClient } from '../vksim/client.js';
import { dropTag, Hibernations, headTag } from './hibernation-harness.js';
import {
  cleanEnv,
  kubectl,
  type OperatorProcess,
  stackEnv as operatorStackEnv,
  startOperator,
  waitFor200,
} from './operator-process.js';
import { kubeClients, serviceAccountKubeconfig, stackEnv } from './stack-harness.js';

const ns = `cs-steady-${randomBytes(3).toString('hex')}`;
const taskQueue = `cs-steady-${randomUUID()}`;
const SA_NAMESPACE = 'cocoon-system';
const SA_NAME = 'cocoon-operator';
const CS = 'steady';
const MAIN = `${CS}-0`;
const SUB = `${CS}-2`;
const TB_NAME = 'tb';
const TB = `${CS}-${TB_NAME}`;
const PODS = [`${CS}-0`, `${CS}-1`, `${CS}-2`, TB];
const CR = 'tb-hibernate';
const POKE = 'cocoonset-steady.test/poke';

/** Bounds of the real-time waits (a shared 2-core machine: generous; the simulator needs well under 1 s). */
const BRING_UP_MS = 150_000;
const PHASE_MS = 90_000;
const PASS_MS = 60_000;

const csPath = `/apis/${GROUP}/${VERSION}/namespaces/${ns}/${PLURAL_COCOONSETS}/${CS}`;
const crListPath = `/apis/${GROUP}/${VERSION}/namespaces/${ns}/${PLURAL_COCOONHIBERNATIONS}`;

let admin: KubeClients;
let sim: VkSimClient;
let pool: string;
let registry: string;
let log: RequestLog;
let kubeProxy: KubeApiProxy;
let registryProxy: RegistryProxy;
let connection: Connection;
let temporal: Client;
let op: OperatorProcess | undefined;
let crs: Hibernations;
let fileStart = 0;
/** Per-pass breakdowns printed at the end of the file (and in the report). */
const report: string[] = [];

/** What the CocoonSet workflow's `state` query answers (the fields used here). */
interface CSState {
  passes: number;
  passing: boolean;
  busy: boolean;
  lastSignalResourceVersion: string | null;
  nextPassAt: string | null;
  lastResult: { requeue: boolean; requeueAfterMs: number; error?: string } | null;
  observedPods: string[];
  phase: string | null;
}

async function csState(): Promise<CSState> {
  return (await temporal.workflow
    .getHandle(cocoonSetWorkflowId(ns, CS))
    .query(cocoonSetStateQuery)) as CSState;
}

/** `p`, or an Error naming `what` after `ms` (the timer is cleared either way). */
async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** The ServiceAccount kubeconfig with its server replaced by `server` (the counting proxy). */
function proxiedKubeconfig(saKubeconfig: string, server: string): string {
  const kc = parse(readFileSync(saKubeconfig, 'utf8')) as { clusters: { cluster: { server: string } }[] };
  for (const c of kc.clusters) c.cluster.server = server;
  const path = join(tmpdir(), `${ns}-operator.kubeconfig`);
  writeFileSync(path, stringify(kc), { mode: 0o600 });
  return path;
}

function cocoonSet(): CocoonSet {
  return {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: KIND_COCOONSET,
    metadata: { name: CS, namespace: ns },
    spec: {
      nodePool: pool,
      agent: { replicas: 2, image: SIM_IMAGE, mode: 'run', os: 'linux' },
      toolboxes: [{ name: TB_NAME, image: SIM_IMAGE, mode: 'run', os: 'linux' }],
    },
  } as CocoonSet;
}

async function getCS(): Promise<CocoonSet | undefined> {
  try {
    return (await admin.custom.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns,
      plural: PLURAL_COCOONSETS,
      name: CS,
    })) as CocoonSet;
  } catch (err) {
    if (statusCodeOf(err) === 404) return undefined;
    throw err;
  }
}

/** The CocoonSet's pods by name (terminating ones included). */
async function podsByName(): Promise<Map<string, V1Pod>> {
  const list = await admin.core.listNamespacedPod({
    namespace: ns,
    labelSelector: `${Labels.cocoonSet}=${CS}`,
  });
  return new Map(list.items.map((p) => [p.metadata!.name!, p]));
}

const uidsOf = (pods: Map<string, V1Pod>) =>
  Object.fromEntries([...pods].map(([n, p]) => [n, p.metadata?.uid ?? '']).sort());

/** A pod vk-cocoon has finished bringing up: Ready, lifecycle `ready`, not terminating. */
const upAndReady = (p: V1Pod | undefined) =>
  p !== undefined &&
  p.metadata?.deletionTimestamp == null &&
  podReady(p) &&
  lifecycleOf(p).state === LifecycleStates.ready;

/**
 * Waits until the CocoonSet workflow is idle (no pass running, none scheduled, the last one without
 * error) and stays so with the same pass count over three polls 0.5 s apart, while `extra` holds.
 * Returns that state. A wait, not an assertion: the tests count the passes it lets through.
 */
async function settled(what: string, extra: () => Promise<boolean> = async () => true): Promise<CSState> {
  let last: CSState | undefined;
  let stableFor = 0;
  return waitFor(
    `${what} (CocoonSet workflow idle)`,
    async () => {
      const s = await csState();
      const idle = !s.passing && s.nextPassAt === null && s.lastResult !== null && !s.lastResult.error;
      stableFor = idle && last && last.passes === s.passes ? stableFor + 1 : 0;
      last = s;
      return stableFor >= 2 && (await extra()) ? s : undefined;
    },
    PHASE_MS,
    { intervalMs: 500, describe: () => last },
  );
}

/**
 * The records of operator calls (not watches or informer lists) since `mark`, cut into passes: a pass
 * starts with its GET of the CocoonSet (`cocoonSetReadWorld`), except the GET that reads the set for a
 * finalizer Update (`cocoonSetSetFinalizer`: the next Kubernetes call is that UPDATE).
 */
function passesSince(mark: number): { before: RecordedRequest[]; passes: RecordedRequest[][] } {
  const calls = log.since(mark).filter((r) => r.origin === 'call');
  const before: RecordedRequest[] = [];
  const passes: RecordedRequest[][] = [];
  calls.forEach((r, i) => {
    const next = calls.slice(i + 1).find((n) => n.target === 'kube');
    const start =
      r.target === 'kube' &&
      r.verb === 'GET' &&
      r.path === csPath &&
      !(next?.verb === 'UPDATE' && next.path === csPath);
    if (start) passes.push([r]);
    else if (passes.length > 0) passes[passes.length - 1]!.push(r);
    else before.push(r);
  });
  return { before, passes };
}

const kubeCalls = (rs: RecordedRequest[]) => rs.filter((r) => r.target === 'kube');
const registryCalls = (rs: RecordedRequest[]) => rs.filter((r) => r.target === 'registry');
const hibernationLists = (rs: RecordedRequest[]) =>
  rs.filter((r) => r.target === 'kube' && r.verb === 'LIST' && r.path === crListPath);
const writes = (rs: RecordedRequest[]) => kubeCalls(rs).filter((r) => r.method !== 'GET');

/**
 * Prints (and keeps for the file's report) the passes of a window in order, request by request, plus
 * the watcher's own requests in the same window. `notes` label passes by index. Returns the text.
 */
function describeWindow(
  label: string,
  mark: number,
  passRecords: RecordedRequest[][],
  notes: Record<number, string> = {},
): string {
  const watcher = log.since(mark).filter((r) => r.origin !== 'call');
  const lines = [`[cocoonset-steady] ${label}`];
  passRecords.forEach((rs, i) => {
    lines.push(
      ` pass ${i + 1} (${rs.length} requests)${notes[i] ? `: ${notes[i]}` : ''}`,
      formatSequence(rs),
    );
  });
  lines.push(' watcher requests in the window (watches, informer lists):', formatBreakdown(watcher));
  const text = lines.join('\n');
  report.push(text);
  console.log(text);
  return text;
}

describe('CocoonSet steady-state cost on the real apiserver and registry', () => {
  beforeAll(async () => {
    fileStart = Date.now();
    const stack = await stackEnv();
    admin = kubeClients(stack.kubeconfig);
    registry = stack.ociRegistry;
    sim = new VkSimClient(stack.vksimUrl);
    await waitFor('simulator /healthz', async () => sim.healthy(), 30_000, { intervalMs: 250 });
    ({ pool } = await sim.state());

    // What a cluster admin installs: CRDs (the stack applied them), the ServiceAccount and its ClusterRole.
    await admin.core.createNamespace({ body: { metadata: { name: SA_NAMESPACE } } }).catch((err) => {
      if (statusCodeOf(err) !== 409) throw err;
    });
    kubectl(stack.kubeconfig, ['apply', '-k', 'config/rbac']);
    const saKubeconfig = await serviceAccountKubeconfig(SA_NAMESPACE, SA_NAME);
    await admin.core.createNamespace({ body: { metadata: { name: ns } } });
    crs = new Hibernations(admin, ns);

    log = new RequestLog();
    const pki = pkiFiles();
    kubeProxy = new KubeApiProxy({
      upstream: admin.kc.getCurrentCluster()!.server,
      ca: readFileSync(pki.caCert, 'utf8'),
      cert: readFileSync(pki.servingCert, 'utf8'),
      key: readFileSync(pki.servingKey, 'utf8'),
      log,
    });
    const kubeServer = await kubeProxy.start();
    registryProxy = new RegistryProxy({ upstream: registry, log });
    const proxiedRegistry = await registryProxy.start();

    connection = await Connection.connect({ address: stack.temporalAddress });
    temporal = new Client({ connection, namespace: stack.temporalNamespace });

    await bundleWorkflows();
    const probePort = await freePort();
    const metricsPort = await freePort();
    const env = cleanEnv({
      ...operatorStackEnv(),
      KUBECONFIG: proxiedKubeconfig(saKubeconfig, kubeServer),
      OCI_REGISTRY: proxiedRegistry,
      TEMPORAL_TASK_QUEUE: taskQueue,
      WATCH_NAMESPACE: ns,
      LEADER_ELECT: 'false',
      PROBE_ADDR: `127.0.0.1:${probePort}`,
      METRICS_ADDR: `127.0.0.1:${metricsPort}`,
      OPERATOR_LOG_LEVEL: 'info',
    });
    op = startOperator(env, [], { probePort, metricsPort, launcher: 'node' });
    await waitFor200(`${op.probeUrl}/readyz`, 90_000).catch((err) => {
      throw new Error(
        `${(err as Error).message}\nstderr: ${op?.stderr()}\nstdout: ${op?.stdout().slice(-2000)}`,
      );
    });

    const mark = log.mark();
    await admin.custom.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns,
      plural: PLURAL_COCOONSETS,
      body: cocoonSet(),
    });
    let seen: unknown;
    await waitFor(
      'CocoonSet Running with 3/3 agents and 1/1 toolboxes, every pod up',
      async () => {
        const [cs, pods] = await Promise.all([getCS(), podsByName()]);
        seen = { status: cs?.status, pods: [...pods.keys()] };
        return (
          cs?.status?.phase === 'Running' &&
          cs.status.readyAgents === 3 &&
          cs.status.readyToolboxes === 1 &&
          PODS.every((n) => upAndReady(pods.get(n)))
        );
      },
      BRING_UP_MS,
      { intervalMs: 500, describe: () => ({ seen, tail: op?.stdout().slice(-1500) }) },
    );
    await settled('bring-up settled');
    const { before, passes } = passesSince(mark);
    expect(before).toEqual([]);
    describeWindow('bring-up (CocoonSet created → Running), for reference', mark, passes);
  });

  afterAll(async () => {
    const quiet = <T>(p: Promise<T>) => p.catch(() => undefined);
    if (op && op.child.exitCode === null && admin) {
      // Let the operator tear down what it made: the CR drops its tag, the set deletes its pods and GCs.
      await quiet(crs.delete(CR));
      await quiet(
        admin.custom.deleteNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace: ns,
          plural: PLURAL_COCOONSETS,
          name: CS,
        }),
      );
      await quiet(waitFor('CocoonSet gone', async () => (await getCS()) === undefined, 60_000));
      await quiet(crs.waitGone(CR, 30_000));
    }
    if (op && op.child.exitCode === null) {
      op.child.kill('SIGTERM');
      await op.exited;
    }
    for (const id of [cocoonSetWorkflowId(ns, CS), vmWorkflowId(ns, TB)]) {
      await quiet(temporal?.workflow.getHandle(id).terminate('cocoonset-steady teardown'));
    }
    if (admin) {
      await quiet(crs.forceDelete(CR));
      await quiet(
        admin.custom.patchNamespacedCustomObject(
          {
            group: GROUP,
            version: VERSION,
            namespace: ns,
            plural: PLURAL_COCOONSETS,
            name: CS,
            body: { metadata: { finalizers: null } },
          },
          mergePatch,
        ),
      );
      await quiet(
        admin.custom.deleteNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace: ns,
          plural: PLURAL_COCOONSETS,
          name: CS,
        }),
      );
      for (const pod of PODS) {
        await quiet(admin.core.deleteNamespacedPod({ name: pod, namespace: ns, gracePeriodSeconds: 0 }));
        for (const tag of [Tags.hibernate, Tags.latest]) {
          await quiet(dropTag(registry, vmNameForPod(ns, pod), tag));
        }
      }
      await quiet(admin.core.deleteNamespace({ name: ns }));
    }
    await quiet(kubeProxy?.stop() ?? Promise.resolve());
    await quiet(registryProxy?.stop() ?? Promise.resolve());
    await quiet(connection?.close() ?? Promise.resolve());
    if (op) {
      const logFile = join(tmpdir(), `${ns}-operator.log`);
      writeFileSync(logFile, op.stdout() + op.stderr());
      console.log(`[cocoonset-steady] operator log in ${logFile}`);
    }
    if (report.length > 0) {
      const reportFile = join(tmpdir(), `${ns}-requests.txt`);
      writeFileSync(reportFile, `${report.join('\n\n')}\n`);
      console.log(`[cocoonset-steady] request breakdowns in ${reportFile}`);
    }
    console.log(`[cocoonset-steady] file wall time ${((Date.now() - fileStart) / 1000).toFixed(1)} s`);
  });

  it('a steady pass keeps every pod, lists no CocoonHibernation, calls no registry and writes nothing', async () => {
    const start = await settled('steady before the poke');
    const before = await podsByName();
    expect(PODS.every((n) => upAndReady(before.get(n)))).toBe(true);
    const mark = log.mark();

    // An annotation the operator does not read: the watcher forwards annotation changes of owned pods
    // (the reference's podRelevantChange), so this makes exactly one pass over an unchanged world.
    const poked = await admin.core.patchNamespacedPod(
      { name: MAIN, namespace: ns, body: { metadata: { annotations: { [POKE]: String(Date.now()) } } } },
      mergePatch,
    );
    // The workflow's own barrier, no quiet window: it has applied the poke's signal (its newest signalled
    // resourceVersion is the poke's or later), no pass runs or is due, and none is scheduled.
    const pokeRV = BigInt(poked.metadata!.resourceVersion!);
    let lastState: CSState | undefined;
    const after = await waitFor(
      'the poked pass finished',
      async () => {
        const s = await csState();
        lastState = s;
        const applied = s.lastSignalResourceVersion !== null && BigInt(s.lastSignalResourceVersion) >= pokeRV;
        return applied && !s.busy && s.nextPassAt === null && s.lastResult !== null ? s : undefined;
      },
      PHASE_MS,
      { intervalMs: 100, describe: () => lastState },
    );
    const { before: early, passes } = passesSince(mark);
    const text = describeWindow('steady pass (pod annotation poke, nothing changed)', mark, passes);

    // The pods survived first (so the zero counts below cannot hold because the pass stopped early).
    const now = await podsByName();
    expect(uidsOf(now)).toEqual(uidsOf(before));
    expect(PODS.every((n) => upAndReady(now.get(n)))).toBe(true);
    expect((await getCS())?.status).toMatchObject({ phase: 'Running', readyAgents: 3, readyToolboxes: 1 });

    expect(after.passes, text).toBe(start.passes + 1);
    expect(early, text).toEqual([]);
    expect(passes, text).toHaveLength(1);
    const pass = passes[0]!;
    expect(hibernationLists(pass), text).toHaveLength(0);
    expect(registryCalls(log.since(mark)), text).toHaveLength(0);
    expect(writes(pass), text).toHaveLength(0);
    // Exactly the pass's read of the world, through the proxy (so the operator's traffic is counted).
    expect(
      pass.map((r) => r.template),
      text,
    ).toEqual([
      `GET /apis/${GROUP}/${VERSION}/namespaces/{ns}/${PLURAL_COCOONSETS}/{name}`,
      'LIST /api/v1/namespaces/{ns}/pods?labelSelector',
    ]);
  });

  it('a pass with a missing sub-agent and a missing toolbox looks restore intent up exactly once and probes only the pod with intent', async () => {
    const tbVM = vmNameForPod(ns, TB);
    // Restore intent for the toolbox: a CocoonHibernation hibernates it for real (the :hibernate tag is
    // pushed by the simulator and confirmed by the VM workflow); the sub-agent has none.
    await crs.create(CR, TB, 'Hibernate');
    await crs.waitPhase(CR, 'Hibernated', PHASE_MS);
    expect(await headTag(registry, tbVM, Tags.hibernate)).toBe(200);
    const start = await settled('toolbox hibernated');
    const before = await podsByName();

    // Both pods must be gone before one pass reads the world: park that pass's first request (its GET
    // of the CocoonSet) at the proxy, delete the second pod meanwhile, then let it go on. The toolbox's
    // VM workflow reacts to the recreated pod by patching its hibernate annotation (its first request);
    // park that too until the next pass has started, so no request of another workflow lands inside
    // the measured pass (the cut is then exact by construction, not by timing).
    const hold = kubeProxy.holdNext((r) => r.verb === 'GET' && r.path === csPath);
    const vmHold = kubeProxy.holdNext(
      (r) => r.method === 'PATCH' && r.path === `/api/v1/namespaces/${ns}/pods/${TB}`,
    );
    const mark = log.mark();
    let first: RecordedRequest;
    try {
      await admin.core.deleteNamespacedPod({ name: SUB, namespace: ns, gracePeriodSeconds: 0 });
      await within(hold.held, PASS_MS, 'a pass to start after the sub-agent deletion');
      await admin.core.deleteNamespacedPod({ name: TB, namespace: ns, gracePeriodSeconds: 0 });
      await waitFor(
        'the workflow observed both deletions',
        async () => {
          const seen = (await csState()).observedPods;
          return !seen.includes(SUB) && !seen.includes(TB);
        },
        PASS_MS,
      );
      hold.release();
      first = await within(hold.forwarded, PASS_MS, 'the parked GET to be forwarded');
      await waitFor(
        'the pass after the measured one started',
        () => log.since(first.seq + 1).some((r) => r.verb === 'GET' && r.path === csPath),
        PASS_MS,
      );
    } finally {
      hold.release();
      vmHold.release();
    }

    let seen: unknown;
    const recreated = await waitFor(
      'sub-agent and toolbox recreated',
      async () => {
        const pods = await podsByName();
        seen = uidsOf(pods);
        const sub = pods.get(SUB);
        const tb = pods.get(TB);
        const fresh = (p: V1Pod | undefined, n: string) =>
          p !== undefined && p.metadata?.uid !== before.get(n)?.metadata?.uid;
        return fresh(sub, SUB) && fresh(tb, TB) && upAndReady(sub) ? pods : undefined;
      },
      BRING_UP_MS,
      { intervalMs: 500, describe: () => seen },
    );
    const end = await settled('after the recreate');
    const { before: early, passes } = passesSince(mark);
    const text = describeWindow(
      'missing sub-agent + missing toolbox (the toolbox has restore intent), then the passes while they come up',
      mark,
      passes,
      {
        0: 'the measured pass (both pods missing)',
        1: 'later passes interleave the toolbox VM workflow re-hibernating it (CocoonHibernation status, events, its HEAD)',
      },
    );

    expect(early, text).toEqual([]);
    // Every pass since the mark starts with one GET of the CocoonSet, so the cut is exact.
    expect(passes.length, text).toBe(end.passes - start.passes);
    const pass = passes[0]!;
    expect(pass[0]!.seq, text).toBe(first.seq);
    // The pass that saw both pods missing read the world, looked restore intent up once (the List shared
    // by the sub-agent and toolbox paths), created the sub-agent (no intent: no probe), probed the
    // toolbox's :hibernate tag (intent) and created the toolbox; nothing else (no status write: the status
    // did not change).
    expect(
      pass.map((r) =>
        `${r.target === 'registry' ? 'registry ' : ''}${r.template} ${r.status} ${r.detail ?? ''}`.trim(),
      ),
      text,
    ).toEqual([
      `GET /apis/${GROUP}/${VERSION}/namespaces/{ns}/${PLURAL_COCOONSETS}/{name} 200`,
      'LIST /api/v1/namespaces/{ns}/pods?labelSelector 200',
      `LIST /apis/${GROUP}/${VERSION}/namespaces/{ns}/${PLURAL_COCOONHIBERNATIONS} 200`,
      `CREATE /api/v1/namespaces/{ns}/pods 201 pods ${SUB}`,
      `registry HEAD /v2/{repo}/manifests/${Tags.hibernate} 200`,
      `CREATE /api/v1/namespaces/{ns}/pods 201 pods ${TB}`,
    ]);
    expect(hibernationLists(pass), text).toHaveLength(1);
    expect(
      registryCalls(pass).map((r) => r.path),
      text,
    ).toEqual([`/v2/${tbVM}/manifests/${Tags.hibernate}`]);
    expect(recreated.get(TB)!.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBe('true');
    expect(recreated.get(SUB)!.metadata?.annotations?.[Annotations.restoreFromHibernate]).toBeUndefined();
    // The CocoonSet still carries its finalizer (it was never deleted) and the main was never touched.
    expect((await getCS())?.metadata.finalizers).toContain(Finalizers.cocoonSet);
    expect(recreated.get(MAIN)?.metadata?.uid).toBe(before.get(MAIN)?.metadata?.uid);
  });
});
