/**
 * CocoonSet status: the roll-up built from the classified pods, the phase derivation, the condition
 * merge and the no-op diff (operator cocoonset/status.go, apimachinery `meta.SetStatusCondition`,
 * `equality.Semantic`; docs/cocoonset.md#status-roll-up). Pure: the clock is an argument.
 */
import { CONDITION_PROGRESSING, CONDITION_READY, ConditionReasons, Roles } from '../api/keys.js';
import { podReady, vmNameOf } from '../api/pod.js';
import type { AgentStatus, CocoonSet, CocoonSetPhase, Condition, ToolboxStatus } from '../api/types.js';
import { type Classified, compareNames, subSlotsAscending } from './classify.js';
import { connectionType, parseVMRuntime, parseVMSpec, replicasOf } from './vmspec.js';

/** The status object (the CRD's `.status`). */
export type CocoonSetStatus = NonNullable<CocoonSet['status']>;

/** Drops '' / undefined string fields and 0 numbers (Go `omitempty`), keeping `keep` keys always. */
function omitEmpty<T extends object>(o: T, keep: readonly (keyof T)[]): T {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) {
    if (keep.includes(k as keyof T) || (v !== undefined && v !== '' && v !== 0)) out[k] = v;
  }
  return out as T;
}

/**
 * `derivePhase` (docs/cocoonset.md#status-roll-up): no main → Pending; fewer Ready agents or toolboxes than
 * desired → Scaling; else Running.
 */
export function derivePhase(
  hasMain: boolean,
  ready: number,
  desired: number,
  tbReady: number,
  tbDesired: number,
): CocoonSetPhase {
  if (!hasMain) return 'Pending';
  if (ready < desired || tbReady < tbDesired) return 'Scaling';
  return 'Running';
}

/**
 * `buildConditions` (docs/cocoonset.md#status-roll-up), with no lastTransitionTime (the merge stamps it):
 * Ready = True/AllAgentsReady iff ready == desired > 0 and tbReady == tbDesired, else
 * False/AgentsNotReady, message `"<r>/<d> agents ready, <tr>/<td> toolboxes ready"`;
 * Progressing = True/Reconciling for Pending or Scaling, else False/Stable, message = the phase.
 */
export function buildConditions(
  ready: number,
  desired: number,
  tbReady: number,
  tbDesired: number,
  phase: CocoonSetPhase,
  generation: number,
): Condition[] {
  const allReady = ready === desired && desired > 0 && tbReady === tbDesired;
  const progressing = phase === 'Pending' || phase === 'Scaling';
  // observedGeneration is omitempty in metav1.Condition.
  const gen = generation !== 0 ? { observedGeneration: generation } : {};
  return [
    {
      type: CONDITION_READY,
      status: allReady ? 'True' : 'False',
      reason: allReady ? ConditionReasons.allAgentsReady : ConditionReasons.agentsNotReady,
      message: `${ready}/${desired} agents ready, ${tbReady}/${tbDesired} toolboxes ready`,
      ...gen,
    },
    {
      type: CONDITION_PROGRESSING,
      status: progressing ? 'True' : 'False',
      reason: progressing ? ConditionReasons.reconciling : ConditionReasons.stable,
      message: phase,
      ...gen,
    },
  ];
}

/**
 * `buildStatus(cs, classified, phase)` (docs/cocoonset.md#status-roll-up). Agents: the main first (slot 0),
 * then every classified sub-agent in slot order (extras included) with `forkedFrom` = the main's VM name.
 * Toolboxes: every classified toolbox by name with its connection type. `phase` wins when non-empty, else
 * derived. Conditions carry no timestamps, so two builds of the same observation are equal.
 */
export function buildStatus(cs: CocoonSet, c: Classified, phase: CocoonSetPhase | '' = ''): CocoonSetStatus {
  const generation = cs.metadata.generation ?? 0;
  const desiredAgents = 1 + replicasOf(cs);
  const agents: AgentStatus[] = [];
  let readyAgents = 0;
  const mainVM = c.main ? vmNameOf(c.main) : '';
  if (c.main) {
    const rt = parseVMRuntime(c.main);
    agents.push(
      omitEmpty<AgentStatus>(
        {
          slot: 0,
          role: Roles.main,
          podName: c.main.metadata?.name,
          vmName: mainVM,
          vmID: rt.vmID,
          ip: rt.ip,
          phase: c.main.status?.phase,
        },
        ['slot', 'role'],
      ),
    );
    if (podReady(c.main)) readyAgents++;
  }
  for (const slot of subSlotsAscending(c)) {
    const pod = c.sub.get(slot)!;
    const rt = parseVMRuntime(pod);
    agents.push(
      omitEmpty<AgentStatus>(
        {
          slot,
          role: Roles.subAgent,
          podName: pod.metadata?.name,
          vmName: vmNameOf(pod),
          vmID: rt.vmID,
          ip: rt.ip,
          phase: pod.status?.phase,
          forkedFrom: mainVM,
        },
        ['slot', 'role'],
      ),
    );
    if (podReady(pod)) readyAgents++;
  }

  const desiredToolboxes = cs.spec.toolboxes?.length ?? 0;
  const toolboxes: ToolboxStatus[] = [];
  let readyToolboxes = 0;
  for (const name of [...c.toolbox.keys()].sort(compareNames)) {
    const pod = c.toolbox.get(name)!;
    const rt = parseVMRuntime(pod);
    const vm = parseVMSpec(pod);
    toolboxes.push(
      omitEmpty<ToolboxStatus>(
        {
          name,
          podName: pod.metadata?.name,
          vmName: vm.vmName,
          vmID: rt.vmID,
          ip: rt.ip,
          phase: pod.status?.phase,
          connType: connectionType(vm.os, rt.vncPort > 0, vm.connType),
          vncPort: rt.vncPort,
        },
        ['name'],
      ),
    );
    if (podReady(pod)) readyToolboxes++;
  }

  const finalPhase =
    phase !== ''
      ? phase
      : derivePhase(c.main !== undefined, readyAgents, desiredAgents, readyToolboxes, desiredToolboxes);
  const status: CocoonSetStatus = {
    readyAgents,
    desiredAgents,
    readyToolboxes,
    desiredToolboxes,
    phase: finalPhase,
    conditions: buildConditions(
      readyAgents,
      desiredAgents,
      readyToolboxes,
      desiredToolboxes,
      finalPhase,
      generation,
    ),
  };
  if (generation !== 0) status.observedGeneration = generation;
  if (agents.length > 0) status.agents = agents;
  if (toolboxes.length > 0) status.toolboxes = toolboxes;
  return status;
}

/** `metav1.Time` text: RFC 3339 UTC with second precision. */
export function formatConditionTime(nowMs: number): string {
  return new Date(Math.floor(nowMs / 1000) * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/**
 * Merges fresh conditions over the existing ones with `meta.SetStatusCondition` rules
 * (docs/cocoonset.md#status-roll-up): other types keep their place; a new type is appended stamped `now`; an
 * existing type gets a new timestamp only when its status flips, and always takes the new reason, message and
 * observedGeneration. Returns a new array; inputs are not mutated.
 */
export function mergeConditions(
  existing: readonly Condition[] | undefined,
  fresh: readonly Condition[],
  nowMs: number,
): Condition[] {
  const merged = (existing ?? []).map((c) => ({ ...c }));
  const stamp = formatConditionTime(nowMs);
  for (const n of fresh) {
    const cur = merged.find((c) => c.type === n.type);
    if (!cur) {
      merged.push({ ...n, lastTransitionTime: n.lastTransitionTime || stamp });
      continue;
    }
    if (cur.status !== n.status) {
      cur.status = n.status;
      cur.lastTransitionTime = n.lastTransitionTime || stamp;
    }
    cur.reason = n.reason;
    cur.message = n.message;
    if (n.observedGeneration === undefined || n.observedGeneration === 0) delete cur.observedGeneration;
    else cur.observedGeneration = n.observedGeneration;
  }
  return merged;
}

/** Instant of a metav1.Time as epoch ms (null for absent/unparsable, i.e. Go's zero time). */
function instant(t: unknown): number | null {
  if (t === undefined || t === null || t === '') return null;
  const ms = t instanceof Date ? t.getTime() : Date.parse(String(t));
  return Number.isNaN(ms) ? null : ms;
}

/** The status in Go's zero-value form, so absent ≡ '' / 0 / [] (equality.Semantic). */
function normalizeStatus(s: Partial<CocoonSetStatus> | undefined): unknown {
  const st = s ?? {};
  return {
    observedGeneration: st.observedGeneration ?? 0,
    phase: st.phase ?? '',
    readyAgents: st.readyAgents ?? 0,
    desiredAgents: st.desiredAgents ?? 0,
    readyToolboxes: st.readyToolboxes ?? 0,
    desiredToolboxes: st.desiredToolboxes ?? 0,
    agents: (st.agents ?? []).map((a) => [
      a.slot ?? 0,
      a.role ?? '',
      a.podName ?? '',
      a.vmName ?? '',
      a.vmID ?? '',
      a.ip ?? '',
      a.phase ?? '',
      a.forkedFrom ?? '',
    ]),
    toolboxes: (st.toolboxes ?? []).map((t) => [
      t.name ?? '',
      t.podName ?? '',
      t.vmName ?? '',
      t.vmID ?? '',
      t.ip ?? '',
      t.phase ?? '',
      t.connType ?? '',
      t.vncPort ?? 0,
    ]),
    conditions: (st.conditions ?? []).map((c) => [
      c.type ?? '',
      c.status ?? '',
      c.reason ?? '',
      c.message ?? '',
      instant(c.lastTransitionTime),
      c.observedGeneration ?? 0,
    ]),
  };
}

/** `equality.Semantic.DeepEqual` of two statuses: nil ≡ empty, omitted ≡ zero, times as instants. */
export function statusEqual(
  a: Partial<CocoonSetStatus> | undefined,
  b: Partial<CocoonSetStatus> | undefined,
): boolean {
  return JSON.stringify(normalizeStatus(a)) === JSON.stringify(normalizeStatus(b));
}

/** Merge-patch body for `/status`: the whole status, with `null` for fields that are now empty. */
export interface StatusPatchBody {
  status: Record<string, unknown>;
}

/** The result of `planStatusWrite`: the status to store and the merge patch that stores it. */
export interface StatusWrite {
  status: CocoonSetStatus;
  patch: StatusPatchBody;
}

/**
 * `patchStatus` without the I/O (docs/cocoonset.md#status-roll-up): merges `fresh` conditions over
 * `cs.status.conditions` at `nowMs`, then compares with the cached status semantically. Returns null when
 * nothing changed (send nothing: status writes must be true no-ops on a repeated observation), else the new
 * status and a JSON merge patch carrying all of it, with `null` for emptied optional fields so omitted lists
 * clear.
 */
export function planStatusWrite(cs: CocoonSet, fresh: CocoonSetStatus, nowMs: number): StatusWrite | null {
  const status: CocoonSetStatus = {
    ...fresh,
    conditions: mergeConditions(cs.status?.conditions, fresh.conditions ?? [], nowMs),
  };
  if (statusEqual(cs.status, status)) return null;
  const body: Record<string, unknown> = {
    observedGeneration: status.observedGeneration || null,
    phase: status.phase || null,
    readyAgents: status.readyAgents,
    desiredAgents: status.desiredAgents,
    readyToolboxes: status.readyToolboxes,
    desiredToolboxes: status.desiredToolboxes,
    agents: status.agents && status.agents.length > 0 ? status.agents : null,
    toolboxes: status.toolboxes && status.toolboxes.length > 0 ? status.toolboxes : null,
    conditions: status.conditions && status.conditions.length > 0 ? status.conditions : null,
  };
  return { status, patch: { status: body } };
}
