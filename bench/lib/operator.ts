/**
 * The system under test, run in-process the way src/worker.ts wires it: a Worker on the base task queue
 * with the workflows (VM and CocoonSet) and the real Kubernetes activities of both, a Worker on
 * `taskQueues(base).hibernationRegistry` with the real registry activities and
 * maxConcurrentActivityTaskExecutions = C (the concurrency knob, docs/architecture.md#the-concurrency-knob),
 * one on `taskQueues(base).cocoonSetRegistry` with COCOONSET_CONCURRENCY's default slots, and the real
 * watcher (CocoonSets included) scoped to the run's namespace. The operator's Kubernetes requests go through
 * a {@link CountingKubeConfig}; its registry client points at a {@link RegistryProxy}.
 *
 * The only addition is an activity timing hook (a wrapper recording start/end of each call), used by the
 * latency scenario to time the first pod patch.
 */
import { randomBytes } from 'node:crypto';
import { Worker } from '@temporalio/worker';
import { createCocoonSetActivities } from '../../src/activities/cocoonset.js';
import { heartbeatWhileRunning } from '../../src/activities/heartbeat.js';
import { createKubeActivities } from '../../src/activities/kube.js';
import { createRegistryActivities } from '../../src/activities/registry.js';
import { taskQueues } from '../../src/api/ids.js';
import { ENV_SETTINGS } from '../../src/config.js';
import { type KubeClients, makeKubeClients } from '../../src/kube/client.js';
import { OwnWrites } from '../../src/kube/own-writes.js';
import { OCIRegistryClient } from '../../src/registry/client.js';
import { startWatcher, type Watcher } from '../../src/watcher/index.js';
import { ownCompletionBytes } from '../../src/workflow-completions.js';
import { configureWorkflowStackTraces } from '../../src/workflow-threads.js';
import { RegistryProxy } from '../../test/support/registry-proxy.js';
import type { BenchEnv } from './env.js';
import { CountingKubeConfig } from './kube-count.js';

/** COCOONSET_CONCURRENCY's default, as src/config.ts declares it. */
const DEFAULT_COCOONSET_CONCURRENCY = Number(
  ENV_SETTINGS.find((s) => s.env === 'COCOONSET_CONCURRENCY')?.default ?? '4',
);

/** One activity call as the timing hook saw it (local epoch ms). */
export interface ActivityCall {
  name: string;
  input: unknown;
  start: number;
  end: number;
  ok: boolean;
}

/** What varies per run: the watched namespace, the registry concurrency and latency, the timing hook. */
export interface OperatorOptions {
  /** Kubernetes namespace the watcher is scoped to. */
  namespace: string;
  /** Registry activity slots of the hibernation registry worker (maxConcurrentActivityTaskExecutions). */
  concurrency: number;
  /** Registry activity slots of the CocoonSet registry worker (default 4, COCOONSET_CONCURRENCY's default). */
  cocoonSetConcurrency?: number;
  /** Added latency per registry request, ms. */
  latencyMs: number;
  /** Extra uniform random latency per registry request, ms. */
  jitterMs?: number;
  /** Called after every activity call (of the workflow worker only when this call creates it). */
  onActivity?: (call: ActivityCall) => void;
  /**
   * A running workflow worker to use instead of creating one; `stop()` then leaves it running. Its task
   * queue, Kubernetes clients and request counter become this operator's.
   */
  host?: WorkflowHost;
}

/** A started in-process operator and the counters the scenarios read. */
export interface RunningOperator {
  taskQueue: string;
  proxy: RegistryProxy;
  kubeConfig: CountingKubeConfig;
  watcher: Watcher;
  /** Stops the watcher, then the workers (graceful; the workflow worker only when not shared), then the proxy. */
  stop(): Promise<void>;
}

function timed<T extends Record<string, (input: never) => Promise<unknown>>>(
  acts: T,
  hook: ((call: ActivityCall) => void) | undefined,
): T {
  if (!hook) return acts;
  const out: Record<string, (input: never) => Promise<unknown>> = {};
  for (const [name, fn] of Object.entries(acts)) {
    out[name] = async (input: never) => {
      const start = Date.now();
      try {
        const r = await fn(input);
        hook({ name, input, start, end: Date.now(), ok: true });
        return r;
      } catch (err) {
        hook({ name, input, start, end: Date.now(), ok: false });
        throw err;
      }
    };
  }
  return out as T;
}

/**
 * The workflow worker on its own: VM and CocoonSet workflows and the real Kubernetes activities (through a
 * fresh {@link CountingKubeConfig}) on a fresh base task queue. Consecutive runs may share one (see
 * {@link OperatorOptions.host}): loading the workflow bundle into a new worker costs ~1 CPU-second here.
 */
export interface WorkflowHost {
  taskQueue: string;
  kubeConfig: CountingKubeConfig;
  kube: KubeClients;
  /** The activities' writes, for the watcher's echo filter (as src/worker.ts wires it). */
  ownWrites: OwnWrites;
  /** Shuts the worker down (graceful). */
  stop(): Promise<void>;
}

/** Creates and runs a {@link WorkflowHost}. */
export async function startWorkflowHost(
  env: BenchEnv,
  onActivity?: (call: ActivityCall) => void,
): Promise<WorkflowHost> {
  const taskQueue = `bench-${randomBytes(6).toString('hex')}`;
  const kubeConfig = new CountingKubeConfig();
  kubeConfig.loadFromFile(env.stack.kubeconfig);
  const kube = makeKubeClients(kubeConfig);
  const ownWrites = new OwnWrites();
  // As the operator does (src/worker.ts): WORKFLOW_STACK_TRACES, off unless `true`.
  configureWorkflowStackTraces(process.env.WORKFLOW_STACK_TRACES === 'true');
  ownCompletionBytes(Worker.prototype);
  const worker = await Worker.create({
    connection: env.connection,
    namespace: env.stack.temporalNamespace,
    taskQueue: taskQueues(taskQueue).workflows,
    workflowBundle: env.workflowBundle,
    interceptors: { activity: [heartbeatWhileRunning] },
    activities: timed(
      { ...createKubeActivities({ kube, ownWrites }), ...createCocoonSetActivities({ kube, ownWrites }) },
      onActivity,
    ),
  });
  const run = worker.run();
  return {
    taskQueue,
    kubeConfig,
    kube,
    ownWrites,
    async stop() {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await run.catch(() => undefined);
    },
  };
}

/**
 * Starts proxy, registry client (warmed up: its one-time `/v2/` ping and a HEAD of a throwaway repository
 * are done, then the proxy's counters are cleared, so the counts afterwards are the workload's alone),
 * the workflow worker (or uses `opts.host`), the registry workers, and the watcher (synced before this
 * resolves).
 */
export async function startOperator(env: BenchEnv, opts: OperatorOptions): Promise<RunningOperator> {
  const proxy = new RegistryProxy({
    upstream: env.stack.ociRegistry,
    latencyMs: opts.latencyMs,
    jitterMs: opts.jitterMs ?? 0,
  });
  const registryAddr = await proxy.start();
  const registry = new OCIRegistryClient(registryAddr);
  await registry.hasManifest('bench-warmup', 'hibernate');
  proxy.counts.clear();

  const host = opts.host ?? (await startWorkflowHost(env, opts.onActivity));
  const ownHost = opts.host === undefined;
  const { taskQueue, kubeConfig, kube } = host;
  const queues = taskQueues(taskQueue);
  const common = {
    connection: env.connection,
    namespace: env.stack.temporalNamespace,
    interceptors: { activity: [heartbeatWhileRunning] },
  };
  const registryActivities = timed(createRegistryActivities({ registry }), opts.onActivity);
  const workers = [
    await Worker.create({
      ...common,
      taskQueue: queues.hibernationRegistry,
      activities: registryActivities,
      maxConcurrentActivityTaskExecutions: opts.concurrency,
    }),
    await Worker.create({
      ...common,
      taskQueue: queues.cocoonSetRegistry,
      activities: registryActivities,
      maxConcurrentActivityTaskExecutions: opts.cocoonSetConcurrency ?? DEFAULT_COCOONSET_CONCURRENCY,
    }),
  ];
  const runs = workers.map((w) => w.run());
  const stopWorkers = async () => {
    for (const wk of workers) if (wk.getState() === 'RUNNING') wk.shutdown();
    await Promise.allSettled(runs);
    if (ownHost) await host.stop();
  };
  let watcher: Watcher | undefined;
  try {
    watcher = await startWatcher({
      kube,
      client: env.client,
      taskQueue: queues.workflows,
      namespace: opts.namespace,
      log: env.log,
      cocoonSets: true,
      ownWrites: host.ownWrites,
    });
    await watcher.waitForSync();
  } catch (err) {
    await stopWorkers();
    await proxy.stop();
    throw err;
  }
  const w = watcher;
  return {
    taskQueue,
    proxy,
    kubeConfig,
    watcher: w,
    async stop() {
      await w.stop();
      await stopWorkers();
      registry.close();
      await proxy.stop();
    },
  };
}
