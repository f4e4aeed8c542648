/**
 * The rig the e2e files that run the operator process share (hibernation, hibernation-faults, cocoonset,
 * cocoonset-faults, suspend, flows-crash), built once per file in `beforeAll` (`start`) and undone in
 * `afterAll` (`teardown`): a fresh namespace on the local stack with a watch recorder of its pods,
 * CocoonHibernations and CocoonSets; the registry behind a {@link RegistryProxy} that logs every request; a
 * Temporal client; the operator process (`src/worker.ts`) limited to the namespace on a task queue of its
 * own, without leader election, which a test may kill and start again (`stopOp`, `startOp`); and, for the
 * files whose sets need a node with their pool and CPU class, in-process vk-cocoon simulators, each on a node
 * of its own (`startSim`). The other files use the stack's shared simulator.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflows } from '../../scripts/bundle-workflows.js';
import { Tags } from '../../src/api/keys.js';
import type { KubeClients } from '../../src/kube/client.js';
import { freePort } from '../support/ports.js';
import { RegistryProxy } from '../support/registry-proxy.js';
import { RequestLog } from '../support/request-log.js';
import { waitFor } from '../support/wait.js';
import { pushBaseImage } from '../vksim/oci.js';
import { VkSimulator } from '../vksim/sim.js';
import { CocoonSets } from './cocoonset-harness.js';
import { dropTag, Hibernations, NamespaceRecorder } from './hibernation-harness.js';
import {
  cleanEnv,
  type OperatorProcess,
  stackEnv as operatorStackEnv,
  startReadyOperator,
  stopOperator,
} from './operator-process.js';
import { kubeClients, stackEnv } from './stack-harness.js';

/** What {@link OperatorRig.start} sets up besides the namespace and the operator. */
export interface RigOptions {
  /** Clone-mode base images to push to the registry (registry-relative, as vk-cocoon reads them). */
  images?: string[];
  /** Installed on the registry proxy before the operator starts (see {@link RegistryProxy.intercept}). */
  intercept?: RegistryProxy['intercept'];
  /**
   * How the operator runs: `node` (default) loads src/worker.ts through tsx in one process; `dist` runs the
   * image's command on the build's output (`npm run build` first).
   */
  launcher?: 'node' | 'dist';
  /** The node binary (default: the one running the tests). */
  nodeBinary?: string;
  /** Environment under the rig's own settings (e.g. the image's `ENV`, test/support/dockerfile.ts `imageEnv`). */
  baseEnv?: Record<string, string>;
}

/** A simulator node: its name, the pool label the sets select, the snapshot CPU class, and its seats. */
export interface SimNode {
  nodeName: string;
  pool: string;
  cpuClass: string;
  /** Pods the node holds at most (the simulator's default when unset). */
  seats?: number;
}

/** What {@link OperatorRig.teardown} removes besides the namespace's objects. */
export interface RigLeftovers {
  /** Workflow ids to terminate (the file's sets and VMs). */
  workflowIds: string[];
  /** VM names whose `:hibernate` and `:latest` tags to delete from the registry. */
  vms: string[];
}

/** See the module comment. The fields are set by {@link OperatorRig.start}. */
export class OperatorRig {
  /** The file's namespace: `<label>-<6 hex>`. */
  readonly ns: string;
  /** The operator's task queue: `<label>-<uuid>`. */
  readonly taskQueue: string;
  /** The registry requests the operator made, in order (through `proxy`). */
  readonly registryLog = new RequestLog();
  kube!: KubeClients;
  /** The real registry (`host:port`); the operator reaches it through `proxy`. */
  registry!: string;
  proxy!: RegistryProxy;
  temporal!: Client;
  rec!: NamespaceRecorder;
  sets!: CocoonSets;
  crs!: Hibernations;
  /** The operator process started last (`startOp`). */
  op: OperatorProcess | undefined;
  private readonly operators: OperatorProcess[] = [];
  private readonly sims: { sim: VkSimulator; nodeName: string }[] = [];
  private readonly simLog: string[] = [];
  private connection: Connection | undefined;
  private env: NodeJS.ProcessEnv = {};
  private probePort = 0;
  private metricsPort = 0;
  private startedAt = 0;
  private launcher: 'node' | 'dist' = 'node';
  private nodeBinary: string | undefined;

  /** `label` names the namespace, the task queue, the log files and the teardown's lines. */
  constructor(private readonly label: string) {
    this.ns = `${label}-${randomBytes(3).toString('hex')}`;
    this.taskQueue = `${label}-${randomUUID()}`;
  }

  /**
   * Creates the namespace and its recorder, pushes `images`, starts the proxy, connects to Temporal, builds
   * the workflow bundle (so each operator start is short) and starts the operator, ready. Throws what the
   * stack throws (a stack that is not up: `npm run stack -- up`).
   */
  async start(opts: RigOptions = {}): Promise<void> {
    this.startedAt = Date.now();
    this.launcher = opts.launcher ?? 'node';
    this.nodeBinary = opts.nodeBinary;
    const stack = await stackEnv();
    this.kube = kubeClients(stack.kubeconfig);
    this.registry = stack.ociRegistry;

    await this.kube.core.createNamespace({ body: { metadata: { name: this.ns } } });
    this.sets = new CocoonSets(this.kube, this.ns);
    this.crs = new Hibernations(this.kube, this.ns);
    this.rec = await NamespaceRecorder.start(this.kube.kc, this.ns, { cocoonSets: true });
    for (const image of opts.images ?? []) await pushBaseImage(this.registry, image);

    this.proxy = new RegistryProxy({ upstream: this.registry, log: this.registryLog });
    this.proxy.intercept = opts.intercept;
    const proxied = await this.proxy.start();
    this.connection = await Connection.connect({ address: stack.temporalAddress });
    this.temporal = new Client({ connection: this.connection, namespace: stack.temporalNamespace });

    if (this.launcher !== 'dist') await bundleWorkflows(); // the build's dist/ has its own bundle
    this.probePort = await freePort();
    this.metricsPort = await freePort();
    this.env = cleanEnv({
      ...opts.baseEnv,
      ...operatorStackEnv(),
      OCI_REGISTRY: proxied,
      TEMPORAL_TASK_QUEUE: this.taskQueue,
      WATCH_NAMESPACE: this.ns,
      LEADER_ELECT: 'false',
      PROBE_ADDR: `127.0.0.1:${this.probePort}`,
      METRICS_ADDR: `127.0.0.1:${this.metricsPort}`,
      OPERATOR_LOG_LEVEL: 'info',
    });
    await this.startOp();
  }

  /** Starts the operator (same settings and ports each time) and waits until it is ready; it becomes `op`. */
  async startOp(): Promise<OperatorProcess> {
    // Either launcher runs the operator as the pid itself (no tsx parent in between), so SIGKILL really kills it.
    this.op = await startReadyOperator(this.env, {
      probePort: this.probePort,
      metricsPort: this.metricsPort,
      launcher: this.launcher,
      ...(this.nodeBinary ? { nodeBinary: this.nodeBinary } : {}),
    });
    this.operators.push(this.op);
    return this.op;
  }

  /** Stops `op` with `signal` (SIGTERM: a graceful shutdown; SIGKILL: a crash) and waits for its exit. */
  stopOp(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    return stopOperator(this.op, signal);
  }

  /**
   * Starts a vk-cocoon simulator on node `nodeName` (registered with the apiserver; deleted by `teardown`),
   * ticking every 500 ms, its log lines (debug left out) kept for the teardown's simulator log.
   */
  async startSim(node: SimNode): Promise<VkSimulator> {
    const { nodeName } = node;
    const sim = new VkSimulator({
      kube: this.kube.kc,
      registry: this.registry,
      nodeName,
      pool: node.pool,
      cpuClass: node.cpuClass,
      tickMs: 500,
      ...(node.seats !== undefined ? { seats: node.seats } : {}),
      log: (level, msg, fields) => {
        if (level !== 'debug')
          this.simLog.push(
            `${new Date().toISOString()} ${nodeName} ${level} ${msg} ${JSON.stringify(fields)}`,
          );
      },
    });
    this.sims.push({ sim, nodeName });
    await sim.start();
    return sim;
  }

  /**
   * Undoes `start` and every `startSim`, whatever state a failed test left: stops the recorder and the
   * operator, terminates `workflowIds`, force-deletes the namespace's CRs, sets and pods, stops the
   * simulators and deletes their nodes, deletes the tags of `vms`, the namespace, the proxy and the
   * connection. Errors are ignored. Writes the operators' output and the simulators' log (if any) to the
   * temp folder and says where, with the file's wall time.
   */
  async teardown(leftovers: RigLeftovers): Promise<void> {
    const { kube, ns, temporal } = this;
    this.rec?.stop();
    if (this.proxy) {
      // A test that failed with the registry down must not hold the operator's shutdown or the tag deletes.
      this.proxy.down = false;
      this.proxy.hang = false;
      this.proxy.intercept = undefined;
    }
    await this.stopOp().catch(() => undefined);
    for (const id of leftovers.workflowIds)
      await temporal?.workflow
        .getHandle(id)
        .terminate(`${this.label} teardown`)
        .catch(() => undefined);
    for (const cr of (await this.crs?.list().catch(() => [])) ?? [])
      await this.crs.forceDelete(cr.metadata.name!);
    for (const cs of (await this.sets?.list().catch(() => [])) ?? [])
      await this.sets.forceDelete(cs.metadata.name!);
    const pods = (await kube?.core.listNamespacedPod({ namespace: ns }).catch(() => undefined))?.items ?? [];
    for (const p of pods)
      await kube.core
        .deleteNamespacedPod({ name: p.metadata!.name!, namespace: ns, gracePeriodSeconds: 0 })
        .catch(() => undefined);
    await waitFor(
      'test pods gone',
      async () =>
        (await kube.core.listNamespacedPod({ namespace: ns })).items.length === 0 ? true : undefined,
      30_000,
    ).catch(() => undefined);
    for (const { sim, nodeName } of this.sims) {
      await sim.stop().catch(() => undefined);
      await kube.core.deleteNode({ name: nodeName }).catch(() => undefined);
    }
    for (const vm of leftovers.vms)
      for (const tag of [Tags.hibernate, Tags.latest])
        await dropTag(this.registry, vm, tag).catch(() => undefined);
    await kube?.core.deleteNamespace({ name: ns }).catch(() => undefined);
    await this.proxy?.stop();
    await this.connection?.close();
    const logFile = join(tmpdir(), `${ns}-operator.log`);
    writeFileSync(logFile, this.operators.map((p) => p.stdout() + p.stderr()).join('\n--- restart ---\n'));
    let simulators = '';
    if (this.sims.length > 0) {
      writeFileSync(join(tmpdir(), `${ns}-vksim.log`), this.simLog.join('\n'));
      simulators = `, simulator log in ${ns}-vksim.log`;
    }
    console.log(`[${this.label}] operator logs in ${logFile}${simulators}`);
    console.log(`[${this.label}] file wall time ${((Date.now() - this.startedAt) / 1000).toFixed(1)} s`);
  }
}
