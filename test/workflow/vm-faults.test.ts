/**
 * The VM workflow under faults, on the time-skipping test server: a registry that fails every probe
 * through a deadline, CocoonHibernations whose podRef can never name a pod, two opposite desires created
 * within one second, and a registry worker killed (-9) in the middle of a registry call.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { vmWorkflowId } from '../../src/api/ids.js';
import {
  Annotations,
  CONDITION_CONFLICT,
  CONDITION_PROBE_FAILING,
  CONDITION_READY,
} from '../../src/api/keys.js';
import { vmStateQuery } from '../../src/workflows/messages.js';
import { waitFor } from '../support/wait.js';
import { createEnv, registryWorker, skipUntil, withWorld } from './harness.js';
import type { VMWorld } from './vm-world.js';

const NS = 'ns';
const VM = 'vk-ns-demo-0';
let env: TestWorkflowEnvironment;

beforeEach(async () => {
  env = await createEnv();
});
afterEach(async () => {
  await env?.teardown();
});

const condition = (world: VMWorld, name: string, type: string) =>
  world.cr(NS, name)?.status?.conditions?.find((c) => c.type === type);
const phase = (world: VMWorld, name = 'hib') => world.cr(NS, name)?.status?.phase;

/** A pod vk-cocoon has hibernated: the hibernate gate is open, so the next step is the registry probe. */
const hibernatedPod = (world: VMWorld) =>
  world.putPod(NS, 'demo-0', {
    annotations: {
      [Annotations.vmName]: VM,
      [Annotations.managed]: 'true',
      [Annotations.hibernate]: 'true',
      [Annotations.lifecycleState]: 'hibernated',
    },
  });

describe('VM workflow under faults', () => {
  it('the hibernate deadline fires at 3m0s while every probe fails (the error backoff does not delay it), and the status says the probes fail', async () => {
    await withWorld(env, async (world) => {
      world.probeError = new Error('connection reset');
      await hibernatedPod(world);
      await world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Hibernate' });
      await waitFor(
        'the probe failure on the status',
        () => !!condition(world, 'hib', CONDITION_PROBE_FAILING),
      );
      expect(phase(world)).toBe('Hibernating');
      const started = Date.parse(condition(world, 'hib', CONDITION_READY)!.lastTransitionTime!);
      const probe = condition(world, 'hib', CONDITION_PROBE_FAILING)!;
      expect(probe).toMatchObject({ status: 'True', reason: 'RegistryError' });
      expect(probe.message).toBe(
        `probe hibernate snapshot ${VM}: connection reset; retrying until ${new Date(started + 180_000).toISOString().replace('.000Z', 'Z')}, then Failed`,
      );

      await skipUntil(env, 'Failed', () => phase(world) === 'Failed', 6 * 60_000, 10_000);
      expect(condition(world, 'hib', CONDITION_READY)?.message).toBe('hibernate not confirmed within 3m0s');
      // The time spent Hibernating, measured by the workflow's own clock at the timeout: the deadline is
      // strict (> 3m0s) at second precision, so it fires in (180 s, 182 s]. Before the fix the pass that
      // noticed it waited out the error backoff (capped at 60 s): ~207 s here, 3m41s in the field.
      expect(world.phaseDurations).toEqual([{ kind: 'hibernate', result: 'timeout' }]);
      expect(world.phaseSeconds[0]).toBeGreaterThan(180);
      expect(world.phaseSeconds[0]).toBeLessThanOrEqual(182);
      // The cause stays on the Failed CR.
      expect(condition(world, 'hib', CONDITION_PROBE_FAILING)?.status).toBe('True');

      // The registry answers again: the retry completes and the probe condition goes.
      world.probeError = undefined;
      world.tags.add(`${VM}:hibernate`);
      await skipUntil(env, 'Hibernated', () => phase(world) === 'Hibernated', 120_000, 10_000);
      expect(condition(world, 'hib', CONDITION_PROBE_FAILING)).toBeUndefined();
    });
  }, 120_000);

  it('a podRef no pod can have is Failed with the reason, not Pending for ever', async () => {
    await withWorld(env, async (world) => {
      const long = `a${'b'.repeat(253)}`;
      await world.putCR({ namespace: NS, name: 'slash', podRef: 'Foo_Bar/x', desire: 'Hibernate' });
      await world.putCR({ namespace: NS, name: 'long', podRef: long, desire: 'Wake' });
      await waitFor(
        'both Failed',
        () => phase(world, 'slash') === 'Failed' && phase(world, 'long') === 'Failed',
      );
      expect(condition(world, 'slash', CONDITION_READY)).toMatchObject({
        status: 'False',
        reason: 'Failed',
        message:
          "spec.podRef.name \"Foo_Bar/x\" can never name a pod: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
      });
      expect(condition(world, 'long', CONDITION_READY)?.message).toBe(
        `spec.podRef.name "${long}" can never name a pod: must be no more than 253 characters (it has 254)`,
      );
      // Deleting such a CR is not blocked: nothing was recorded, so only the finalizer goes.
      await world.deleteCR(NS, 'slash');
      await waitFor('slash gone', () => world.cr(NS, 'slash') === undefined);
      expect(world.calls.some((c) => c.startsWith('DELETE'))).toBe(false);
    });
  });

  it('of two opposite desires created in the same second, the one created first holds the VM (not the name-first one), also after the workflow restarts', async () => {
    await withWorld(env, async (world) => {
      await world.putPod(NS, 'demo-0', {
        annotations: {
          [Annotations.vmName]: VM,
          [Annotations.managed]: 'true',
          [Annotations.vmID]: 'vmid-1',
        },
        containerRunning: true,
      });
      const sameSecond = '2026-01-01T00:00:07Z';
      // Created first (a lower resourceVersion), but its name sorts last.
      await world.putCR({
        namespace: NS,
        name: 'z-wake',
        podRef: 'demo-0',
        desire: 'Wake',
        creationTimestamp: sameSecond,
      });
      await world.putCR({
        namespace: NS,
        name: 'a-hib',
        podRef: 'demo-0',
        desire: 'Hibernate',
        creationTimestamp: sameSecond,
      });
      await waitFor('z-wake Active', () => phase(world, 'z-wake') === 'Active');
      await waitFor(
        'a-hib told it lost',
        () => condition(world, 'a-hib', CONDITION_CONFLICT)?.status === 'True',
      );
      expect(condition(world, 'a-hib', CONDITION_CONFLICT)?.message).toBe(
        `VM ${VM} is held by cocoonhibernation z-wake (desire Wake, created in the same second, seen first); desire Hibernate waits until that one is deleted`,
      );
      const hibernatePatch = (c: string) => c.startsWith('patchPod') && c.includes('"true"');
      await world.settled(env, NS, 'demo-0');
      expect(world.calls.some(hibernatePatch)).toBe(false);

      // The winner is edited later (its resourceVersion is now the newer one), and the workflow is
      // restarted from scratch: the decision recorded in the world (a-hib's DesireConflict) stands.
      await world.putCR({ ...world.cr(NS, 'z-wake')! });
      // The new run starts without the world (as after continue-as-new, or a start before the watcher's
      // caches are listed), so it re-reads it: the decision must come from the world, not the old run.
      world.startWorld = false;
      const id = vmWorkflowId(NS, 'demo-0');
      await env.client.workflow.getHandle(id).terminate('restart');
      const reads = world.calls.filter((c) => c.startsWith('readVMWorld')).length;
      await world.annotatePod(NS, 'demo-0', { 'example.com/touch': '1' });
      await waitFor(
        'the new run re-read the world',
        () => world.calls.filter((c) => c.startsWith('readVMWorld')).length > reads,
      );
      // The state query once the new run has read both CRs (its first pass decides in the same task).
      const handle = env.client.workflow.getHandle(id);
      const view = await waitFor('the new run has read both CRs', async () => {
        const v = (await handle.query(vmStateQuery)) as { holder: string | null; hibernations: unknown[] };
        return v.hibernations.length === 2 ? v : undefined;
      });
      expect(view?.holder).toBe('z-wake');
      expect(world.calls.some(hibernatePatch)).toBe(false);
      expect(world.pod(NS, 'demo-0')?.annotations?.[Annotations.hibernate]).toBeUndefined();
    });
  });

  it('a registry worker killed (-9) mid-call: the transition resumes within seconds of the new worker, not after the 45 s start-to-close', async () => {
    await withWorld(
      env,
      async (world) => {
        const child = startHangingRegistryWorker(world.taskQueue);
        try {
          await waitForLine(child, 'polling', 60_000);
          world.tags.add(`${VM}:hibernate`);
          await hibernatedPod(world);
          await world.putCR({ namespace: NS, name: 'hib', podRef: 'demo-0', desire: 'Hibernate' });
          await waitForLine(child, 'started hasManifest', 30_000);
          child.kill('SIGKILL');
          await once(child, 'exit');
        } finally {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
        }
        const reg = await registryWorker(env, world);
        const restartedAt = Date.now();
        await reg.runUntil(
          waitFor('Hibernated on the new worker', () => phase(world) === 'Hibernated', 30_000),
        );
        const resumedMs = Date.now() - restartedAt;
        // The heartbeat timeout (5 s) plus the retry interval (1 s) and the task round trips.
        expect(resumedMs).toBeLessThan(12_000);
        expect(world.calls.filter((c) => c.startsWith('HEAD'))).toHaveLength(1);
      },
      { registryWorker: false },
    );
  }, 120_000);
});

function startHangingRegistryWorker(workflowTaskQueue: string): ChildProcess & { out: string } {
  const queue = `${workflowTaskQueue}-hibernation-registry`;
  const script = new URL('./fixtures/hanging-registry-worker.ts', import.meta.url).pathname;
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', script, env.address, env.namespace ?? 'default', queue],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  ) as ChildProcess & { out: string };
  child.out = '';
  child.stdout!.on('data', (d: Buffer) => {
    child.out += d.toString();
  });
  return child;
}

async function waitForLine(
  child: ChildProcess & { out: string },
  line: string,
  timeoutMs: number,
): Promise<void> {
  await waitFor(`child printed "${line}"`, () => child.out.split('\n').includes(line), timeoutMs);
}
