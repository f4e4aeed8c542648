/**
 * Failure and delay injection for the vk-cocoon simulator (docs/development.md#simulator). Pure: a rule book
 * that the simulator consults at each injection point. No I/O.
 *
 * A rule is `{vm?, op, mode?, count?, delayMs?}`. `op` names an injection point, optionally suffixed with
 * the mode (`hibernate.push.fail` ≡ `{op: 'hibernate.push', mode: 'fail'}`). `vm` is a regular-expression
 * source matched against the VM name (absent = every VM). `count` limits how many times the rule fires
 * (absent = until cleared). `delayMs` is required for `delay` rules.
 */

/** Injection points the simulator consults, and where. */
export const FAULT_POINTS = [
  /** CreatePod bring-up (clone/run/restore): delay = time in `creating`; fail = CreateBringUpFailed. */
  'create',
  /** Between Running and `ready`: delay; fail = guest fixup exhausted (postclone.fail), no retry. */
  'ready',
  /** Hibernate local save: fail = HibernateSnapshotFailed. */
  'hibernate.save',
  /** Hibernate push of `:hibernate` (before the manifest PUT): delay, fail = HibernatePushFailed. */
  'hibernate.push',
  /**
   * Hibernate VM removal: delay = time between the push and the removal (the tag is in, the VM still runs,
   * lifecycle still `hibernating`); fail = tag rolled back, HibernateRemoveFailed.
   */
  'hibernate.remove',
  /** Wake / restore source resolution and pull: fail = WakePullFailed. */
  'wake.pull',
  /** Wake clone: fail = WakeCloneFailed. */
  'wake.clone',
  /** DeletePod `:latest` push of a running VM: fail = pod stays Terminating, retried. */
  'delete.push',
  /** CreatePod evidence check (GET `<vm>:hibernate`): fail = HibernateEvidenceFailed. */
  'evidence',
  /** Immediate action: the matching running VMs die (eviction, Failed/VMGone). */
  'vm.crash',
] as const;
export type FaultPoint = (typeof FAULT_POINTS)[number];
export type FaultMode = 'fail' | 'delay';

/** What a client sends (POST /faults). */
export interface FaultRuleInput {
  vm?: string;
  op: string;
  mode?: FaultMode;
  count?: number;
  delayMs?: number;
}

/** A validated rule as stored. */
export interface FaultRule {
  id: number;
  vm?: string;
  point: FaultPoint;
  mode: FaultMode;
  /** Remaining firings; undefined = unlimited. */
  remaining?: number;
  delayMs: number;
}

const ALIASES: Record<string, { point: FaultPoint; mode: FaultMode }> = {
  'evidence.error': { point: 'evidence', mode: 'fail' },
  'postclone.fail': { point: 'ready', mode: 'fail' },
  'vm.crash': { point: 'vm.crash', mode: 'fail' },
};

export class FaultRuleError extends Error {}

/**
 * Validates and normalises a rule. Throws FaultRuleError on an unknown op, a mode that contradicts the op
 * suffix, a bad regex, a non-positive count, or a delay rule without a non-negative `delayMs`.
 */
export function normaliseFaultRule(input: FaultRuleInput, id: number): FaultRule {
  if (!input || typeof input.op !== 'string') throw new FaultRuleError('fault rule needs an "op"');
  let point: FaultPoint | undefined;
  let mode: FaultMode | undefined = input.mode;
  const alias = ALIASES[input.op];
  if (alias) {
    point = alias.point;
    if (mode && mode !== alias.mode) throw new FaultRuleError(`op ${input.op} does not take mode ${mode}`);
    mode = alias.mode;
  } else if ((FAULT_POINTS as readonly string[]).includes(input.op)) {
    point = input.op as FaultPoint;
  } else {
    const m = /^(.*)\.(fail|delay)$/.exec(input.op);
    if (m && (FAULT_POINTS as readonly string[]).includes(m[1]!)) {
      point = m[1] as FaultPoint;
      const suffix = m[2] as FaultMode;
      if (mode && mode !== suffix) throw new FaultRuleError(`op ${input.op} contradicts mode ${mode}`);
      mode = suffix;
    }
  }
  if (!point) throw new FaultRuleError(`unknown fault op ${JSON.stringify(input.op)}`);
  if (mode !== 'fail' && mode !== 'delay')
    throw new FaultRuleError(`fault op ${input.op} needs mode fail or delay`);
  if (point === 'vm.crash' && mode !== 'fail') throw new FaultRuleError('vm.crash takes no delay');
  if (input.vm !== undefined) {
    if (typeof input.vm !== 'string') throw new FaultRuleError('"vm" must be a regular-expression string');
    try {
      new RegExp(input.vm);
    } catch (err) {
      throw new FaultRuleError(`bad vm regex: ${(err as Error).message}`);
    }
  }
  if (input.count !== undefined && !(Number.isInteger(input.count) && input.count > 0)) {
    throw new FaultRuleError('"count" must be a positive integer');
  }
  let delayMs = 0;
  if (mode === 'delay') {
    if (typeof input.delayMs !== 'number' || !Number.isFinite(input.delayMs) || input.delayMs < 0) {
      throw new FaultRuleError('delay rules need a non-negative "delayMs"');
    }
    delayMs = input.delayMs;
  }
  return { id, vm: input.vm, point, mode, remaining: input.count, delayMs };
}

/** The rule book. Rules fire in insertion order; the first matching rule wins. */
export class FaultBook {
  private rules: FaultRule[] = [];
  private nextId = 1;

  /** Adds a rule (validated, see normaliseFaultRule) and returns it. */
  add(input: FaultRuleInput): FaultRule {
    const rule = normaliseFaultRule(input, this.nextId++);
    this.rules.push(rule);
    return rule;
  }

  /** Removes every rule. */
  clear(): void {
    this.rules = [];
  }

  /** Snapshot of the current rules. */
  list(): FaultRule[] {
    return this.rules.map((r) => ({ ...r }));
  }

  /**
   * Consumes the first rule for (point, mode) whose VM pattern matches `vmName`, decrementing its count
   * (a rule whose count reaches 0 is removed). Returns the rule as it was before consumption, or undefined.
   */
  take(point: FaultPoint, mode: FaultMode, vmName: string): FaultRule | undefined {
    const idx = this.rules.findIndex(
      (r) => r.point === point && r.mode === mode && (r.vm === undefined || new RegExp(r.vm).test(vmName)),
    );
    if (idx < 0) return undefined;
    const rule = this.rules[idx]!;
    const before = { ...rule };
    if (rule.remaining !== undefined) {
      rule.remaining -= 1;
      if (rule.remaining <= 0) this.rules.splice(idx, 1);
    }
    return before;
  }

  /** Total injected delay for a point (consumes one delay rule), 0 when none matches. */
  delayFor(point: FaultPoint, vmName: string): number {
    return this.take(point, 'delay', vmName)?.delayMs ?? 0;
  }

  /** Whether a fail rule fires for the point (consumes one). */
  shouldFail(point: FaultPoint, vmName: string): boolean {
    return this.take(point, 'fail', vmName) !== undefined;
  }
}

/**
 * Which of `vmNames` an immediate `vm.crash` rule hits, honouring `count` as the maximum number of VMs.
 * Pure selection; the simulator performs the crash.
 */
export function crashTargets(rule: Pick<FaultRule, 'vm' | 'remaining'>, vmNames: string[]): string[] {
  const re = rule.vm === undefined ? undefined : new RegExp(rule.vm);
  const hit = vmNames.filter((n) => !re || re.test(n)).sort();
  return rule.remaining === undefined ? hit : hit.slice(0, rule.remaining);
}
