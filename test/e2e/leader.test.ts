/**
 * Leader election between real operator processes on the local stack
 * (docs/configuration.md#notes-on-some-settings): two processes, exactly one watches; kill -9 of the leader
 * hands over after the 15 s lease expires (plus at most one 2 s retry with jitter); a graceful stop releases
 * the Lease so the standby takes over at its next retry. Each test run uses its own namespace for the Lease
 * and the watch scope, and its own task queue.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bundleWorkflows } from '../../scripts/bundle-workflows.js';
import { LEADER_ELECTION_ID } from '../../src/api/keys.js';
import { type KubeClients, loadKubeConfig, makeKubeClients } from '../../src/kube/client.js';
import { LEASE_DURATION_MS, RETRY_PERIOD_MS } from '../../src/leader.js';
import { freePort } from '../support/ports.js';
import { waitFor } from '../support/wait.js';
import {
  cleanEnv,
  type LogLine,
  type OperatorProcess,
  stackEnv,
  startOperator,
  waitFor200,
} from './operator-process.js';

const JITTERED_RETRY_MS = RETRY_PERIOD_MS * 2.2;
const isStarted = (l: LogLine) => l.msg === 'started watching';
const isAcquired = (l: LogLine) => l.msg === 'successfully acquired lease';

describe('leader election between two operator processes', () => {
  const id = randomUUID().slice(0, 8);
  const namespace = `shell-leader-${id}`;
  let kube: KubeClients;
  let baseEnv: NodeJS.ProcessEnv;
  const procs: OperatorProcess[] = [];

  async function start(): Promise<OperatorProcess> {
    const probePort = await freePort();
    const metricsPort = await freePort();
    const op = startOperator(
      { ...baseEnv, PROBE_ADDR: `127.0.0.1:${probePort}`, METRICS_ADDR: `127.0.0.1:${metricsPort}` },
      [],
      { probePort, metricsPort },
    );
    procs.push(op);
    return op;
  }

  async function holder(): Promise<string | undefined> {
    const lease = await kube.coordination.readNamespacedLease({ name: LEADER_ELECTION_ID, namespace });
    return lease.spec?.holderIdentity;
  }

  async function leaderGauge(op: OperatorProcess): Promise<string | undefined> {
    const text = await fetch(op.metricsUrl).then((r) => r.text());
    return /^leader_election_master_status\{name="[^"]+"\} (\d)$/m.exec(text)?.[1];
  }

  const identityOf = (op: OperatorProcess) =>
    op.logs.find((l) => l.msg === 'attempting to acquire leader lease')?.identity as string | undefined;

  beforeAll(async () => {
    const stack = stackEnv();
    await bundleWorkflows();
    kube = makeKubeClients(loadKubeConfig(stack.KUBECONFIG));
    await kube.core.createNamespace({ body: { metadata: { name: namespace } } });
    baseEnv = cleanEnv({
      ...stack,
      TEMPORAL_TASK_QUEUE: `shell-leader-${id}`,
      WATCH_NAMESPACE: namespace,
      LEADER_ELECT: 'true',
      LEADER_ELECTION_NAMESPACE: namespace,
    });
  });

  afterAll(async () => {
    for (const op of procs) {
      if (op.child.exitCode === null && op.child.signalCode === null) {
        op.child.kill('SIGTERM');
        const timer = setTimeout(() => op.child.kill('SIGKILL'), 15_000);
        await op.exited;
        clearTimeout(timer);
      }
    }
    // The stack runs no namespace controller, so delete the Lease itself as well as its namespace.
    await kube?.coordination
      .deleteNamespacedLease({ name: LEADER_ELECTION_ID, namespace })
      .catch(() => undefined);
    await kube?.core.deleteNamespace({ name: namespace }).catch(() => undefined);
  });

  it('one leads and watches, the other stands by ready; kill -9 hands over within the Lease timings', async () => {
    const a = await start();
    await a.waitForLog(isStarted, 120_000);
    const b = await start();
    // B is ready as a standby (Temporal reachable, not leading), and it does not watch.
    await waitFor200(`${b.probeUrl}/readyz`, 120_000);
    await waitFor200(`${a.probeUrl}/readyz`, 30_000);
    await b.waitForLog((l) => l.msg === 'new leader observed' && l.leader === identityOf(a), 30_000);
    expect(identityOf(a)).toMatch(/^[^_]+_[0-9a-f-]{36}$/);
    expect(await holder()).toBe(identityOf(a));
    expect(a.logs.filter(isStarted)).toHaveLength(1);
    expect(b.logs.filter(isStarted)).toHaveLength(0);
    expect(await leaderGauge(a)).toBe('1');
    expect(await leaderGauge(b)).toBe('0');

    // Watch the Lease's renewals so the handover can be measured from the last one.
    const renewTime = async () =>
      (await kube.coordination.readNamespacedLease({ name: LEADER_ELECTION_ID, namespace })).spec?.renewTime;
    const before = String(await renewTime());
    let lastRenewSeenAt = Date.now();
    await waitFor('a Lease renewal', async () => String(await renewTime()) !== before, 30_000, {
      intervalMs: 100,
    });
    lastRenewSeenAt = Date.now();
    a.child.kill('SIGKILL');
    expect(await a.exited).toBe('SIGKILL');

    const took = await b.waitForLog(isAcquired, LEASE_DURATION_MS + 3 * JITTERED_RETRY_MS + 10_000);
    const handover = (took.time as number) - lastRenewSeenAt;
    console.info(`handover after kill -9: ${handover} ms after the leader's last renewal`);
    // Not before A's lease expired: B measures 15 s from its first read after the last renewal. At most
    // that read's delay (one jittered retry) plus one more retry after expiry.
    expect(handover).toBeGreaterThanOrEqual(LEASE_DURATION_MS - 500);
    expect(handover).toBeLessThanOrEqual(LEASE_DURATION_MS + 2 * JITTERED_RETRY_MS + 1_000);
    await b.waitForLog(isStarted, 30_000);
    expect(await holder()).toBe(identityOf(b));
    expect(await leaderGauge(b)).toBe('1');
  }, 240_000);

  it('a graceful stop of the leader releases the Lease and the standby takes over at its next retry', async () => {
    const b = procs[1]!;
    const c = await start();
    await waitFor200(`${c.probeUrl}/readyz`, 120_000);
    await c.waitForLog((l) => l.msg === 'new leader observed' && l.leader === identityOf(b), 30_000);
    expect(c.logs.filter(isStarted)).toHaveLength(0);

    const t0 = Date.now();
    b.child.kill('SIGTERM');
    expect(await b.exited).toBe(0);
    const stopped = b.logs.findIndex((l) => l.msg === 'stopped watching');
    const released = b.logs.findIndex((l) => l.msg === 'released leader lease');
    expect(stopped).toBeGreaterThanOrEqual(0);
    expect(released).toBeGreaterThan(stopped); // stop watching first, then give the Lease up

    const took = await c.waitForLog(isAcquired, 2 * JITTERED_RETRY_MS + 5_000);
    expect((took.time as number) - t0).toBeLessThan(JITTERED_RETRY_MS + 5_000); // far below the 15 s expiry
    await c.waitForLog(isStarted, 30_000);
    expect(await holder()).toBe(identityOf(c));
  }, 180_000);
});
