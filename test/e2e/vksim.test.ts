/**
 * Smoke test of the vk-cocoon simulator on the real local stack (kube-apiserver + etcd, distribution
 * registry, the simulator started by `npm run stack -- up`). It plays the operator's part by hand: a pod
 * carrying the annotations the operator writes, then the hibernate / wake / delete annotations, and
 * checks what vk-cocoon promises (docs/wire-contract.md#vk-cocoon, docs/development.md#simulator): binding,
 * Running/Ready + VM id + lifecycle `ready`, the `:hibernate` tag pushed before `hibernated`, wake with a new
 * VM id, the generation echo, `:latest` on delete, and two injected faults (push failure, VM crash).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { CoreV1Api, type KubeConfig, type V1Pod, Watch } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Annotations,
  Labels,
  LifecycleStates,
  SnapshotArtifact,
  VK_EVENT_SOURCE,
  VK_PROVIDER_TAINT,
  VkEventReasons,
  VkStatusReasons,
} from '../../src/api/keys.js';
import { containerRunning, lifecycleOf, podReady, vmIDOf } from '../../src/api/pod.js';
import { loadKubeConfig, statusCodeOf, strategicMergePatch } from '../../src/kube/client.js';
import { SIM_IMAGE, simPod } from '../support/builders.js';
import { waitFor } from '../support/wait.js';
import { VkSimClient } from '../vksim/client.js';
import { MANIFEST_ACCEPT, pushBaseImage } from '../vksim/oci.js';
import { VkSimulator } from '../vksim/sim.js';
import { stackEnv } from './stack-harness.js';

/** Records every version of one pod the apiserver reports (watch), so transient states are not missed. */
class PodRecorder {
  readonly seen: V1Pod[] = [];
  private abort?: AbortController;

  static async start(kc: KubeConfig, namespace: string, name: string): Promise<PodRecorder> {
    const rec = new PodRecorder();
    rec.abort = await new Watch(kc).watch(
      `/api/v1/namespaces/${namespace}/pods`,
      { fieldSelector: `metadata.name=${name}` },
      (_type, obj) => rec.seen.push(obj as V1Pod),
      () => undefined,
    );
    return rec;
  }

  states(): string[] {
    return this.seen.map((p) => lifecycleOf(p).state);
  }

  stop(): void {
    this.abort?.abort();
  }
}

describe('vk-cocoon simulator on the local stack', () => {
  let kc: KubeConfig;
  let core: CoreV1Api;
  let sim: VkSimClient;
  let registry: string;
  let nodeName: string;
  let pool: string;
  const ns = `vksim-${randomBytes(3).toString('hex')}`;

  const vmName = (pod: string) => `vk-${ns}-${pod}`;

  function podManifest(name: string, extra: Record<string, string> = {}): V1Pod {
    return simPod({
      namespace: ns,
      name,
      vmName: vmName(name),
      pool,
      app: 'vksim-smoke',
      annotations: { [Annotations.cocoonSetGeneration]: '1', ...extra },
    });
  }

  const read = (name: string) => core.readNamespacedPod({ name, namespace: ns });

  async function annotate(name: string, annotations: Record<string, string | null>): Promise<void> {
    await core.patchNamespacedPod(
      { name, namespace: ns, body: { metadata: { annotations } } },
      strategicMergePatch,
    );
  }

  async function headTag(repo: string, tag: string): Promise<number> {
    const res = await fetch(`http://${registry}/v2/${repo}/manifests/${tag}`, {
      method: 'HEAD',
      headers: { accept: MANIFEST_ACCEPT },
    });
    return res.status;
  }

  async function waitReady(name: string): Promise<V1Pod> {
    return waitFor(`${name} Running/Ready with a VM id and lifecycle ready`, async () => {
      const p = await read(name);
      const ok =
        p.status?.phase === 'Running' &&
        containerRunning(p) &&
        podReady(p) &&
        vmIDOf(p) !== '' &&
        lifecycleOf(p).state === LifecycleStates.ready;
      return ok ? p : undefined;
    });
  }

  async function waitGone(name: string): Promise<void> {
    await waitFor(`${name} deleted`, async () => {
      try {
        await read(name);
        return undefined;
      } catch (err) {
        if (statusCodeOf(err) === 404) return true;
        throw err;
      }
    });
  }

  async function hibernateAndWait(name: string): Promise<V1Pod> {
    await annotate(name, { [Annotations.hibernate]: 'true' });
    return waitFor(`${name} hibernated`, async () => {
      const p = await read(name);
      return lifecycleOf(p).state === LifecycleStates.hibernated && !containerRunning(p) ? p : undefined;
    });
  }

  async function reasonsOf(name: string): Promise<string[]> {
    const events = await core.listNamespacedEvent({
      namespace: ns,
      fieldSelector: `involvedObject.name=${name}`,
    });
    return events.items.filter((e) => e.source?.component === VK_EVENT_SOURCE).map((e) => e.reason ?? '');
  }

  async function deleteTag(repo: string, tag: string): Promise<void> {
    await fetch(`http://${registry}/v2/${repo}/manifests/${tag}`, { method: 'DELETE' });
  }

  beforeAll(async () => {
    const stack = await stackEnv();
    kc = loadKubeConfig(stack.kubeconfig);
    core = kc.makeApiClient(CoreV1Api);
    registry = stack.ociRegistry;
    sim = new VkSimClient(stack.vksimUrl);
    await waitFor('simulator /healthz', async () => ((await sim.healthy()) ? true : undefined), 30_000, {
      intervalMs: 250,
    });
    ({ node: nodeName, pool } = await sim.state());
    await sim.clearFaults();
    await core.createNamespace({ body: { metadata: { name: ns } } });
  });

  afterAll(async () => {
    await sim?.clearFaults().catch(() => undefined);
    const pods = await core?.listNamespacedPod({ namespace: ns }).catch(() => undefined);
    for (const p of pods?.items ?? []) {
      await core
        .deleteNamespacedPod({ name: p.metadata!.name!, namespace: ns, gracePeriodSeconds: 0 })
        .catch(() => undefined);
    }
    await core?.deleteNamespace({ name: ns }).catch(() => undefined);
  });

  it('registers its node with the pool label, the provider taint and Ready', async () => {
    const node = await core.readNode({ name: nodeName });
    expect(node.metadata?.labels?.[Labels.nodePool]).toBe(pool);
    expect(node.metadata?.labels).toHaveProperty(Labels.nodeRoleCocoonVM, '');
    expect(node.spec?.taints).toContainEqual(expect.objectContaining({ ...VK_PROVIDER_TAINT }));
    expect(node.status?.conditions?.find((c) => c.type === 'Ready')?.status).toBe('True');
    expect(node.status?.addresses).toContainEqual({ type: 'InternalIP', address: '127.0.0.1' });
  });

  it('control API: validates fault rules, lists and clears them, 404 for a crash without a VM', async () => {
    await expect(sim.addFault({ op: 'explode' })).rejects.toThrow(/HTTP 400.*unknown fault op/);
    await expect(sim.addFault({ op: 'create.delay' })).rejects.toThrow(/HTTP 400.*delayMs/);
    const { rule } = await sim.addFault({ vm: '^never-matches$', op: 'create.delay', delayMs: 5, count: 3 });
    expect(rule).toMatchObject({ point: 'create', mode: 'delay', delayMs: 5, remaining: 3 });
    expect((await sim.faults()).map((r) => r.id)).toContain(rule.id);
    expect((await sim.state()).faults.map((r) => r.id)).toContain(rule.id);
    await sim.clearFaults();
    expect(await sim.faults()).toEqual([]);
    await expect(sim.crash(ns, 'no-such-pod')).rejects.toThrow(/HTTP 404/);
  });

  it('binds, runs, hibernates (tag before state), echoes generations, wakes with a new id, pushes :latest on delete', async () => {
    const name = 'demo-0';
    const vm = vmName(name);
    await core.createNamespacedPod({ namespace: ns, body: podManifest(name) });

    // Bound by the simulator (no scheduler), then Running/Ready with a VM id and lifecycle ready.
    const up = await waitReady(name);
    expect(up.spec?.nodeName).toBe(nodeName);
    expect(lifecycleOf(up)).toEqual({ state: 'ready', observedGeneration: 1, message: '' });
    expect(up.metadata?.annotations?.[Annotations.lifecycleStateMessage]).toBeUndefined();
    const id1 = vmIDOf(up);
    expect(id1).toMatch(/^sim-[0-9a-f]{8}$/);
    expect(up.metadata?.annotations?.[Annotations.ip]).toMatch(/^10\.88\.\d+\.\d+$/);
    expect(up.status?.podIP).toBe(up.metadata?.annotations?.[Annotations.ip]);
    expect(await headTag(vm, 'hibernate')).toBe(404);

    // Hibernate with a slow push: the tag may only appear with the manifest PUT, and before `hibernated`.
    await sim.addFault({ vm: `^${vm}$`, op: 'hibernate.push.delay', delayMs: 1500, count: 1 });
    await annotate(name, { [Annotations.hibernate]: 'true', [Annotations.cocoonSetGeneration]: '2' });
    let sawHibernatingWithoutTag = false;
    let sawHibernatedWithoutTag = false;
    const down = await waitFor(
      'hibernated',
      async () => {
        // State first, tag second: if `hibernated` were written before the PUT, this order would catch it.
        const p = await read(name);
        const head = await headTag(vm, 'hibernate');
        const state = lifecycleOf(p).state;
        if (state === LifecycleStates.hibernating && head === 404) sawHibernatingWithoutTag = true;
        if (state === LifecycleStates.hibernated && head !== 200) sawHibernatedWithoutTag = true;
        return state === LifecycleStates.hibernated && head === 200 ? p : undefined;
      },
      30_000,
      { intervalMs: 50 },
    );
    expect(sawHibernatedWithoutTag, 'lifecycle hibernated was visible before the :hibernate tag').toBe(false);
    expect(sawHibernatingWithoutTag).toBe(true);
    expect(lifecycleOf(down).observedGeneration).toBeGreaterThanOrEqual(2);
    expect(down.metadata?.annotations?.[Annotations.vmID]).toBeUndefined();
    expect(down.metadata?.annotations?.[Annotations.ip]).toBeUndefined();
    const settled = await waitFor('status Pending without containers', async () => {
      const p = await read(name);
      return p.status?.phase === 'Pending' && !containerRunning(p) && !podReady(p) ? p : undefined;
    });
    expect(settled.status?.podIP).toBeUndefined();

    // The artifact is a cocoonstack snapshot (docs/wire-contract.md#snapshot-artifacts).
    const res = await fetch(`http://${registry}/v2/${vm}/manifests/hibernate`, {
      headers: { accept: MANIFEST_ACCEPT },
    });
    expect(res.status).toBe(200);
    const manifest = (await res.json()) as {
      mediaType: string;
      artifactType: string;
      config: { mediaType: string; digest: string };
      layers: Array<{ mediaType: string; annotations?: Record<string, string> }>;
      annotations: Record<string, string>;
    };
    expect(manifest.mediaType).toBe(SnapshotArtifact.manifestMediaType);
    expect(manifest.artifactType).toBe(SnapshotArtifact.artifactType);
    expect(manifest.config.mediaType).toBe(SnapshotArtifact.configMediaType);
    expect(manifest.layers[0]?.annotations?.[SnapshotArtifact.annotationTitle]).toBe('config.json');
    expect(manifest.annotations[SnapshotArtifact.annotationBaseImage]).toBe(SIM_IMAGE);
    expect(manifest.annotations[SnapshotArtifact.annotationFromNode]).toBe(nodeName);
    expect(manifest.annotations[SnapshotArtifact.annotationCreated]).toMatch(
      /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/,
    );
    const cfg = (await (
      await fetch(`http://${registry}/v2/${vm}/blobs/${manifest.config.digest}`)
    ).json()) as {
      schemaVersion: string;
      snapshotId: string;
      image: string;
    };
    expect(cfg).toMatchObject({ schemaVersion: 'v1', image: SIM_IMAGE });
    expect(cfg.snapshotId).toMatch(/\S/);
    const state = await sim.state();
    expect(state.localSnapshots).toContainEqual(
      expect.objectContaining({ name: vm, snapshotId: cfg.snapshotId }),
    );
    expect(state.vms.find((v) => v.name === vm)).toBeUndefined();

    // A bare stamp change re-publishes the current state with the new generation.
    await annotate(name, { [Annotations.cocoonSetGeneration]: '3' });
    await waitFor('hibernated re-published at generation 3', async () => {
      const lc = lifecycleOf(await read(name));
      return lc.state === LifecycleStates.hibernated && lc.observedGeneration === 3 ? true : undefined;
    });

    // Wake: remove the annotation → restored VM with a NEW id, Running, lifecycle ready; the tag stays.
    await annotate(name, { [Annotations.hibernate]: null });
    const woke = await waitReady(name);
    expect(vmIDOf(woke)).not.toBe(id1);
    expect(lifecycleOf(woke).observedGeneration).toBe(3);
    expect(await headTag(vm, 'hibernate')).toBe(200);

    // The operator drops the tag once the wake is done: DELETE by tag → 202, then HEAD → 404.
    const del = await fetch(`http://${registry}/v2/${vm}/manifests/hibernate`, { method: 'DELETE' });
    expect(del.status).toBe(202);
    expect(await headTag(vm, 'hibernate')).toBe(404);

    // Events carry the vk-cocoon source.
    const events = await core.listNamespacedEvent({
      namespace: ns,
      fieldSelector: `involvedObject.name=${name}`,
    });
    const reasons = events.items.filter((e) => e.source?.component === VK_EVENT_SOURCE).map((e) => e.reason);
    expect(reasons).toContain(VkEventReasons.hibernated);
    expect(reasons).toContain(VkEventReasons.woken);

    // Delete of a running VM (policy unset = always): `:latest` is pushed, then the pod is force-deleted.
    expect(await headTag(vm, 'latest')).toBe(404);
    await core.deleteNamespacedPod({ name, namespace: ns });
    await waitGone(name);
    expect(await headTag(vm, 'latest')).toBe(200);
    expect((await sim.state()).vms.find((v) => v.name === vm)).toBeUndefined();
    await fetch(`http://${registry}/v2/${vm}/manifests/latest`, { method: 'DELETE' });
  }, 120_000);

  it('hibernate.push.fail: lifecycle failed with a message, VM kept, then the retry hibernates', async () => {
    const name = 'pushfail-0';
    const vm = vmName(name);
    await core.createNamespacedPod({
      namespace: ns,
      body: podManifest(name, { [Annotations.snapshotPolicy]: 'never' }),
    });
    const up = await waitReady(name);
    const rec = await PodRecorder.start(kc, ns, name);
    try {
      await sim.addFault({ vm: `^${vm}$`, op: 'hibernate.push.fail', count: 2 });
      await annotate(name, { [Annotations.hibernate]: 'true' });
      const failed = await waitFor('a failed lifecycle write', async () =>
        rec.seen.find((p) => lifecycleOf(p).state === LifecycleStates.failed),
      );
      expect(lifecycleOf(failed).message).toMatch(/push .*:hibernate/);
      expect(vmIDOf(failed)).toBe(vmIDOf(up));
      // Provider error: the framework's ProviderFailed status, and a retry that writes hibernating again.
      await waitFor('ProviderFailed status', async () =>
        rec.seen.find((p) => p.status?.reason === VkStatusReasons.providerFailed),
      );
      const done = await waitFor('hibernated after the injected failures', async () => {
        const p = await read(name);
        return lifecycleOf(p).state === LifecycleStates.hibernated ? p : undefined;
      });
      expect(lifecycleOf(done).message).toBe('');
      expect(done.metadata?.annotations?.[Annotations.lifecycleStateMessage]).toBeUndefined();
      const states = rec.states();
      const firstFailed = states.indexOf(LifecycleStates.failed);
      expect(states.slice(firstFailed)).toContain(LifecycleStates.hibernating);
      expect(await headTag(vm, 'hibernate')).toBe(200);
      const events = await core.listNamespacedEvent({
        namespace: ns,
        fieldSelector: `involvedObject.name=${name}`,
      });
      expect(events.items.map((e) => e.reason)).toContain(VkEventReasons.hibernatePushFailed);
    } finally {
      rec.stop();
    }
    // Deleting a hibernated pod needs no registry work; the test removes its own tag.
    await core.deleteNamespacedPod({ name, namespace: ns });
    await waitGone(name);
    await fetch(`http://${registry}/v2/${vm}/manifests/hibernate`, { method: 'DELETE' });
  }, 90_000);

  it('vm.crash: the pod is evicted (Failed/VMGone) and deleted', async () => {
    const name = 'crash-0';
    const vm = vmName(name);
    await core.createNamespacedPod({ namespace: ns, body: podManifest(name) });
    await waitReady(name);
    const rec = await PodRecorder.start(kc, ns, name);
    try {
      const { crashed } = await sim.addFault({ vm: `^${vm}$`, op: 'vm.crash' });
      expect(crashed).toEqual([vm]);
      await waitGone(name);
      const failed = rec.seen.find((p) => p.status?.phase === 'Failed');
      expect(failed?.status?.containerStatuses?.[0]?.state?.terminated?.reason).toBe(VkStatusReasons.vmGone);
      expect(lifecycleOf(rec.seen.at(-1)).state).toBe(LifecycleStates.ready);
    } finally {
      rec.stop();
    }
    expect(await headTag(vm, 'latest')).toBe(404);
    expect((await sim.state()).vms.find((v) => v.name === vm)).toBeUndefined();
  }, 60_000);
  it('evidence: a fresh pod whose VM still has :hibernate is restored; an image mismatch fails closed until the tag goes', async () => {
    const name = 'ev-0';
    const vm = vmName(name);
    await core.createNamespacedPod({ namespace: ns, body: podManifest(name) });
    await waitReady(name);
    await hibernateAndWait(name);
    expect((await sim.state()).localSnapshots.map((s) => s.name)).toContain(vm);
    // A hibernated pod is not running: force-deleted first, local snapshot dropped (no keep-snapshot-on-delete).
    await core.deleteNamespacedPod({ name, namespace: ns });
    await waitGone(name);
    await waitFor('local snapshot dropped', async () =>
      (await sim.state()).localSnapshots.some((s) => s.name === vm) ? undefined : true,
    );
    expect(await headTag(vm, 'hibernate')).toBe(200);
    expect(await headTag(vm, 'latest')).toBe(404);

    // Same VM name, no restore annotation: the evidence check finds the tag and restores.
    await core.createNamespacedPod({
      namespace: ns,
      body: podManifest(name, { [Annotations.snapshotPolicy]: 'never' }),
    });
    await waitReady(name);
    expect(await reasonsOf(name)).toContain(VkEventReasons.hibernateSnapshotExists);
    expect((await sim.state()).vms.find((v) => v.name === vm)?.source).toMatch(/^restore /);
    await core.deleteNamespacedPod({ name, namespace: ns });
    await waitGone(name);
    expect(await headTag(vm, 'latest')).toBe(404);

    // Another image: the recorded base image differs → failed (HibernateEvidenceFailed), ProviderFailed.
    const other = podManifest(name, { [Annotations.image]: 'ghcr.io/cocoonstack/debian:13' });
    await core.createNamespacedPod({ namespace: ns, body: other });
    const failed = await waitFor('evidence failure', async () => {
      const p = await read(name);
      return lifecycleOf(p).state === LifecycleStates.failed &&
        p.status?.reason === VkStatusReasons.providerFailed
        ? p
        : undefined;
    });
    expect(lifecycleOf(failed).message).toMatch(/delete the .*:hibernate tag/);
    expect(vmIDOf(failed)).toBe('');
    expect(await reasonsOf(name)).toContain(VkEventReasons.hibernateEvidenceFailed);
    // Discarding the state (DELETE the tag) lets the retried CreatePod boot fresh.
    await deleteTag(vm, 'hibernate');
    const fresh = await waitReady(name);
    expect(fresh.status?.reason).toBeUndefined();
    expect((await sim.state()).vms.find((v) => v.name === vm)?.source).toMatch(/^run /);
    await annotate(name, { [Annotations.snapshotPolicy]: 'never' });
    await core.deleteNamespacedPod({ name, namespace: ns });
    await waitGone(name);
  }, 90_000);

  it('restore-from-hibernate without a :hibernate tag fails the bring-up (CreateBringUpFailed)', async () => {
    const name = 'rst-0';
    await core.createNamespacedPod({
      namespace: ns,
      body: podManifest(name, { [Annotations.restoreFromHibernate]: 'true' }),
    });
    const p = await waitFor('failed', async () => {
      const x = await read(name);
      return lifecycleOf(x).state === LifecycleStates.failed ? x : undefined;
    });
    expect(lifecycleOf(p).message).toMatch(/not found/);
    await waitFor('CreateBringUpFailed event', async () =>
      (await reasonsOf(name)).includes(VkEventReasons.createBringUpFailed) ? true : undefined,
    );
    await core.deleteNamespacedPod({ name, namespace: ns });
    await waitGone(name);
  }, 60_000);

  it('keep-snapshot-on-delete keeps the node-local snapshot of a hibernated pod; the registry is untouched', async () => {
    const name = 'keep-0';
    const vm = vmName(name);
    await core.createNamespacedPod({ namespace: ns, body: podManifest(name) });
    await waitReady(name);
    await hibernateAndWait(name);
    await annotate(name, { [Annotations.keepSnapshotOnDelete]: 'true' });
    await waitFor('sim saw keep-snapshot-on-delete', async () =>
      (await read(name)).metadata?.annotations?.[Annotations.keepSnapshotOnDelete] === 'true'
        ? true
        : undefined,
    );
    await core.deleteNamespacedPod({ name, namespace: ns });
    await waitGone(name);
    await waitFor('pod forgotten by the sim', async () =>
      (await sim.state()).pods.some((p) => p.pod === `${ns}/${name}`) ? undefined : true,
    );
    expect((await sim.state()).localSnapshots.map((s) => s.name)).toContain(vm);
    expect(await headTag(vm, 'hibernate')).toBe(200);
    expect(await headTag(vm, 'latest')).toBe(404);
    await deleteTag(vm, 'hibernate');
  }, 60_000);

  it('delete.push.fail keeps the pod Terminating with its VM until the fault clears, then :latest lands', async () => {
    const name = 'del-0';
    const vm = vmName(name);
    await core.createNamespacedPod({ namespace: ns, body: podManifest(name) });
    await waitReady(name);
    await sim.addFault({ vm: `^${vm}$`, op: 'delete.push.fail' });
    await core.deleteNamespacedPod({ name, namespace: ns });
    await waitFor('two failed DeletePod attempts', async () =>
      (await reasonsOf(name)).filter((r) => r === VkEventReasons.providerDeleteFailed).length >= 2
        ? true
        : undefined,
    );
    const stuck = await read(name);
    expect(stuck.metadata?.deletionTimestamp).toBeDefined();
    expect((await sim.state()).vms.some((v) => v.name === vm)).toBe(true);
    expect(await headTag(vm, 'latest')).toBe(404);
    await sim.clearFaults();
    await waitGone(name);
    expect(await headTag(vm, 'latest')).toBe(200);
    await deleteTag(vm, 'latest');
  }, 60_000);

  it('snapshot-policy main-only pushes :latest for the main (slot 0) only', async () => {
    const owner = {
      apiVersion: 'cocoonset.cocoonstack.io/v1',
      kind: 'CocoonSet',
      name: 'mo',
      uid: randomUUID(),
    };
    const names = ['mo-0', 'mo-1'];
    for (const name of names) {
      const body = podManifest(name, { [Annotations.snapshotPolicy]: 'main-only' });
      body.metadata!.ownerReferences = [owner];
      await core.createNamespacedPod({ namespace: ns, body });
    }
    for (const name of names) await waitReady(name);
    for (const name of names) await core.deleteNamespacedPod({ name, namespace: ns });
    for (const name of names) await waitGone(name);
    expect(await headTag(vmName('mo-0'), 'latest')).toBe(200);
    expect(await headTag(vmName('mo-1'), 'latest')).toBe(404);
    await deleteTag(vmName('mo-0'), 'latest');
  }, 60_000);

  it('clone mode pulls its base image; a missing image fails the bring-up and the retry succeeds once pushed', async () => {
    const name = 'clone-0';
    const image = `vksim-base-${ns}:v1`;
    await core.createNamespacedPod({
      namespace: ns,
      body: podManifest(name, {
        [Annotations.mode]: 'clone',
        [Annotations.image]: image,
        [Annotations.snapshotPolicy]: 'never',
      }),
    });
    const failed = await waitFor('bring-up failure', async () => {
      const p = await read(name);
      return lifecycleOf(p).state === LifecycleStates.failed ? p : undefined;
    });
    expect(lifecycleOf(failed).message).toMatch(/not found in registry/);
    await pushBaseImage(registry, image);
    const up = await waitReady(name);
    expect(vmIDOf(up)).toMatch(/^sim-/);
    expect((await sim.state()).vms.find((v) => v.name === vmName(name))?.source).toBe(`clone ${image}`);
    await core.deleteNamespacedPod({ name, namespace: ns });
    await waitGone(name);
  }, 60_000);

  it('a pod without vm.cocoonstack.io/name gets ProviderFailed and no lifecycle; adding the name creates it', async () => {
    const name = 'noname-0';
    const body = podManifest(name);
    delete body.metadata!.annotations![Annotations.vmName];
    await core.createNamespacedPod({ namespace: ns, body });
    const p = await waitFor('ProviderFailed', async () => {
      const x = await read(name);
      return x.status?.reason === VkStatusReasons.providerFailed ? x : undefined;
    });
    expect(p.status?.phase).toBe('Pending');
    expect(p.status?.message).toMatch(/missing vm\.cocoonstack\.io\/name/);
    expect(lifecycleOf(p).state).toBe('');
    expect(await reasonsOf(name)).toContain(VkEventReasons.providerCreateFailed);
    await annotate(name, { [Annotations.vmName]: vmName(name) });
    await waitReady(name);
    await annotate(name, { [Annotations.snapshotPolicy]: 'never' });
    await core.deleteNamespacedPod({ name, namespace: ns });
    await waitGone(name);
  }, 60_000);

  it('a hard-bound pod of another CPU class is rejected by CreatePod (plain provider error)', async () => {
    const name = 'cpu-0';
    const body = podManifest(name);
    body.spec!.nodeName = nodeName;
    body.spec!.nodeSelector = { ...body.spec!.nodeSelector, [Labels.snapshotCPUClass]: 'no-such-class' };
    await core.createNamespacedPod({ namespace: ns, body });
    const p = await waitFor('ProviderFailed', async () => {
      const x = await read(name);
      return x.status?.reason === VkStatusReasons.providerFailed ? x : undefined;
    });
    expect(p.status?.message).toMatch(/CPU class "no-such-class"/);
    expect(lifecycleOf(p).state).toBe('');
    await core.deleteNamespacedPod({ name, namespace: ns });
    await waitGone(name);
  }, 60_000);

  it('hibernate.remove.fail rolls the tag back, re-applies id/ip and writes failed', async () => {
    const name = 'rm-0';
    const vm = vmName(name);
    await core.createNamespacedPod({
      namespace: ns,
      body: podManifest(name, { [Annotations.snapshotPolicy]: 'never' }),
    });
    const up = await waitReady(name);
    const rec = await PodRecorder.start(kc, ns, name);
    try {
      await sim.addFault({ vm: `^${vm}$`, op: 'hibernate.remove.fail' });
      await annotate(name, { [Annotations.hibernate]: 'true' });
      const failed = await waitFor('failed after the removal failure', async () =>
        rec.seen.find((p) => lifecycleOf(p).state === LifecycleStates.failed),
      );
      expect(lifecycleOf(failed).message).toMatch(/remove VM/);
      expect(vmIDOf(failed)).toBe(vmIDOf(up));
      // The operator gives up: with no hibernate request the sim settles, the VM runs and the tag is gone.
      await annotate(name, { [Annotations.hibernate]: null });
      await waitFor('simulator settled', async () => {
        const st = (await sim.state()).pods.find((p) => p.pod === `${ns}/${name}`);
        return st && !st.providerError ? true : undefined;
      });
      expect(await headTag(vm, 'hibernate')).toBe(404);
      expect((await sim.state()).vms.find((v) => v.name === vm)?.id).toBe(vmIDOf(up));
      expect(await reasonsOf(name)).toContain(VkEventReasons.hibernateRemoveFailed);
      expect(rec.seen.some((p) => vmIDOf(p) === '')).toBe(true);
    } finally {
      rec.stop();
      await sim.clearFaults();
    }
    await core.deleteNamespacedPod({ name, namespace: ns });
    await waitGone(name);
  }, 60_000);

  it('wake.pull.fail: creating → failed without a VM, then the retry wakes', async () => {
    const name = 'wk-0';
    const vm = vmName(name);
    await core.createNamespacedPod({
      namespace: ns,
      body: podManifest(name, { [Annotations.snapshotPolicy]: 'never' }),
    });
    await waitReady(name);
    await hibernateAndWait(name);
    const rec = await PodRecorder.start(kc, ns, name);
    try {
      await sim.addFault({ vm: `^${vm}$`, op: 'wake.pull.fail', count: 2 });
      await annotate(name, { [Annotations.hibernate]: null });
      await waitReady(name);
      const states = rec.states();
      const i = states.indexOf(LifecycleStates.failed);
      expect(i).toBeGreaterThan(0);
      expect(states.slice(0, i)).toContain(LifecycleStates.creating);
      const failed = rec.seen[i]!;
      expect(lifecycleOf(failed).message).toMatch(/wake .*injected/);
      expect(vmIDOf(failed)).toBe('');
      expect(await reasonsOf(name)).toContain(VkEventReasons.wakePullFailed);
    } finally {
      rec.stop();
    }
    await core.deleteNamespacedPod({ name, namespace: ns });
    await waitGone(name);
    await deleteTag(vm, 'hibernate');
  }, 60_000);

  it('an unmanaged pod adopts its pre-assigned id/ip, becomes ready, and ignores hibernate', async () => {
    const name = 'static-0';
    const body = podManifest(name, { [Annotations.vmID]: 'static-vm-1', [Annotations.ip]: '10.99.0.7' });
    delete body.metadata!.annotations![Annotations.managed];
    await core.createNamespacedPod({ namespace: ns, body });
    const up = await waitReady(name);
    expect(vmIDOf(up)).toBe('static-vm-1');
    expect(up.status?.podIP).toBe('10.99.0.7');
    await annotate(name, { [Annotations.hibernate]: 'true', [Annotations.cocoonSetGeneration]: '5' });
    await waitFor('generation echoed while staying ready', async () => {
      const lc = lifecycleOf(await read(name));
      return lc.state === LifecycleStates.ready && lc.observedGeneration === 5 ? true : undefined;
    });
    expect(await headTag(vmName(name), 'hibernate')).toBe(404);
    await core.deleteNamespacedPod({ name, namespace: ns });
    await waitGone(name);
    expect(await headTag(vmName(name), 'latest')).toBe(404);
  }, 60_000);
  it('fork-from clones a sub-agent from a per-source fork snapshot of a VM on the same node', async () => {
    const main = 'fk-0';
    const sub = 'fk-1';
    await core.createNamespacedPod({
      namespace: ns,
      body: podManifest(main, { [Annotations.snapshotPolicy]: 'never' }),
    });
    await waitReady(main);
    const subPod = podManifest(sub, {
      [Annotations.mode]: 'clone',
      [Annotations.forkFrom]: vmName(main),
      [Annotations.snapshotPolicy]: 'never',
    });
    subPod.spec!.nodeName = nodeName;
    await core.createNamespacedPod({ namespace: ns, body: subPod });
    await waitReady(sub);
    const st = await sim.state();
    expect(st.vms.find((v) => v.name === vmName(sub))?.source).toBe(`fork fork-${vmName(main)}`);
    expect(st.localSnapshots.map((x) => x.name)).toContain(`fork-${vmName(main)}`);

    // A fork source that is not on the node fails the bring-up.
    const orphan = podManifest('fk-2', {
      [Annotations.mode]: 'clone',
      [Annotations.forkFrom]: vmName('nowhere-0'),
      [Annotations.snapshotPolicy]: 'never',
    });
    await core.createNamespacedPod({ namespace: ns, body: orphan });
    const failed = await waitFor('fork bring-up failure', async () => {
      const p = await read('fk-2');
      return lifecycleOf(p).state === LifecycleStates.failed ? p : undefined;
    });
    expect(lifecycleOf(failed).message).toMatch(/fork source VM .* is not on node/);
    for (const name of [main, sub, 'fk-2']) await core.deleteNamespacedPod({ name, namespace: ns });
    for (const name of [main, sub, 'fk-2']) await waitGone(name);
    // Deleting the main (no keep-snapshot-on-delete) drops its fork baseline too.
    await waitFor('fork snapshot dropped', async () =>
      (await sim.state()).localSnapshots.some((x) => x.name === `fork-${vmName(main)}`) ? undefined : true,
    );
  }, 60_000);

  it('ready.delay keeps a Running pod not Ready in creating; evidence.error fails closed, then the retry boots', async () => {
    const name = 'slow-0';
    const vm = vmName(name);
    await sim.addFault({ vm: `^${vm}$`, op: 'evidence.error', count: 1 });
    await sim.addFault({ vm: `^${vm}$`, op: 'ready.delay', delayMs: 1500, count: 1 });
    const rec = await PodRecorder.start(kc, ns, name);
    try {
      await core.createNamespacedPod({
        namespace: ns,
        body: podManifest(name, { [Annotations.snapshotPolicy]: 'never' }),
      });
      await waitReady(name);
      const failed = rec.seen.find((p) => lifecycleOf(p).state === LifecycleStates.failed);
      expect(lifecycleOf(failed).message).toMatch(/hibernate evidence.*refusing a fresh boot/);
      const waiting = rec.seen.filter(
        (p) => containerRunning(p) && vmIDOf(p) !== '' && !podReady(p) && lifecycleOf(p).state === 'creating',
      );
      expect(waiting.length).toBeGreaterThan(0);
      const reasons = await reasonsOf(name);
      expect(reasons).toContain(VkEventReasons.hibernateEvidenceFailed);
      expect(reasons).toContain(VkEventReasons.hibernateEvidenceUnavailable);
      // Ready=True is published before the `ready` annotation.
      const firstReadyAnn = rec.seen.findIndex((p) => lifecycleOf(p).state === LifecycleStates.ready);
      const firstReadyCond = rec.seen.findIndex((p) => podReady(p));
      expect(firstReadyCond).toBeGreaterThanOrEqual(0);
      expect(firstReadyCond).toBeLessThan(firstReadyAnn);
    } finally {
      rec.stop();
    }
    await core.deleteNamespacedPod({ name, namespace: ns });
    await waitGone(name);
  }, 60_000);

  it('two nodes in one pool: hostname affinity places pods; a restore on the other node pulls from the registry', async () => {
    const poolName = `${ns}-pool`;
    const nodes = [`${ns}-a`, `${ns}-b`];
    const sims = nodes.map(
      (nodeName) => new VkSimulator({ kube: kc, registry, nodeName, pool: poolName, tickMs: 500 }),
    );
    try {
      for (const s of sims) await s.start();
      const pinned = (name: string, node: string, extra: Record<string, string> = {}): V1Pod => {
        const body = podManifest(name, { [Annotations.vmName]: vmName('mig-0'), ...extra });
        body.spec!.nodeSelector = { [Labels.nodePool]: poolName };
        body.spec!.affinity = {
          nodeAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [
                { matchExpressions: [{ key: Labels.hostname, operator: 'In', values: [node] }] },
              ],
            },
          },
        };
        return body;
      };
      const vm = vmName('mig-0');
      await core.createNamespacedPod({ namespace: ns, body: pinned('mig-a', nodes[0]!) });
      const onA = await waitReady('mig-a');
      expect(onA.spec?.nodeName).toBe(nodes[0]);
      await hibernateAndWait('mig-a');
      await annotate('mig-a', { [Annotations.keepSnapshotOnDelete]: 'true' });
      await waitFor('keep annotation visible', async () =>
        (await read('mig-a')).metadata?.annotations?.[Annotations.keepSnapshotOnDelete] ? true : undefined,
      );
      await core.deleteNamespacedPod({ name: 'mig-a', namespace: ns });
      await waitGone('mig-a');

      // The recreated pod lands on node b, which has no local copy: it restores from the registry.
      await core.createNamespacedPod({
        namespace: ns,
        body: pinned('mig-b', nodes[1]!, {
          [Annotations.restoreFromHibernate]: 'true',
          [Annotations.snapshotPolicy]: 'never',
        }),
      });
      const onB = await waitReady('mig-b');
      expect(onB.spec?.nodeName).toBe(nodes[1]);
      expect(sims[1]!.state().vms.find((v) => v.name === vm)?.source).toBe(
        `restore ${registry}/${vm}:hibernate`,
      );
      expect(sims[0]!.state().localSnapshots.map((x) => x.name)).toContain(vm);
      expect(sims[0]!.state().vms).toEqual([]);
      await core.deleteNamespacedPod({ name: 'mig-b', namespace: ns });
      await waitGone('mig-b');
      await deleteTag(vm, 'hibernate');
    } finally {
      for (const s of sims) await s.stop();
      for (const n of nodes) await core.deleteNode({ name: n }).catch(() => undefined);
    }
  }, 90_000);

  it('a node with no free seat: the pod waits Unschedulable (a hibernated pod keeps its seat) and is bound when a seat frees', async () => {
    const poolName = `${ns}-seat`;
    const node = `${ns}-one-seat`;
    const one = new VkSimulator({
      kube: kc,
      registry,
      nodeName: node,
      pool: poolName,
      seats: 1,
      tickMs: 200,
    });
    const inPool = (name: string): V1Pod => {
      const body = podManifest(name, { [Annotations.snapshotPolicy]: 'never' });
      body.spec!.nodeSelector = { [Labels.nodePool]: poolName };
      return body;
    };
    const scheduled = async (name: string) =>
      (await read(name)).status?.conditions?.find((c) => c.type === 'PodScheduled');
    try {
      await one.start();
      expect((await core.readNode({ name: node })).status?.capacity?.pods).toBe('1');
      await core.createNamespacedPod({ namespace: ns, body: inPool('seat-a') });
      expect((await waitReady('seat-a')).spec?.nodeName).toBe(node);
      await core.createNamespacedPod({ namespace: ns, body: inPool('seat-b') });
      const waiting = await waitFor('seat-b reported Unschedulable', async () => {
        const c = await scheduled('seat-b');
        return c?.status === 'False' && c.reason === 'Unschedulable' ? c : undefined;
      });
      expect(waiting.message).toContain('0/1 nodes are available: 1 Too many pods.');
      expect((await read('seat-b')).spec?.nodeName ?? '').toBe('');

      // A hibernated pod still holds its seat: only deleting it frees one.
      await hibernateAndWait('seat-a');
      const looked = one.state().turnedAway;
      await waitFor('the node turned seat-b away again with seat-a hibernated', () =>
        one.state().turnedAway > looked ? true : undefined,
      );
      expect((await read('seat-b')).spec?.nodeName ?? '').toBe('');
      await core.deleteNamespacedPod({ name: 'seat-a', namespace: ns });
      await waitGone('seat-a');
      const bound = await waitReady('seat-b');
      expect(bound.spec?.nodeName).toBe(node);
      expect((await scheduled('seat-b'))?.status).toBe('True');
      await core.deleteNamespacedPod({ name: 'seat-b', namespace: ns });
      await waitGone('seat-b');
      await deleteTag(vmName('seat-a'), 'hibernate');
    } finally {
      await one.stop();
      await core.deleteNode({ name: node }).catch(() => undefined);
    }
  }, 90_000);
});
