/**
 * The image's command end to end: `npm run build`, then the Dockerfile's CMD (`node … dist/operator.js`: the
 * main thread bundled into one file by scripts/bundle-operator.ts, and the prebuilt workflow bundle) against
 * the local stack, with the shared vk-cocoon simulator, on the image's Node major (scripts/node.sh) and with
 * the Dockerfile's `ENV`. Every other e2e file runs src/worker.ts through tsx; this one proves what the image
 * ships: the bundle imports only Node builtins and production dependencies (the image's node_modules has no
 * dev dependencies), it hibernates and wakes a VM, writes nothing to stderr (bundled, client-node's
 * dependencies are outside node_modules, where Node 24 prints their deprecation warnings; the CMD turns those
 * off), and exits 0 on SIGTERM. Not covered: leader election (off, as in every e2e file) and CocoonSets.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { vmWorkflowId } from '../../src/api/ids.js';
import { LifecycleStates, Tags } from '../../src/api/keys.js';
import { containerRunning, lifecycleOf, vmIDOf, vmNameForPod } from '../../src/api/pod.js';
import { simPod } from '../support/builders.js';
import { imageEnv, imageNodeArgs } from '../support/dockerfile.js';
import { waitFor } from '../support/wait.js';
import { VkSimClient } from '../vksim/client.js';
import { headTag } from './hibernation-harness.js';
import { imageNode, ROOT } from './operator-process.js';
import { OperatorRig } from './operator-rig.js';
import { stackEnv } from './stack-harness.js';

const rig = new OperatorRig('image-e2e');
const { ns } = rig;
const POD = 'i1';
const vm = vmNameForPod(ns, POD);
const QUICK_MS = 45_000;

describe('the image command (bundled dist/operator.js) on the local stack', () => {
  beforeAll(async () => {
    execFileSync('npm', ['run', 'build'], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
    await rig.start({ launcher: 'dist', nodeBinary: imageNode().path, baseEnv: imageEnv() });
  }, 300_000);

  afterAll(async () => {
    await rig.teardown({ workflowIds: [vmWorkflowId(ns, POD)], vms: [vm] });
  });

  it('dist/operator.js imports only Node builtins and production dependencies', () => {
    expect(imageNodeArgs().at(-1)).toBe('dist/operator.js');
    const bundle = readFileSync(join(ROOT, 'dist', 'operator.js'), 'utf8');
    // esbuild leaves externals as static imports (`import{a}from"x"`), dynamic imports and require calls.
    const specifiers = new Set(
      [
        ...bundle.matchAll(
          /\bimport\s*(?:[\w$*{}\s,]+from\s*)?"([@\w./:-]+)"|\bimport\("([@\w./:-]+)"\)|\brequire\("([@\w./:-]+)"\)/g,
        ),
      ].map((m) => m[1] ?? m[2] ?? m[3]!),
    );
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    const packageOf = (s: string) =>
      s
        .split('/')
        .slice(0, s.startsWith('@') ? 2 : 1)
        .join('/');
    const temporal = [...specifiers].filter((s) => s.startsWith('@temporalio/'));
    expect(temporal.length).toBeGreaterThan(0);
    for (const s of specifiers) {
      if (s.startsWith('node:') || builtinModules.includes(packageOf(s))) continue;
      expect(pkg.dependencies, `${s} is imported by dist/operator.js`).toHaveProperty([packageOf(s)]);
    }
  });

  it('runs dist/operator.js with the prebuilt workflow bundle, hibernates and wakes a VM, prints nothing on stderr and exits 0 on SIGTERM', async () => {
    const op = rig.op!;
    expect(op.logs.find((l) => l.msg?.includes('workflow bundle'))).toMatchObject({
      origin: 'prebuilt',
      workflowStackTraces: false,
      // src/workflow-completions.ts: cached workflows' completions own their bytes.
      completionsOwnBytes: true,
    });

    const sim = new VkSimClient((await stackEnv()).vksimUrl);
    const { pool } = await sim.state();
    const { kube, crs, registry } = rig;
    await kube.core.createNamespacedPod({
      namespace: ns,
      body: simPod({ namespace: ns, name: POD, vmName: vm, pool, app: 'image-e2e' }),
    });
    const running = async () => {
      const p = await kube.core.readNamespacedPod({ name: POD, namespace: ns });
      return containerRunning(p) && vmIDOf(p) !== '' && lifecycleOf(p).state === LifecycleStates.ready;
    };
    await waitFor(`pod ${POD} running with a VM id`, running, QUICK_MS);

    await crs.create(POD, POD, 'Hibernate');
    await crs.waitPhase(POD, 'Hibernated', QUICK_MS);
    expect(await headTag(registry, vm, Tags.hibernate)).toBe(200);

    await crs.setDesire(POD, 'Wake');
    await crs.waitPhase(POD, 'Active', QUICK_MS);
    expect(await running()).toBe(true);
    expect(await headTag(registry, vm, Tags.hibernate)).toBe(404);

    await rig.stopOp('SIGTERM');
    expect(await op.exited).toBe(0);
    expect(op.logs.some((l) => l.msg === 'shutdown complete')).toBe(true);
    expect(op.stderr()).toBe('');
  }, 180_000);
});
