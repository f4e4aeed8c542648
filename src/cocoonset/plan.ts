/**
 * One CocoonSet reconcile pass as a pure, resumable decision function (operator cocoonset/reconciler.go
 * `Reconcile` steps 2–21, agents.go, toolboxes.go; docs/cocoonset.md#a-pass-in-order,
 * docs/cocoonset.md#generation-stamp, docs/cocoonset.md#status-roll-up).
 *
 * The caller (the CocoonSet workflow) drives it like this:
 *
 * ```ts
 * const outcomes: Record<string, ActionOutcome> = {};
 * for (;;) {
 *   const step = planPass(input, outcomes);
 *   if (step.kind !== 'run') break;          // 'done' or 'delegate'
 *   // run step.actions in order (or all at once, at most step.maxConcurrency, when step.concurrent),
 *   // then record each action's outcome under its id:
 *   for (const a of step.actions) outcomes[a.id] = await execute(a);
 * }
 * ```
 *
 * `planPass` is deterministic in (input, outcomes): each call replays the decisions already taken,
 * skips actions whose outcome is recorded, and stops at the next action whose outcome it needs. So it
 * holds no state, survives a worker restart mid-pass, and replays identically in Temporal. Reads the
 * pass may need (the CocoonHibernation List, registry probes, a pod GET) are actions too, and are asked
 * for only when a pod is actually built: a steady pass asks for no List and no probe; a pass that builds
 * pods asks for the List exactly once (shared with un-suspend, which Go lists separately).
 *
 * Not handled here (clearly marked extension points): deletion (docs/cocoonset.md#deletion-and-registry-gc),
 * suspend and release suspend, migration and the released-seat wake (docs/cocoonset.md#not-built-yet). For
 * those `planPass` returns `{kind: 'delegate', flow}`; migration and wake are delegated only when their cheap
 * entry gates can engage, and the caller sets `input.declined.{migration,wake}` when the delegated
 * flow answers "not handled", then calls `planPass` again with the same outcomes.
 */
import type { V1Pod } from '@kubernetes/client-node';
import {
  Annotations,
  CONDITION_PROGRESSING,
  ConditionReasons,
  EventReasons,
  Finalizers,
  Labels,
  Roles,
} from '../api/keys.js';
import {
  cocoonSetGenerationOf,
  containerRunning,
  hibernateRequested,
  podReady,
  restoreFromHibernate,
  vmIDOf,
  vmNameOf,
} from '../api/pod.js';
import type { CocoonHibernation, CocoonSet, CocoonSetPhase, ToolboxSpec } from '../api/types.js';
import type { OperatorMetrics } from '../metrics.js';
import {
  type Classified,
  classifyPods,
  compareNames,
  isControlledBy,
  isTerminal,
  mainPodFailedReason,
  ownedPods,
  podsInNameOrder,
  subSlotsAscending,
} from './classify.js';
import { podSpecMatchesAgent, podSpecMatchesToolbox } from './drift.js';
import { buildAgentPod, buildToolboxPod, toolboxPodName } from './pods.js';
import { readRebuildHistory, triageSubAgent } from './rebuild.js';
import { markRestoreIfHibernated, podsHibernatedByCR, podsRestorableByCR } from './restore.js';
import { buildStatus, type CocoonSetStatus, planStatusWrite } from './status.js';
import { invalidSpecReason } from './validate.js';
import { hibernatePolicyOf, replicasOf } from './vmspec.js';

/** Requeue delay while waiting for the main / for a terminating predecessor (`requeueWaitForMain`). */
export const REQUEUE_WAIT_FOR_MAIN_MS = 5_000;
/** At most this many sub-agent creates in flight (`subAgentCreateConcurrency`). */
export const SUB_AGENT_CREATE_CONCURRENCY = 8;

/** What the pass starts from. */
export interface PassInput {
  /** The CocoonSet as read at the start of the pass (a cache read). Not mutated. */
  cs: CocoonSet;
  /** Pods listed in the namespace by `cocoonset.cocoonstack.io/name=<cs>`; ownership is filtered here. */
  pods: readonly V1Pod[];
  /** The pass's clock, epoch ms (Temporal: `Date.now()` inside the workflow). */
  nowMs: number;
  /** False when no registry is configured (tests): restore is a no-op, migration/wake are off. */
  registryConfigured: boolean;
  /** Delegated flows that answered "not handled" in this pass: continue past their step. */
  declined?: { migration?: boolean; wake?: boolean };
  /**
   * Deliberate addition (the workflow sets it behind `patched()`): missing sub-agents are not created while
   * the main is asked to hibernate (its hibernate annotation, or a CocoonHibernation with desire
   * Hibernate or phase Hibernating for it). They fork from the main's VM, which is about to go: created in
   * that window they fail (`fork source … is not on node`) and use up rebuild attempts.
   */
  subAgentsWaitForHibernatingMain?: boolean;
  /**
   * Run the generation stamps and the deletes of extra sub-agents as one concurrent batch each (the
   * workflow sets it behind `patched()`; the reference runs them one by one in name order), not one step per
   * pod: every step replays the pass from the top, so a 1000-pod
   * scale-down took ~2000 steps, quadratic work that a cold replay could not finish within the workflow
   * task timeout under load. Concurrent, not in order: one by one, each write is its own workflow task (a
   * 1000-pod scale-down made a 20,000-event run that took 13-16 s to replay, past the 10 s task timeout).
   * All are attempted; the first error in name / slot order fails the pass.
   */
  batchPodLoops?: boolean;
}

/** Metric families the pass increments (keys of src/metrics.ts `OperatorMetrics`). */
export type PassMetric = Extract<
  keyof OperatorMetrics,
  'subagentRebuildTotal' | 'subagentDeadLetterTotal' | 'lifecycleStateFailedObservedTotal'
>;

/**
 * One unit of I/O. `id` is unique within a pass; record the outcome under it. Errors from the API are
 * reported as `{kind: 'error', message}`; the plan adds Go's context prefix.
 */
export type PassAction =
  /** Full Update adding the finalizer (resourceVersion-checked). Outcome: ok | error. */
  | { id: string; type: 'addFinalizer'; finalizer: string }
  /** JSON merge patch `{"metadata":{"annotations":…}}` on a pod; `null` deletes a key. Outcome: ok | error. */
  | { id: string; type: 'patchPodAnnotations'; pod: string; annotations: Record<string, string | null> }
  /** JSON merge patch of annotations on the CocoonSet (no resourceVersion). Outcome: ok | error. */
  | { id: string; type: 'patchCocoonSetAnnotations'; annotations: Record<string, string | null> }
  /** Delete a pod. Outcome: ok | notFound | error. */
  | { id: string; type: 'deletePod'; pod: string }
  /** Create a pod. Outcome: ok | alreadyExists | error. */
  | { id: string; type: 'createPod'; pod: V1Pod }
  /** Read a pod (from the cache). Outcome: pod | error (NotFound is an error here). */
  | { id: string; type: 'getPod'; pod: string }
  /** List all CocoonHibernations in the namespace. Outcome: hibernations | error. */
  | { id: string; type: 'listHibernations'; namespace: string }
  /** Registry `HasManifest(vmName, "hibernate")`. Outcome: probe | error. */
  | { id: string; type: 'probeHibernate'; vmName: string }
  /** JSON merge patch on `/status`; `status` is the resulting status to mirror. Outcome: ok | error. */
  | { id: string; type: 'patchStatus'; body: { status: Record<string, unknown> }; status: CocoonSetStatus }
  /** Emit a Kubernetes Event on the CocoonSet (fire and forget). Outcome: ok. */
  | { id: string; type: 'event'; eventType: 'Normal' | 'Warning'; reason: string; message: string }
  /** Increment a counter (fire and forget). Outcome: ok. */
  | { id: string; type: 'metric'; metric: PassMetric; labels: Record<string, string> };

/** The result of running one action. */
export type ActionOutcome =
  | { kind: 'ok' }
  | { kind: 'notFound' }
  | { kind: 'alreadyExists' }
  | { kind: 'error'; message: string }
  | { kind: 'hibernations'; items: CocoonHibernation[] }
  | { kind: 'probe'; present: boolean }
  | { kind: 'pod'; pod: V1Pod };

/** controller-runtime's Result/error, as the pass ends. */
export interface PassResult {
  /** Immediate (rate-limited) requeue. */
  requeue: boolean;
  /** Requeue after this many ms; 0 = none. */
  requeueAfterMs: number;
  /** The pass failed (retry with backoff; requeue fields are then ignored). */
  error?: string;
}

/** Sub-flows this planner does not implement (extension points). */
export type DelegatedFlow = 'delete' | 'suspend' | 'suspendRelease' | 'migration' | 'wake';

export type PassStep =
  /** Run these actions, record their outcomes, call `planPass` again. */
  | { kind: 'run'; actions: PassAction[]; concurrent: boolean; maxConcurrency: number }
  /** Hand the pass to another flow (not implemented here). */
  | { kind: 'delegate'; flow: DelegatedFlow }
  /** The pass is over. `mirror` lists what was written to the CocoonSet, for the caller's copy. */
  | {
      kind: 'done';
      result: PassResult;
      mirror: { annotations: Record<string, string>; status?: CocoonSetStatus };
    };

const SUSPEND = Symbol('suspend');

class Finished {
  constructor(readonly step: PassStep) {}
}

/** Replays recorded outcomes; collects the next batch of actions. */
class Driver {
  readonly batch: PassAction[] = [];
  concurrent = false;
  constructor(private readonly outcomes: Readonly<Record<string, ActionOutcome>>) {}

  /** Fire-and-forget action: queued unless already done; never blocks. */
  effect(a: PassAction): void {
    if (this.outcomes[a.id] === undefined) this.batch.push(a);
  }

  /** Action whose outcome the plan needs: returns it, or queues the action and stops the replay. */
  run(a: PassAction): ActionOutcome {
    const o = this.outcomes[a.id];
    if (o !== undefined) return o;
    this.batch.push(a);
    throw SUSPEND;
  }

  /** Independent actions run together (after any queued effects). */
  runAll(as: PassAction[]): ActionOutcome[] {
    const missing = as.filter((a) => this.outcomes[a.id] === undefined);
    if (missing.length === 0) return as.map((a) => this.outcomes[a.id]!);
    if (this.batch.length > 0) throw SUSPEND;
    this.batch.push(...missing);
    this.concurrent = true;
    throw SUSPEND;
  }
}

function errText(o: ActionOutcome): string | undefined {
  return o.kind === 'error' ? o.message : undefined;
}

/** Go `strconv.Atoi` success (optional sign, decimal digits, int64 range). */
function atoiParses(s: string): boolean {
  if (!/^[+-]?[0-9]+$/.test(s)) return false;
  const n = BigInt(s);
  return n >= -(1n << 63n) && n < 1n << 63n;
}

/** A live VM: a VM id is reported and some container runs (the reference's `vmLive`). */
export function vmLive(pod: V1Pod | undefined): boolean {
  return pod !== undefined && vmIDOf(pod) !== '' && containerRunning(pod);
}

/**
 * Extension point — migration entry gate (docs/cocoonset.md#not-built-yet; the flow's first two gates): false
 * ("not handled", no I/O) without a registry, when `spec.nodeName` is empty and the phase is not `Migrating`,
 * or when not migrating and the main is settled on `spec.nodeName` (on it, VM live, not hibernating). True
 * means the migration flow must look (it may still decline).
 */
export function migrationMayEngage(
  cs: CocoonSet,
  main: V1Pod | undefined,
  registryConfigured: boolean,
): boolean {
  if (!registryConfigured) return false;
  const desired = cs.spec.nodeName ?? '';
  const migrating = cs.status?.phase === 'Migrating';
  if (desired === '' && !migrating) return false;
  const settled =
    main !== undefined &&
    (main.spec?.nodeName ?? '') === desired &&
    vmLive(main) &&
    !hibernateRequested(main);
  return !(!migrating && settled);
}

/**
 * Extension point — released-seat wake entry gate (docs/cocoonset.md#not-built-yet; the flow's gate and its
 * I/O-free rows): false without a registry or when none of phase Waking, phase Suspended, phase Suspending
 * with a node hint, or a pending wake cleanup holds; also false for the rows that decline without I/O (main
 * present, not waking, and no hint or a terminal main). True means the wake flow must look (it may still
 * decline).
 */
export function wakeMayEngage(cs: CocoonSet, main: V1Pod | undefined, registryConfigured: boolean): boolean {
  if (!registryConfigured) return false;
  const hint = cs.metadata.annotations?.[Annotations.hibernatedOnNode] ?? '';
  const phase = cs.status?.phase;
  const cleanupPending =
    main !== undefined && restoreFromHibernate(main) && !hibernateRequested(main) && hint !== '';
  const waking = phase === 'Waking' || cleanupPending;
  const suspended = phase === 'Suspended';
  const suspending = phase === 'Suspending' && hint !== '';
  if (!waking && !suspended && !suspending) return false;
  if (main === undefined || waking) return true;
  return hint !== '' && !isTerminal(main);
}

/** Per-pass state the Go code keeps in the in-memory CocoonSet. */
interface PassState {
  cs: CocoonSet;
  ns: string;
  name: string;
  c: Classified;
  d: Driver;
  input: PassInput;
  /** Annotations written to the CocoonSet so far (mirrored into later reads). */
  written: Record<string, string>;
  /** The pass is ending with an error (its failure status is being written). */
  failing?: boolean;
}

function finish(st: PassState, result: Partial<PassResult>, status?: CocoonSetStatus): never {
  throw new Finished({
    kind: 'done',
    result: {
      requeue: result.requeue ?? false,
      requeueAfterMs: result.requeueAfterMs ?? 0,
      error: result.error,
    },
    mirror: { annotations: { ...st.written }, status },
  });
}

/** Longest condition message written (the error texts are one line; a safety cut). */
const CONDITION_MESSAGE_MAX = 1024;

/**
 * Ends the pass with `error`. First writes the roll-up of the pods as classified at the start of the pass
 * with `Progressing=False` reason `ReconcileFailed` and the error as its message (ours: the reference only
 * returns the error, so its status kept whatever the last good pass wrote, e.g. `Pending` with 0 ready while
 * the main is Ready). A failing status write is not retried here: the pass ends with the original error.
 */
function fail(st: PassState, error: string): never {
  if (!st.failing) {
    st.failing = true;
    writeStatus(st, phaseAfterBlock(st), 'status-on-failure', {
      reason: ConditionReasons.reconcileFailed,
      message: error,
    });
  }
  return finish(st, { error });
}

/** The phase a blocked pass reports: `Pending` while the main is missing or not Ready, else derived. */
function phaseAfterBlock(st: PassState): CocoonSetPhase | '' {
  return podReady(st.c.main) ? '' : 'Pending';
}

/**
 * The validation gate (ours; the reference has none): when the current spec builds a pod the apiserver
 * would reject (src/cocoonset/validate.ts), the pass touches no pod — no generation stamp, no drift
 * delete, no create — and says why: the roll-up with `Progressing=False` reason `InvalidSpec` and the
 * rejection as message, and a folded Warning Event `InvalidSpec`. It ends without a requeue: only a spec
 * edit (which starts a pass) can change the answer.
 */
function blockInvalidSpec(st: PassState, reason: string): never {
  const message = `invalid spec, no pod changed: ${reason}`;
  st.d.effect({
    id: `event:${EventReasons.invalidSpec}`,
    type: 'event',
    eventType: 'Warning',
    reason: EventReasons.invalidSpec,
    message,
  });
  const status = writeStatus(st, phaseAfterBlock(st), 'status', {
    reason: ConditionReasons.invalidSpec,
    message,
  });
  return finish(st, {}, status);
}

/** Builds a pod, turning a builder exception into Go's wrapped error. */
function build(st: PassState, prefix: string, fn: () => V1Pod): V1Pod {
  try {
    return fn();
  } catch (e) {
    return fail(st, `${prefix}: ${(e as Error).message}`);
  }
}

/** The CocoonSet with the annotations written in this pass (Go mirrors them into the in-memory object). */
function currentCS(st: PassState): CocoonSet {
  if (Object.keys(st.written).length === 0) return st.cs;
  return {
    ...st.cs,
    metadata: { ...st.cs.metadata, annotations: { ...(st.cs.metadata.annotations ?? {}), ...st.written } },
  };
}

/** The namespace's CocoonHibernations, listed at most once per pass; a List error is cached too. */
function hibernations(st: PassState): { items: CocoonHibernation[] } | { error: string } {
  const o = st.d.run({ id: 'list-hibernations', type: 'listHibernations', namespace: st.ns });
  if (o.kind === 'hibernations') return { items: o.items };
  return { error: `list cocoonhibernations in ${st.ns}: ${errText(o) ?? 'unexpected outcome'}` };
}

/**
 * Writes the status built from the pass's classification when it changed (no-op diff); `blocked` replaces the
 * Progressing condition with `False` and that reason and message (a pass that cannot progress). Returns
 * the status written, or undefined when nothing changed. A failed write of the failure status is ignored
 * (the pass already ends with an error); any other failed write ends the pass with `patch status …`.
 */
function writeStatus(
  st: PassState,
  phase: CocoonSetPhase | '',
  id: string,
  blocked?: { reason: string; message: string },
): CocoonSetStatus | undefined {
  const fresh = buildStatus(st.cs, st.c, phase);
  if (blocked) {
    const message =
      blocked.message.length > CONDITION_MESSAGE_MAX
        ? `${blocked.message.slice(0, CONDITION_MESSAGE_MAX - 3)}...`
        : blocked.message;
    fresh.conditions = (fresh.conditions ?? []).map((c) =>
      c.type === CONDITION_PROGRESSING ? { ...c, status: 'False', reason: blocked.reason, message } : c,
    );
  }
  const w = planStatusWrite(st.cs, fresh, st.input.nowMs);
  if (!w) return undefined;
  const o = st.d.run({ id, type: 'patchStatus', body: w.patch, status: w.status });
  const err = errText(o);
  if (err !== undefined) {
    if (id === 'status-on-failure') return undefined;
    fail(st, `patch status ${st.ns}/${st.name}: ${err}`);
  }
  return w.status;
}

/** Writes the status when it changed (docs/cocoonset.md#status-roll-up), then ends the pass with `result`. */
function writeStatusAndFinish(st: PassState, phase: CocoonSetPhase | '', result: Partial<PassResult>): never {
  const status = writeStatus(st, phase, 'status');
  return finish(st, result, status);
}

/** Deletes a pod; NotFound counts as done. Returns false when it was already gone. */
function deletePod(st: PassState, pod: string, prefix: string): boolean {
  const o = st.d.run({ id: `delete:${pod}`, type: 'deletePod', pod });
  const err = errText(o);
  if (err !== undefined) fail(st, `${prefix}: ${err}`);
  return o.kind !== 'notFound';
}

/** `handleFailedMainAgent` (docs/cocoonset.md#failed-main-and-recovery). */
function handleFailedMain(
  st: PassState,
  main: V1Pod,
  reason: 'PodLifecycleFailed' | 'MainAgentFailed',
): never {
  if (!podSpecMatchesAgent(main, st.cs, 0)) {
    deletePod(st, main.metadata!.name!, 'delete terminal drifted main agent');
    finish(st, { requeue: true });
  }
  if (reason === EventReasons.podLifecycleFailed) {
    st.d.effect({
      id: 'metric:lifecycleStateFailedObservedTotal',
      type: 'metric',
      metric: 'lifecycleStateFailedObservedTotal',
      labels: { phase: st.cs.status?.phase || 'Pending' },
    });
  }
  const msg = main.metadata?.annotations?.[Annotations.lifecycleStateMessage] || main.status?.phase || '';
  st.d.effect({
    id: `event:${reason}`,
    type: 'event',
    eventType: 'Warning',
    reason,
    message: `main pod ${st.ns}/${main.metadata?.name ?? ''}: ${msg}`,
  });
  writeStatusAndFinish(st, 'Failed', {});
}

/**
 * Restore marks for pods about to be created (docs/cocoonset.md#restore-from-hibernation): pods with intent
 * (name in `restorable`) and a registry get their `:hibernate` tag probed, all probes at once; a present tag
 * marks the pod in place. Returns, per pod, the probe's error text (fail closed) or undefined.
 */
function restoreMarks(st: PassState, pods: V1Pod[], restorable: Set<string>): (string | undefined)[] {
  const intent = pods.map((p) => st.input.registryConfigured && restorable.has(p.metadata?.name ?? ''));
  const probes = pods.filter((_, i) => intent[i]).map((p) => vmNameOf(p));
  const outcomes = st.d.runAll(
    probes.map((vm): PassAction => ({ id: `probe:${vm}`, type: 'probeHibernate', vmName: vm })),
  );
  const byVM = new Map(probes.map((vm, i) => [vm, outcomes[i]!]));
  return pods.map((pod, i) => {
    if (!intent[i]) return undefined;
    const o = byVM.get(vmNameOf(pod))!;
    const probe = o.kind === 'probe' ? { present: o.present } : { error: errText(o) ?? 'unexpected outcome' };
    const decision = markRestoreIfHibernated(pod, true, true, probe);
    return decision.kind === 'error' ? decision.message : undefined;
  });
}

/** `createMainAgent` (docs/cocoonset.md#a-pass-in-order). */
function createMain(st: PassState): never {
  const pod = build(st, 'build main agent', () => buildAgentPod(st.cs, 0, '', ''));
  const crs = hibernations(st);
  if ('error' in crs) fail(st, crs.error);
  const [probeErr] = restoreMarks(st, [pod], podsRestorableByCR(crs.items));
  if (probeErr !== undefined) fail(st, probeErr);
  const o = st.d.run({ id: `create:${pod.metadata!.name}`, type: 'createPod', pod });
  if (o.kind === 'alreadyExists') finish(st, { requeueAfterMs: REQUEUE_WAIT_FOR_MAIN_MS });
  const err = errText(o);
  if (err !== undefined) fail(st, `create main agent: ${err}`);
  return finish(st, { requeue: true });
}

/**
 * `ensureSubAgents` (docs/cocoonset.md#a-pass-in-order); returns (changed, requeueAfterMs) or ends the pass
 * with an error.
 */
/** Generation stamp of every classified pod that lacks it, as one batch (`PassInput.batchPodLoops`). */
function stampAll(st: PassState, generation: number): void {
  const pods = podsInNameOrder(st.c)
    .filter((pod) => cocoonSetGenerationOf(pod) !== generation)
    .map((pod) => pod.metadata?.name ?? '');
  const outcomes = st.d.runAll(
    pods.map(
      (pod): PassAction => ({
        id: `stamp:${pod}`,
        type: 'patchPodAnnotations',
        pod,
        annotations: { [Annotations.cocoonSetGeneration]: String(generation) },
      }),
    ),
  );
  const firstErr = outcomes.findIndex((o) => o.kind === 'error');
  if (firstErr >= 0)
    fail(st, `patch cocoonset generation on ${st.ns}/${pods[firstErr]}: ${errText(outcomes[firstErr]!)}`);
}

/** The main is asked to hibernate: its annotation, or a CocoonHibernation that holds it (`podsHibernatedByCR`). */
function mainHibernating(st: PassState, crs: readonly CocoonHibernation[]): boolean {
  const main = st.c.main;
  return hibernateRequested(main) || podsHibernatedByCR(crs).has(main?.metadata?.name ?? '');
}

function ensureSubAgents(
  st: PassState,
  mainVM: string,
  mainNode: string,
): { changed: boolean; requeueAfterMs: number } {
  const replicas = replicasOf(st.cs);
  let changed = false;
  let requeueAfterMs = 0;
  const missing: number[] = [];
  const labels = { namespace: st.ns, cocoonset: st.name };
  for (let slot = 1; slot <= replicas; slot++) {
    const pod = st.c.sub.get(slot);
    if (!pod) {
      missing.push(slot);
      continue;
    }
    const podName = pod.metadata?.name ?? '';
    const cs = currentCS(st);
    const t = triageSubAgent(cs, pod, slot, readRebuildHistory(cs), st.input.nowMs);
    switch (t.kind) {
      case 'keep':
        break;
      case 'wait':
        requeueAfterMs = requeueAfterMs === 0 ? t.waitMs : Math.min(requeueAfterMs, t.waitMs);
        break;
      case 'deadLetter': {
        const o = st.d.run({
          id: `dead-letter:${podName}`,
          type: 'patchPodAnnotations',
          pod: podName,
          annotations: t.podAnnotations,
        });
        const err = errText(o);
        if (err !== undefined)
          fail(st, `patch pod ${st.ns}/${podName} annotation ${Annotations.deadLetter}: ${err}`);
        st.d.effect({
          id: `metric:subagentDeadLetterTotal:${slot}`,
          type: 'metric',
          metric: 'subagentDeadLetterTotal',
          labels,
        });
        st.d.effect({
          id: `event:${t.event.reason}:${slot}`,
          type: 'event',
          eventType: t.event.type,
          reason: t.event.reason,
          message: t.event.message,
        });
        break;
      }
      case 'rebuild': {
        writeHistory(st, slot, t.history, 'persist rebuild history');
        deletePod(st, podName, `delete terminal sub-agent slot ${slot}`);
        st.d.effect({
          id: `metric:subagentRebuildTotal:${slot}`,
          type: 'metric',
          metric: 'subagentRebuildTotal',
          labels,
        });
        st.d.effect({
          id: `event:${t.event.reason}:${slot}`,
          type: 'event',
          eventType: t.event.type,
          reason: t.event.reason,
          message: t.event.message,
        });
        changed = true;
        break;
      }
      case 'deleteDrifted':
        deletePod(st, podName, `delete drifted sub-agent slot ${slot}`);
        changed = true;
        break;
      case 'liftDeadLetter':
        if (t.history !== undefined)
          writeHistory(st, slot, t.history, `reset rebuild history for slot ${slot}`);
        deletePod(st, podName, `delete dead-lettered sub-agent slot ${slot}`);
        changed = true;
        break;
    }
  }

  if (missing.length > 0) {
    const crs = hibernations(st);
    if ('error' in crs) fail(st, crs.error);
    if (st.input.subAgentsWaitForHibernatingMain && mainHibernating(st, crs.items)) {
      requeueAfterMs =
        requeueAfterMs === 0 ? REQUEUE_WAIT_FOR_MAIN_MS : Math.min(requeueAfterMs, REQUEUE_WAIT_FOR_MAIN_MS);
      missing.length = 0;
    }
  }
  if (missing.length > 0) {
    const crs = hibernations(st);
    if ('error' in crs) fail(st, crs.error);
    const pods = missing.map((slot) =>
      build(st, `build sub-agent slot ${slot}`, () => buildAgentPod(st.cs, slot, mainVM, mainNode)),
    );
    const probeErrs = restoreMarks(st, pods, podsRestorableByCR(crs.items));
    const firstProbeErr = probeErrs.findIndex((e) => e !== undefined);
    if (firstProbeErr >= 0)
      fail(st, `mark restore sub-agent slot ${missing[firstProbeErr]}: ${probeErrs[firstProbeErr]}`);
    const outcomes = st.d.runAll(
      pods.map((pod): PassAction => ({ id: `create:${pod.metadata!.name}`, type: 'createPod', pod })),
    );
    if (outcomes.some((o) => o.kind === 'ok')) changed = true;
    const firstErr = outcomes.findIndex((o) => o.kind === 'error');
    if (firstErr >= 0)
      fail(st, `create sub-agent slot ${missing[firstErr]}: ${errText(outcomes[firstErr]!)}`);
  }

  const extra = subSlotsAscending(st.c).filter((slot) => slot > replicas);
  if (st.input.batchPodLoops && extra.length > 0) {
    const outcomes = st.d.runAll(
      extra.map((slot): PassAction => {
        const pod = st.c.sub.get(slot)!.metadata!.name!;
        return { id: `delete:${pod}`, type: 'deletePod', pod };
      }),
    );
    const firstErr = outcomes.findIndex((o) => o.kind === 'error');
    if (firstErr >= 0)
      fail(st, `delete extra sub-agent slot ${extra[firstErr]}: ${errText(outcomes[firstErr]!)}`);
    if (outcomes.some((o) => o.kind !== 'notFound')) changed = true;
  }
  for (const slot of st.input.batchPodLoops ? [] : extra) {
    if (deletePod(st, st.c.sub.get(slot)!.metadata!.name!, `delete extra sub-agent slot ${slot}`))
      changed = true;
  }
  return { changed, requeueAfterMs };
}

/**
 * Writes the rebuild-history annotation and mirrors it for later slots
 * (docs/cocoonset.md#sub-agent-rebuild-and-dead-letter `patchRebuildHistory`).
 */
function writeHistory(st: PassState, slot: number, history: string, prefix: string): void {
  const o = st.d.run({
    id: `history:${slot}`,
    type: 'patchCocoonSetAnnotations',
    annotations: { [Annotations.rebuildHistory]: history },
  });
  const err = errText(o);
  if (err !== undefined) fail(st, `${prefix}: ${err}`);
  st.written[Annotations.rebuildHistory] = history;
}

/**
 * Toolbox names: duplicates and integer-like names are rejected before any write (docs/cocoonset.md#pods).
 */
export function validateToolboxes(toolboxes: readonly ToolboxSpec[]): string | undefined {
  const seen = new Set<string>();
  for (const tb of toolboxes) {
    if (seen.has(tb.name)) return `duplicate toolbox name "${tb.name}" in spec`;
    seen.add(tb.name);
    if (atoiParses(tb.name)) {
      return `toolbox name "${tb.name}" must not be an integer: collides with agent slot pod naming`;
    }
  }
  return undefined;
}

/**
 * `ensureToolboxes` (docs/cocoonset.md#a-pass-in-order); returns `changed` or ends the pass with an error.
 */
function ensureToolboxes(st: PassState): boolean {
  const toolboxes = st.cs.spec.toolboxes ?? [];
  const invalid = validateToolboxes(toolboxes);
  if (invalid !== undefined) fail(st, invalid);
  let changed = false;
  for (const tb of toolboxes) {
    const podName = toolboxPodName(st.cs, tb.name);
    const existing = st.c.toolbox.get(tb.name);
    if (!existing && st.c.allByName.has(podName)) {
      fail(st, `create toolbox ${tb.name}: name collision with existing pod ${podName}`);
    }
    if (existing) {
      if (isTerminal(existing) || !podSpecMatchesToolbox(existing, st.cs, tb)) {
        deletePod(st, existing.metadata!.name!, `delete toolbox ${tb.name} for recreate`);
        changed = true;
      }
      continue;
    }
    const pod = build(st, `build toolbox ${tb.name}`, () => buildToolboxPod(st.cs, tb));
    const crs = hibernations(st);
    if ('error' in crs) fail(st, crs.error);
    const [probeErr] = restoreMarks(st, [pod], podsRestorableByCR(crs.items));
    if (probeErr !== undefined) fail(st, `mark restore toolbox ${tb.name}: ${probeErr}`);
    const o = st.d.run({ id: `create:${podName}`, type: 'createPod', pod });
    if (o.kind === 'ok') {
      changed = true;
    } else if (o.kind === 'alreadyExists') {
      const g = st.d.run({ id: `get:${podName}`, type: 'getPod', pod: podName });
      if (g.kind !== 'pod')
        fail(st, `get existing pod ${st.ns}/${podName}: ${errText(g) ?? 'unexpected outcome'}`);
      const role = g.pod.metadata?.labels?.[Labels.role] ?? '';
      if (role !== Roles.toolbox || !isControlledBy(g.pod, st.cs.metadata.uid)) {
        fail(
          st,
          `create toolbox ${tb.name}: name collision with existing pod ${st.ns}/${podName} (role=${role})`,
        );
      }
    } else {
      fail(st, `create toolbox ${tb.name}: ${errText(o) ?? 'unexpected outcome'}`);
    }
  }
  const wanted = new Set(toolboxes.map((t) => t.name));
  for (const name of [...st.c.toolbox.keys()].sort(compareNames)) {
    if (wanted.has(name)) continue;
    if (deletePod(st, st.c.toolbox.get(name)!.metadata!.name!, `delete extra toolbox ${name}`))
      changed = true;
  }
  return changed;
}

/**
 * The reconcile order (docs/cocoonset.md#a-pass-in-order), from step 2 of the reference's `Reconcile` on.
 * Throws Finished or SUSPEND.
 */
function reconcile(st: PassState): never {
  const { cs, c, d } = st;
  // 2. Deletion (docs/cocoonset.md#deletion-and-registry-gc) — extension point.
  if (cs.metadata.deletionTimestamp != null) throw new Finished({ kind: 'delegate', flow: 'delete' });
  // 3. Finalizer: add it and requeue; nothing else this pass.
  if (!(cs.metadata.finalizers ?? []).includes(Finalizers.cocoonSet)) {
    const o = d.run({ id: 'finalizer', type: 'addFinalizer', finalizer: Finalizers.cocoonSet });
    const err = errText(o);
    if (err !== undefined) fail(st, `add finalizer: ${err}`);
    finish(st, { requeue: true });
  }
  // Validation gate (ours): nothing below touches a pod while the spec builds pods the apiserver rejects.
  // Toolbox names that break the toolbox name rules keep failing at their own step, as in the reference.
  const tbNamesOK = validateToolboxes(cs.spec.toolboxes ?? []) === undefined;
  const invalid = invalidSpecReason(cs, vmNameOf(c.main), tbNamesOK);
  if (invalid !== undefined) blockInvalidSpec(st, invalid);
  // 6. Generation stamp on every classified pod, in name order.
  const generation = cs.metadata.generation ?? 0;
  if (st.input.batchPodLoops) stampAll(st, generation);
  for (const pod of st.input.batchPodLoops ? [] : podsInNameOrder(c)) {
    if (cocoonSetGenerationOf(pod) === generation) continue;
    const podName = pod.metadata?.name ?? '';
    const o = d.run({
      id: `stamp:${podName}`,
      type: 'patchPodAnnotations',
      pod: podName,
      annotations: { [Annotations.cocoonSetGeneration]: String(generation) },
    });
    const err = errText(o);
    if (err !== undefined) fail(st, `patch cocoonset generation on ${st.ns}/${podName}: ${err}`);
  }
  // 7. Failed main short-circuit / recovery.
  const main = c.main;
  if (main) {
    const reason = mainPodFailedReason(main);
    if (reason !== '') handleFailedMain(st, main, reason);
    if (cs.status?.phase === 'Failed' && podReady(main)) {
      d.effect({
        id: `event:${EventReasons.recoveredFromFailure}`,
        type: 'event',
        eventType: 'Normal',
        reason: EventReasons.recoveredFromFailure,
        message: `main pod ${st.ns}/${main.metadata?.name ?? ''} is Ready again`,
      });
    }
  }
  // 8. Suspend — extension point.
  if (cs.spec.suspend) {
    flushThen(st, {
      kind: 'delegate',
      flow: hibernatePolicyOf(cs) === 'release' ? 'suspendRelease' : 'suspend',
    });
  }
  // 9. Migration — extension point (delegated only when its entry gate can engage).
  if (!st.input.declined?.migration && migrationMayEngage(cs, main, st.input.registryConfigured)) {
    flushThen(st, { kind: 'delegate', flow: 'migration' });
  }
  // 10. Released-seat wake — extension point.
  if (!st.input.declined?.wake && wakeMayEngage(cs, main, st.input.registryConfigured)) {
    flushThen(st, { kind: 'delegate', flow: 'wake' });
  }
  // 11. Un-suspend: clear leftover hibernate annotations, except on CR-owned pods.
  const hibernating = podsInNameOrder(c).filter(hibernateRequested);
  if (hibernating.length > 0) {
    const crs = hibernations(st);
    if ('error' in crs) fail(st, crs.error);
    const skip = podsHibernatedByCR(crs.items);
    for (const pod of hibernating) {
      const podName = pod.metadata?.name ?? '';
      if (skip.has(podName)) continue;
      const o = d.run({
        id: `unsuspend:${podName}`,
        type: 'patchPodAnnotations',
        pod: podName,
        annotations: { [Annotations.hibernate]: null },
      });
      const err = errText(o);
      if (err !== undefined) fail(st, `clear hibernate annotation on ${st.ns}/${podName}: ${err}`);
    }
  }
  // 12. Main drift: delete, requeue.
  if (main && !podSpecMatchesAgent(main, cs, 0)) {
    deletePod(st, main.metadata!.name!, 'delete drifted main agent');
    finish(st, { requeue: true });
  }
  // 14. Main missing: create it.
  if (!main) createMain(st);
  // 15. Main not Ready: Pending, 5 s.
  if (!podReady(main)) writeStatusAndFinish(st, 'Pending', { requeueAfterMs: REQUEUE_WAIT_FOR_MAIN_MS });
  // 16–18. Sub-agents, then toolboxes.
  const sub = ensureSubAgents(st, vmNameOf(main), main!.spec?.nodeName ?? '');
  const tbChanged = ensureToolboxes(st);
  // 19. Any create/delete: requeue without a status write.
  if (sub.changed || tbChanged) finish(st, { requeue: true });
  // 20–21. Derived status; requeue only for rebuild backoff.
  return writeStatusAndFinish(st, '', { requeueAfterMs: sub.requeueAfterMs });
}

/** Returns `step` once the queued effects have run (so events precede a delegation). */
function flushThen(st: PassState, step: PassStep): never {
  if (st.d.batch.length > 0) throw SUSPEND;
  throw new Finished(step);
}

/**
 * Plans one reconcile pass (docs/cocoonset.md#a-pass-in-order without the delegated flows). Deterministic in
 * its inputs; see the module comment for the driving loop. Never throws for API failures: they end the pass
 * with `result.error` carrying Go's message.
 */
export function planPass(input: PassInput, outcomes: Readonly<Record<string, ActionOutcome>>): PassStep {
  const cs = input.cs;
  const d = new Driver(outcomes);
  const st: PassState = {
    cs,
    ns: cs.metadata.namespace ?? '',
    name: cs.metadata.name ?? '',
    c: classifyPods(ownedPods(cs, input.pods)),
    d,
    input,
    written: {},
  };
  try {
    reconcile(st);
  } catch (e) {
    if (e === SUSPEND) {
      return {
        kind: 'run',
        actions: d.batch,
        concurrent: d.concurrent,
        maxConcurrency: d.concurrent ? SUB_AGENT_CREATE_CONCURRENCY : 1,
      };
    }
    if (e instanceof Finished) {
      if (d.batch.length > 0) return { kind: 'run', actions: d.batch, concurrent: false, maxConcurrency: 1 };
      return e.step;
    }
    throw e;
  }
}
