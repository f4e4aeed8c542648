/**
 * What every benchmark scenario shares: the local stack's endpoints (checked up once), the Temporal
 * runtime (installed once per process, with a Prometheus endpoint so worker task counts can be read),
 * one connection and client, the workflow bundle (chosen as src/worker.ts does), and uncounted admin
 * Kubernetes clients for the benchmark's own setup and observation.
 */

import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import pino, { type Logger } from 'pino';
import { type KubeClients, loadKubeConfig, makeKubeClients } from '../../src/kube/client.js';
import { cachedWorkflowBundle } from '../../src/workflow-code.js';
import { type StackEnv, stackEnv } from '../../test/e2e/stack-harness.js';
import { freePort } from '../../test/support/ports.js';

/** Shared handles of one benchmark process (see the module comment). */
export interface BenchEnv {
  stack: StackEnv;
  /** Admin clients for setup/teardown and completion tracking (not counted as operator traffic). */
  admin: KubeClients;
  connection: NativeConnection;
  clientConnection: Connection;
  client: Client;
  /** The prebuilt dist/workflow-bundle.js when it is not older than src/ (as src/worker.ts decides), else a fresh bundle. */
  workflowBundle: { code: string } | { codePath: string };
  /** `host:port` of the worker runtime's Prometheus endpoint. */
  metricsAddr: string;
  /** Warnings (and errors) the Temporal runtime logged, counted by message; printed once at the end. */
  sdkWarnings: Map<string, number>;
  log: Logger;
  close(): Promise<void>;
}

/**
 * Connects to the stack (throws naming the components that are down), installs the Temporal runtime and
 * bundles the workflows. Call once per process.
 */
export async function openBenchEnv(): Promise<BenchEnv> {
  const stack = await stackEnv();
  const metricsAddr = `127.0.0.1:${await freePort()}`;
  const sdkWarnings = new Map<string, number>();
  // Overload shows up as SDK warnings (activity timeouts, slow workflow tasks): count them instead of
  // flooding the terminal, and report the counts with the results.
  const countingLogger = new DefaultLogger('WARN', (entry) => {
    // Task tokens and run ids (`<uuid>:<n>:<n> `) make every message unique; count them as one.
    const message = entry.message
      .replace(/^\S+:\d+:\d+ /, '')
      .replace(/\b[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}(:\d+)* /g, '');
    const key = `${entry.level} ${message}`.slice(0, 160);
    sdkWarnings.set(key, (sdkWarnings.get(key) ?? 0) + 1);
  });
  Runtime.install({
    // The SDK's default would turn Ctrl-C into a shutdown of the benchmark's in-process workers and leave
    // the benchmark waiting on transitions that can no longer happen; bench/run.ts handles the signals.
    shutdownSignals: [],
    logger: countingLogger,
    telemetryOptions: {
      logging: { filter: { core: 'WARN', other: 'WARN' }, forward: {} },
      metrics: { prometheus: { bindAddress: metricsAddr } },
    },
  });
  const connection = await NativeConnection.connect({ address: stack.temporalAddress });
  const clientConnection = await Connection.connect({ address: stack.temporalAddress });
  const client = new Client({ connection: clientConnection, namespace: stack.temporalNamespace });
  // The content-hash cached bundle npm start uses (src/workflow-code.ts): built once per source change.
  const workflowBundle = { codePath: (await cachedWorkflowBundle()).codePath };
  const log = pino({ level: process.env.BENCH_LOG_LEVEL ?? 'warn' });
  return {
    stack,
    admin: makeKubeClients(loadKubeConfig(stack.kubeconfig)),
    connection,
    clientConnection,
    client,
    workflowBundle,
    metricsAddr,
    sdkWarnings,
    log,
    async close() {
      await connection.close().catch(() => undefined);
      await clientConnection.close().catch(() => undefined);
    },
  };
}

/**
 * Sums of the worker runtime's Prometheus counters and histogram counts whose name contains one of
 * `names`, keyed by metric name (labels summed over). Used for workflow/activity task counts.
 */
export async function scrapeWorkerMetrics(metricsAddr: string): Promise<Record<string, number>> {
  const res = await fetch(`http://${metricsAddr}/metrics`);
  const text = await res.text();
  const out: Record<string, number> = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+([-+\deE.]+|NaN)/.exec(line);
    if (!m) continue;
    const name = m[1]!;
    if (!(name.endsWith('_total') || name.endsWith('_count'))) continue;
    out[name] = (out[name] ?? 0) + Number(m[3]);
  }
  return out;
}

/** Per-key `after − before` of two metric scrapes (keys with no change omitted). */
export function metricsDelta(after: Record<string, number>, before: Record<string, number>) {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(after)) {
    const d = v - (before[k] ?? 0);
    if (d !== 0) out[k] = d;
  }
  return out;
}
