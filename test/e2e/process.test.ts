/**
 * The operator process end to end: settings validation as seen from outside (exit code, one stderr line),
 * and a real start against the local stack (Temporal dev server, kube-apiserver, registry): /readyz turns
 * ready, /metrics serves the cocoon_operator_ families with the Temporal worker's and the process's own,
 * and SIGTERM ends it with exit 0.
 */
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bundleWorkflows } from '../../scripts/bundle-workflows.js';
import { freePort } from '../support/ports.js';
import { cleanEnv, type OperatorProcess, stackEnv, startOperator, waitFor200 } from './operator-process.js';

const GOOD = { OCI_REGISTRY: '127.0.0.1:5000' };
const garbageKubeconfig = join(tmpdir(), `garbage-kubeconfig-${process.pid}.yaml`);
writeFileSync(garbageKubeconfig, 'this: [is not a kubeconfig\n');

// Each case: extra env, extra flags, and the setting the single stderr line must start with.
const BAD: Array<[string, Record<string, string>, string[], string]> = [
  ['OCI_REGISTRY missing', {}, [], 'OCI_REGISTRY: must be set'],
  [
    'OCI_REGISTRY with a scheme',
    { OCI_REGISTRY: 'https://registry.example.com' },
    [],
    'OCI_REGISTRY: must be host',
  ],
  [
    'HIBERNATION_CONCURRENCY=0',
    { ...GOOD, HIBERNATION_CONCURRENCY: '0' },
    [],
    'HIBERNATION_CONCURRENCY: hibernation concurrency must be at least 1, got 0',
  ],
  [
    'COCOONSET_CONCURRENCY=abc',
    { ...GOOD, COCOONSET_CONCURRENCY: 'abc' },
    [],
    'COCOONSET_CONCURRENCY: must be an integer ≥ 1, got "abc"',
  ],
  [
    '--cocoonset-concurrency=-1 over a good env',
    { ...GOOD, COCOONSET_CONCURRENCY: '8' },
    ['--cocoonset-concurrency=-1'],
    '--cocoonset-concurrency: cocoonset concurrency must be at least 1, got -1',
  ],
  ['METRICS_ADDR=8080', { ...GOOD, METRICS_ADDR: '8080' }, [], 'METRICS_ADDR: must be [host]:port'],
  ['PROBE_ADDR=:70000', { ...GOOD, PROBE_ADDR: ':70000' }, [], 'PROBE_ADDR: must be [host]:port'],
  ['LEADER_ELECT=yes', { ...GOOD, LEADER_ELECT: 'yes' }, [], 'LEADER_ELECT: must be true or false'],
  [
    'OPERATOR_LOG_LEVEL=loud',
    { ...GOOD, OPERATOR_LOG_LEVEL: 'loud' },
    [],
    'OPERATOR_LOG_LEVEL: must be one of',
  ],
  [
    'TEMPORAL_ADDRESS without port',
    { ...GOOD, TEMPORAL_ADDRESS: 'temporal' },
    [],
    'TEMPORAL_ADDRESS: must be host:port',
  ],
  [
    'TEMPORAL_TLS_CA unreadable',
    { ...GOOD, TEMPORAL_TLS_CA: '/nonexistent/ca.pem' },
    [],
    'TEMPORAL_TLS_CA: cannot read file',
  ],
  [
    'TEMPORAL_TLS_CERT without key',
    { ...GOOD, TEMPORAL_TLS_CERT: garbageKubeconfig },
    [],
    'TEMPORAL_TLS_KEY: must be set',
  ],
  [
    'WATCH_NAMESPACE not a label',
    { ...GOOD, WATCH_NAMESPACE: 'Bad_NS' },
    [],
    'WATCH_NAMESPACE: must be a Kubernetes namespace',
  ],
  [
    'KUBECONFIG missing file',
    { ...GOOD, KUBECONFIG: '/nonexistent/kubeconfig' },
    [],
    'KUBECONFIG: cannot read file',
  ],
  [
    'KUBECONFIG not a kubeconfig',
    { ...GOOD, KUBECONFIG: garbageKubeconfig },
    [],
    'KUBECONFIG: cannot load kubeconfig',
  ],
  ['unknown flag', GOOD, ['--no-such-flag=1'], '--no-such-flag: unknown flag'],
  ['bad --mode', GOOD, ['--mode=everything'], '--mode: must be all, worker or watcher'],
];

describe('operator process: bad settings', () => {
  it.each(BAD)('%s → exit 2 and one stderr line naming the setting', async (_name, env, args, prefix) => {
    // `tsx src/worker.ts` is exactly what `npm start` runs.
    const op = startOperator(cleanEnv(env), args, { launcher: 'tsx' });
    const code = await op.exited;
    expect(code).toBe(2);
    const lines = op
      .stderr()
      .split('\n')
      .filter((l) => l !== '');
    expect(lines).toHaveLength(1);
    expect(lines[0]!.startsWith(prefix), lines[0]).toBe(true);
    expect(op.stderr()).not.toMatch(/\bat .*\.(ts|js):\d+/); // no stack trace
    expect(op.stdout()).toBe('');
  });

  it('--help prints the settings table and exits 0', async () => {
    const op = startOperator(cleanEnv(), ['--help']);
    expect(await op.exited).toBe(0);
    expect(op.stdout()).toContain('HIBERNATION_CONCURRENCY');
    expect(op.stdout()).toContain('--health-probe-bind-address');
  });
});

describe('operator process against the local stack', () => {
  let env: NodeJS.ProcessEnv;
  let op: OperatorProcess | undefined;
  let probePort: number;
  let metricsPort: number;

  beforeAll(async () => {
    const stack = stackEnv();
    // Warms the content-hash bundle cache, so the operator starts without bundling.
    await bundleWorkflows();
    probePort = await freePort();
    metricsPort = await freePort();
    const id = randomUUID().slice(0, 8);
    env = cleanEnv({
      ...stack,
      // Own task queue, namespace scope and Lease namespace: other suites may share the stack.
      TEMPORAL_TASK_QUEUE: `shell-e2e-${id}`,
      WATCH_NAMESPACE: `shell-e2e-${id}`,
      LEADER_ELECT: 'false',
      PROBE_ADDR: `127.0.0.1:${probePort}`,
      METRICS_ADDR: `127.0.0.1:${metricsPort}`,
      OPERATOR_LOG_LEVEL: 'info',
    });
  });

  afterAll(async () => {
    if (op && op.child.exitCode === null) {
      op.child.kill('SIGKILL');
      await op.exited;
    }
  });

  it('turns ready, serves the metric families, and exits 0 on SIGTERM', async () => {
    op = startOperator(env, [], { probePort, metricsPort, launcher: 'tsx' });
    await op.waitForLog((l) => l.msg === 'http endpoints listening', 60_000);
    expect(await fetch(`${op.probeUrl}/healthz`).then((r) => r.text())).toBe('ok');

    expect(await waitFor200(`${op.probeUrl}/readyz`, 90_000)).toBe('ok');
    const verbose = await fetch(`${op.probeUrl}/readyz?verbose`).then((r) => r.text());
    expect(verbose).toContain('[+]temporal ok');
    expect(verbose).toContain('[+]worker ok');
    expect(verbose).toContain('[+]watcher ok');

    const text = await fetch(op.metricsUrl).then((r) => r.text());
    for (const family of [
      'cocoon_operator_subagent_rebuild_total counter',
      'cocoon_operator_subagent_dead_letter_total counter',
      'cocoon_operator_hibernate_phase_duration_seconds histogram',
      'cocoon_operator_wake_phase_duration_seconds histogram',
      'cocoon_operator_lifecycle_state_failed_observed_total counter',
      'cocoon_operator_slot_release_pods_deleted_total counter',
      'cocoon_operator_slot_release_wake_total counter',
      'cocoon_operator_slot_release_wake_unschedulable_total counter',
      'process_cpu_seconds_total counter',
    ]) {
      expect(text).toContain(`# TYPE ${family}\n`);
    }
    // The Temporal worker's own metrics (SDK exporter, merged into the same scrape).
    expect(text).toMatch(/^temporal_\w+\{.*task_queue="shell-e2e-/m);

    // Logs are JSON lines, with the Temporal runtime's lines routed into the same logger (the worker's
    // state change to RUNNING may be logged just after /readyz turned ready).
    await op.waitForLog((l) => l.component === 'temporal' && l.sdkComponent === 'worker', 10_000);
    await op.waitForLog((l) => l.component === 'temporal' && l.sdkComponent === 'core', 10_000);
    expect(op.logs.find((l) => l.msg === 'cocoon-operator dev starting')).toBeDefined();
    // Started as `npm start` starts it (with src/workflow-thread-preload.cjs): workflow stack traces off.
    expect(op.logs.find((l) => l.msg?.includes('workflow bundle'))).toMatchObject({
      workflowStackTraces: false,
      // src/workflow-completions.ts: cached workflows' completions own their bytes.
      completionsOwnBytes: true,
    });

    const t0 = Date.now();
    op.child.kill('SIGTERM');
    expect(await op.exited).toBe(0);
    expect(Date.now() - t0).toBeLessThan(15_000);
    expect(op.logs.some((l) => l.msg === 'shutdown complete')).toBe(true);
    expect(op.stderr()).toBe('');
  }, 180_000);

  it('keeps /healthz alive and /readyz failing while Temporal is unreachable', async () => {
    const dead = await freePort();
    const p = await freePort();
    const local = startOperator(
      { ...env, TEMPORAL_ADDRESS: `127.0.0.1:${dead}`, PROBE_ADDR: `127.0.0.1:${p}`, METRICS_ADDR: '0' },
      [],
      {
        probePort: p,
      },
    );
    try {
      await local.waitForLog((l) => l.msg === 'cannot reach Temporal yet; retrying', 60_000);
      expect(await fetch(`${local.probeUrl}/healthz`).then((r) => r.status)).toBe(200);
      const res = await fetch(`${local.probeUrl}/readyz`);
      expect(res.status).toBe(503);
      expect(await res.text()).toContain('[-]temporal failed: not connected');
      local.child.kill('SIGTERM');
      expect(await local.exited).toBe(0);
    } finally {
      if (local.child.exitCode === null) local.child.kill('SIGKILL');
    }
  }, 120_000);

  it('TEMPORAL_TLS=true against the plaintext dev server: keeps retrying, and the warning names the setting', async () => {
    const p = await freePort();
    const local = startOperator(
      { ...env, TEMPORAL_TLS: 'true', PROBE_ADDR: `127.0.0.1:${p}`, METRICS_ADDR: '0' },
      [],
      {
        probePort: p,
      },
    );
    try {
      const line = await local.waitForLog((l) => l.msg?.startsWith('cannot reach Temporal') === true, 60_000);
      expect(line.msg).toBe(
        'cannot reach Temporal: the server answered without TLS: unset TEMPORAL_TLS (and the TLS settings that imply it) or use its TLS address; retrying',
      );
      expect(await fetch(`${local.probeUrl}/readyz`).then((r) => r.status)).toBe(503);
      local.child.kill('SIGTERM');
      expect(await local.exited).toBe(0);
    } finally {
      if (local.child.exitCode === null) local.child.kill('SIGKILL');
    }
  }, 120_000);
});
