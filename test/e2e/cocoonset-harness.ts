/**
 * Helpers of the CocoonSet e2e tests (test/e2e/cocoonset.test.ts) on the real local stack, next to the
 * ones they share with the CocoonHibernation tests (hibernation-harness.ts: polling, the namespace
 * recorder, Events, registry HEAD): CocoonSet access, the realistic set shape the tests use, a registry
 * push of a snapshot tag, and reads of the CocoonSet workflow (its `state` query and the activities its
 * runs scheduled).
 */
import type { Client } from '@temporalio/client';
import { cocoonSetWorkflowId } from '../../src/api/ids.js';
import { Finalizers, GROUP, KIND_COCOONSET, PLURAL_COCOONSETS, VERSION } from '../../src/api/keys.js';
import type { CocoonSet } from '../../src/api/types.js';
import { type KubeClients, mergePatch, statusCodeOf } from '../../src/kube/client.js';
import { waitFor } from '../support/wait.js';
import { OciClient } from '../vksim/oci.js';

/** Where the tests' pods must land: the simulator node's pool and snapshot CPU class labels. */
export interface Placement {
  pool: string;
  cpuClass: string;
}

/**
 * The realistic shape every test set has (docs/cocoonset.md#the-resource): a main and 2 sub-agents on the
 * clone-mode agent image `image`, a run-mode toolbox `tools` on `toolboxImage`, a static toolbox `vnc`
 * (pre-assigned id/ip/VNC port), snapshotPolicy main-only, and the simulator node's pool and CPU class.
 */
export function realisticSpec(image: string, toolboxImage: string, place: Placement): CocoonSet['spec'] {
  return {
    snapshotPolicy: 'main-only',
    nodePool: place.pool,
    snapshotCompatibilityClass: place.cpuClass,
    agent: { image, replicas: 2 },
    toolboxes: [
      { name: 'tools', mode: 'run', image: toolboxImage },
      { name: 'vnc', mode: 'static', staticVMID: 'qemu-1', staticIP: '10.0.0.1', vncPort: 5901 },
    ],
  };
}

/** CocoonSet access for one namespace through the typed clients. */
export class CocoonSets {
  constructor(
    private readonly kube: KubeClients,
    readonly namespace: string,
  ) {}

  private base() {
    return { group: GROUP, version: VERSION, namespace: this.namespace, plural: PLURAL_COCOONSETS };
  }

  /** Creates CocoonSet `name` with `spec` (and `finalizers`, e.g. as another operator left them). */
  async create(name: string, spec: CocoonSet['spec'], finalizers?: string[]): Promise<CocoonSet> {
    const body: CocoonSet = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: KIND_COCOONSET,
      metadata: { name, namespace: this.namespace, ...(finalizers ? { finalizers } : {}) },
      spec,
    };
    return (await this.kube.custom.createNamespacedCustomObject({ ...this.base(), body })) as CocoonSet;
  }

  /** The CocoonSet, or undefined when it does not exist. */
  async get(name: string): Promise<CocoonSet | undefined> {
    try {
      return (await this.kube.custom.getNamespacedCustomObject({ ...this.base(), name })) as CocoonSet;
    } catch (err) {
      if (statusCodeOf(err) === 404) return undefined;
      throw err;
    }
  }

  /** JSON merge patch of the spec (lists are replaced whole); returns the object (new generation). */
  async patchSpec(name: string, spec: Record<string, unknown>): Promise<CocoonSet> {
    return (await this.kube.custom.patchNamespacedCustomObject(
      { ...this.base(), name, body: { spec } },
      mergePatch,
    )) as CocoonSet;
  }

  async delete(name: string): Promise<void> {
    await this.kube.custom.deleteNamespacedCustomObject({ ...this.base(), name });
  }

  /** Removes every finalizer and deletes the set (teardown, when no operator runs any more). */
  async forceDelete(name: string): Promise<void> {
    await this.kube.custom
      .patchNamespacedCustomObject(
        { ...this.base(), name, body: { metadata: { finalizers: null } } },
        mergePatch,
      )
      .catch(() => undefined);
    await this.delete(name).catch(() => undefined);
  }

  async list(): Promise<CocoonSet[]> {
    return ((await this.kube.custom.listNamespacedCustomObject(this.base())) as { items: CocoonSet[] }).items;
  }

  /** Waits until `pred` holds for CocoonSet `name` (undefined when it is gone); returns the last read. */
  waitUntil(
    name: string,
    what: string,
    pred: (cs: CocoonSet | undefined) => boolean,
    timeoutMs: number,
  ): Promise<CocoonSet | undefined> {
    let last: CocoonSet | undefined;
    return waitFor(
      `cocoonset ${this.namespace}/${name}: ${what}`,
      async () => {
        last = await this.get(name);
        return pred(last) ? { cs: last } : undefined;
      },
      timeoutMs,
      { intervalMs: 250, describe: () => ({ status: last?.status, gen: last?.metadata.generation }) },
    ).then((r) => r.cs);
  }

  /**
   * Waits until set `name` reports phase `phase` for its current generation (`observedGeneration` equals
   * `metadata.generation`, the finalizer is on); returns it.
   */
  async waitPhase(name: string, phase: string, timeoutMs: number): Promise<CocoonSet> {
    const cs = await this.waitUntil(
      name,
      `phase ${phase} at its generation`,
      (cs) =>
        cs?.status?.phase === phase &&
        cs.status.observedGeneration === cs.metadata.generation &&
        (cs.metadata.finalizers ?? []).includes(Finalizers.cocoonSet),
      timeoutMs,
    );
    return cs!;
  }
}

/**
 * Pushes a snapshot artifact as `<repo>:<tag>` to the plain-HTTP registry `registry` (the format the
 * simulator pushes, docs/wire-contract.md#snapshot-artifacts), e.g. to make a tag's later deletion observable
 * with HEAD.
 */
export async function pushSnapshotTag(
  registry: string,
  repo: string,
  tag: string,
  image: string,
): Promise<void> {
  await new OciClient(registry).pushSnapshot(repo, tag, {
    snapshotId: `e2e-${repo}-${tag}`,
    image,
    node: 'cocoonset-e2e',
  });
}

/**
 * The CocoonSet workflow's `state` query (src/workflows/cocoonset.ts `describe`): `passes` started so far,
 * `passing` while one runs, phase…
 */
export async function cocoonSetWorkflowState(
  client: Client,
  namespace: string,
  name: string,
): Promise<{
  passes: number;
  passing: boolean;
  /** A pass runs, or a signal or timer asks for one. */
  busy: boolean;
  phase: string | null;
  failures: number;
  nextPassAt: string | null;
  spentTags: Record<string, string> | null;
  wakesOpen: string[];
}> {
  return client.workflow.getHandle(cocoonSetWorkflowId(namespace, name)).query('state');
}

/**
 * One activity a workflow run scheduled: its type and its (JSON) input; `local` for a local activity,
 * whose marker event records its type and result but not its input (`input` undefined).
 */
export interface ScheduledActivity {
  runId: string;
  type: string;
  input: unknown;
  local?: true;
}

/**
 * Every activity the runs of CocoonSet workflow `<namespace>/<name>` scheduled, regular (ActivityTaskScheduled)
 * and local (the SDK core's `core_local_activity` marker), oldest run first and in history order within a
 * run (the runs are found through visibility, which may lag a moment).
 */
export async function scheduledActivities(
  client: Client,
  namespace: string,
  name: string,
): Promise<ScheduledActivity[]> {
  const id = cocoonSetWorkflowId(namespace, name);
  const runs: { runId: string; start: number }[] = [];
  for await (const wf of client.workflow.list({ query: `WorkflowId = "${id}"` })) {
    runs.push({ runId: wf.runId, start: wf.startTime.getTime() });
  }
  runs.sort((a, b) => a.start - b.start);
  const out: ScheduledActivity[] = [];
  for (const { runId } of runs) {
    const history = await client.workflow.getHandle(id, runId).fetchHistory();
    for (const e of history.events ?? []) {
      const m = e.markerRecordedEventAttributes;
      if (m?.markerName === 'core_local_activity') {
        const data = m.details?.data?.payloads?.[0]?.data;
        const marker = data
          ? (JSON.parse(Buffer.from(data).toString('utf8')) as { activity_type?: string })
          : {};
        out.push({ runId, type: marker.activity_type ?? '', input: undefined, local: true });
        continue;
      }
      const a = e.activityTaskScheduledEventAttributes;
      if (!a) continue;
      const data = a.input?.payloads?.[0]?.data;
      out.push({
        runId,
        type: a.activityType?.name ?? '',
        input: data ? JSON.parse(Buffer.from(data).toString('utf8')) : undefined,
      });
    }
  }
  return out;
}

/** One run of a workflow as visibility lists it: its id, status and history length/size (bytes). */
export interface RunInfo {
  runId: string;
  status: string;
  historyLength: number;
  historySize: number;
}

/** The runs of CocoonSet workflow `<namespace>/<name>`, oldest first (the open run's size from describe). */
export async function workflowRuns(client: Client, namespace: string, name: string): Promise<RunInfo[]> {
  const id = cocoonSetWorkflowId(namespace, name);
  const runs: (RunInfo & { start: number })[] = [];
  for await (const wf of client.workflow.list({ query: `WorkflowId = "${id}"` })) {
    const d = wf.status.name === 'RUNNING' ? await client.workflow.getHandle(id, wf.runId).describe() : wf;
    runs.push({
      runId: wf.runId,
      status: wf.status.name,
      historyLength: d.historyLength,
      historySize: d.historySize ?? 0,
      start: wf.startTime.getTime(),
    });
  }
  return runs.sort((a, b) => a.start - b.start).map(({ start: _start, ...r }) => r);
}
