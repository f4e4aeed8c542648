/**
 * Sub-agent triage with rebuild backoff and dead letter (operator cocoonset/rebuild.go, agents.go
 * `triageSubAgent`; docs/cocoonset.md#sub-agent-rebuild-and-dead-letter). Pure: the history is passed in and
 * the clock is an argument; the caller persists what the decision says, in the order it says.
 */
import { Annotations, EventReasons } from '../api/keys.js';
import type { PodLike } from '../api/pod.js';
import type { CocoonSet } from '../api/types.js';
import { isTerminal } from './classify.js';
import { type DriftOptions, podSpecMatchesAgent } from './drift.js';

/** Rebuilds a slot gets before it is dead-lettered (`maxRebuildAttempts`). */
export const MAX_REBUILD_ATTEMPTS = 4;

/** Wait before rebuild number `prior + 1`, by prior count 0/1/2/≥3, in milliseconds. */
export const REBUILD_BACKOFF_MS = [0, 1_000, 5_000, 30_000] as const;

/** `backoffDelay(priorCount)`: 0 → 0 s, 1 → 1 s, 2 → 5 s, ≥ 3 → 30 s (in ms). */
export function backoffDelayMs(priorCount: number): number {
  if (priorCount <= 0) return REBUILD_BACKOFF_MS[0];
  return REBUILD_BACKOFF_MS[Math.min(priorCount, REBUILD_BACKOFF_MS.length - 1)]!;
}

/** One slot's record: rebuilds so far and the RFC 3339 time of the last rebuild delete. */
export interface RebuildEntry {
  count: number;
  /** RFC 3339 (nano) text as Go writes it; `0001-01-01T00:00:00Z` is the zero time. */
  lastDeleted: string;
}

/** Slot → entry. */
export type RebuildHistory = Map<number, RebuildEntry>;

/** Go's zero `time.Time` in JSON. */
export const ZERO_TIME = '0001-01-01T00:00:00Z';

const RFC3339_RE =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:(Z)|([+-])(\d{2}):(\d{2}))$/;

interface ParsedTime {
  /** Epoch ms (sub-ms digits dropped). */
  ms: number;
  /** Go's `MarshalJSON` text for the same instant and offset (RFC3339Nano). */
  text: string;
}

/** Parses RFC 3339 as Go's `time.Time.UnmarshalJSON` accepts it; undefined when invalid. */
export function parseRFC3339(s: string): ParsedTime | undefined {
  const m = RFC3339_RE.exec(s);
  if (!m) return undefined;
  const [year, month, day, hour, min, sec] = [m[1], m[2], m[3], m[4], m[5], m[6]].map(Number) as number[];
  if (month! < 1 || month! > 12 || day! < 1 || hour! > 23 || min! > 59 || sec! > 59) return undefined;
  const d = new Date(0);
  d.setUTCFullYear(year!, month! - 1, day!);
  if (d.getUTCMonth() !== month! - 1) return undefined;
  d.setUTCHours(hour!, min!, sec!, 0);
  const frac = (m[7] ?? '').slice(0, 9);
  let offsetMin = 0;
  if (m[9]) {
    const oh = Number(m[10]);
    const om = Number(m[11]);
    if (oh > 23 || om > 59) return undefined;
    offsetMin = (m[9] === '-' ? -1 : 1) * (oh * 60 + om);
  }
  const ms = d.getTime() + Number(frac.padEnd(3, '0').slice(0, 3)) - offsetMin * 60_000;
  const trimmed = frac.replace(/0+$/, '');
  const zone = offsetMin === 0 ? 'Z' : `${m[9]}${m[10]}:${m[11]}`;
  const text = `${m[1]}-${m[2]}-${m[3]}T${m[4]}:${m[5]}:${m[6]}${trimmed ? `.${trimmed}` : ''}${zone}`;
  return { ms, text };
}

/** Go `time.Time.MarshalJSON` of a UTC instant given in epoch ms (RFC3339Nano, trailing zeros cut). */
export function formatRFC3339Nano(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, (_, f: string) => {
    const t = f.replace(/0+$/, '');
    return t ? `.${t}Z` : 'Z';
  });
}

function isInt32Key(k: string): boolean {
  if (!/^[+-]?[0-9]+$/.test(k)) return false;
  const n = Number(k);
  return n >= -2147483648 && n <= 2147483647;
}

/** Decodes one entry as Go's json into `{Count int; LastDeleted time.Time}`; undefined = decode error. */
function decodeEntry(v: unknown): RebuildEntry | undefined {
  const entry: RebuildEntry = { count: 0, lastDeleted: ZERO_TIME };
  if (v === null) return entry;
  if (typeof v !== 'object' || Array.isArray(v)) return undefined;
  for (const [k, raw] of Object.entries(v as Record<string, unknown>)) {
    const key = k.toLowerCase();
    if (key === 'count') {
      if (raw === null) continue;
      if (typeof raw !== 'number' || !Number.isSafeInteger(raw)) return undefined;
      entry.count = raw;
    } else if (key === 'lastdeleted') {
      if (raw === null) continue;
      if (typeof raw !== 'string') return undefined;
      const t = parseRFC3339(raw);
      if (!t) return undefined;
      entry.lastDeleted = t.text;
    }
  }
  return entry;
}

/**
 * `readRebuildHistory(cs)` (docs/cocoonset.md#sub-agent-rebuild-and-dead-letter): the
 * `cocoonset.cocoonstack.io/rebuild-history` annotation decoded. Missing, empty, `null`, invalid JSON or a
 * non-int32 key → an empty (writable) map.
 */
export function readRebuildHistory(cs: CocoonSet): RebuildHistory {
  const raw = cs.metadata.annotations?.[Annotations.rebuildHistory];
  const out: RebuildHistory = new Map();
  if (!raw) return out;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return new Map();
  }
  if (parsed === null) return out;
  if (typeof parsed !== 'object' || Array.isArray(parsed)) return new Map();
  for (const [k, v] of Object.entries(parsed as Record<string, unknown>)) {
    if (!isInt32Key(k)) return new Map();
    const entry = decodeEntry(v);
    if (!entry) return new Map();
    out.set(Number(k), entry);
  }
  return out;
}

/**
 * `encodeRebuildHistory(replicas, m)` (docs/cocoonset.md#sub-agent-rebuild-and-dead-letter): **deletes**
 * entries with slot > replicas from `m` (the map passed in is mutated), then writes Go's JSON: keys sorted as
 * strings (`"1","10","2"`), values `{"count":N,"lastDeleted":"<RFC3339Nano>"}`.
 */
export function encodeRebuildHistory(replicas: number, m: RebuildHistory): string {
  for (const slot of [...m.keys()]) if (slot > replicas) m.delete(slot);
  const keys = [...m.keys()].map(String).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const body = keys
    .map((k) => {
      const e = m.get(Number(k))!;
      return `${JSON.stringify(k)}:{"count":${e.count},"lastDeleted":${JSON.stringify(e.lastDeleted)}}`;
    })
    .join(',');
  return `{${body}}`;
}

/** Milliseconds of an entry's last delete (the zero time reads as year 1). */
export function lastDeletedMs(e: RebuildEntry): number {
  return parseRFC3339(e.lastDeleted)?.ms ?? parseRFC3339(ZERO_TIME)!.ms;
}

/** Dead-letter flag on a pod: the annotation equals "true" exactly. */
export function isDeadLettered(pod: PodLike): boolean {
  return pod.metadata?.annotations?.[Annotations.deadLetter] === 'true';
}

/**
 * What to do with one existing sub-agent, in the order the caller must do it
 * (docs/cocoonset.md#sub-agent-rebuild-and-dead-letter).
 */
export type SubAgentTriage =
  /** Healthy, or dead-lettered with an unchanged spec: nothing to do. */
  | { kind: 'keep' }
  /** Terminal, but backoff since the last rebuild has `waitMs` left: requeue after at most that. */
  | { kind: 'wait'; waitMs: number }
  /**
   * Terminal with `count >= 4`: merge-patch the pod's dead-letter annotation (always sent), count
   * `cocoon_operator_subagent_dead_letter_total`, Warning event; the pod is kept. Not a change.
   */
  | { kind: 'deadLetter'; podAnnotations: Record<string, string>; event: TriageEvent }
  /**
   * Terminal and due: write `history` to the CocoonSet annotation **first** (so a failed delete cannot
   * skip the count), then delete the pod (NotFound ignored), count `subagent_rebuild_total`, Normal
   * event. A change.
   */
  | { kind: 'rebuild'; history: string; attempt: number; event: TriageEvent }
  /** Live but drifted: delete it (NotFound ignored). A change; no history, event or metric. */
  | { kind: 'deleteDrifted' }
  /**
   * Dead-lettered and the spec changed (the user's remedy): when `history` is set, write it (the old
   * history minus this slot) first, then delete the pod. A change; the slot gets a fresh budget.
   */
  | { kind: 'liftDeadLetter'; history?: string };

/** An event a decision asks for (reason from src/api/keys.ts EventReasons). */
export interface TriageEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

/**
 * `triageSubAgent` (docs/cocoonset.md#sub-agent-rebuild-and-dead-letter): dead letter first (kept unless
 * drifted → lift), then terminal (phase Failed or lifecycle `failed`) → rebuild with backoff / dead letter,
 * then drift → delete, else keep. `history` is the CocoonSet's current history (read it once per pass and
 * thread the written value to later slots); it is not mutated. `nowMs` is the pass's clock; `drift` how the
 * drift rules read the pod (src/cocoonset/drift.ts `DriftOptions`); `opts.terminal` overrides `isTerminal`
 * (the pass's own rule: a pod a failed hibernate round left holds its VM).
 */
export function triageSubAgent(
  cs: CocoonSet,
  pod: PodLike,
  slot: number,
  history: RebuildHistory,
  nowMs: number,
  drift: DriftOptions = {},
  opts: { terminal?: boolean } = {},
): SubAgentTriage {
  const replicas = cs.spec.agent.replicas ?? 0;
  if (isDeadLettered(pod)) {
    if (podSpecMatchesAgent(pod, cs, slot, drift)) return { kind: 'keep' };
    if (!history.has(slot)) return { kind: 'liftDeadLetter' };
    const next: RebuildHistory = new Map(history);
    next.delete(slot);
    return { kind: 'liftDeadLetter', history: encodeRebuildHistory(replicas, next) };
  }
  if (opts.terminal ?? isTerminal(pod)) {
    const entry = history.get(slot) ?? { count: 0, lastDeleted: ZERO_TIME };
    if (entry.count >= MAX_REBUILD_ATTEMPTS) {
      return {
        kind: 'deadLetter',
        podAnnotations: { [Annotations.deadLetter]: 'true' },
        event: {
          type: 'Warning',
          reason: EventReasons.subAgentDeadLetter,
          message: `slot ${slot} exhausted ${MAX_REBUILD_ATTEMPTS} rebuilds; pod ${pod.metadata?.name ?? ''} left in dead-letter`,
        },
      };
    }
    const wait = backoffDelayMs(entry.count);
    if (wait > 0) {
      const remaining = wait - (nowMs - lastDeletedMs(entry));
      if (remaining > 0) return { kind: 'wait', waitMs: remaining };
    }
    const next: RebuildHistory = new Map(history);
    next.set(slot, { count: entry.count + 1, lastDeleted: formatRFC3339Nano(nowMs) });
    return {
      kind: 'rebuild',
      history: encodeRebuildHistory(replicas, next),
      attempt: entry.count + 1,
      event: {
        type: 'Normal',
        reason: EventReasons.subAgentRebuilding,
        message: `slot ${slot} attempt ${entry.count + 1}/${MAX_REBUILD_ATTEMPTS}`,
      },
    };
  }
  if (!podSpecMatchesAgent(pod, cs, slot, drift)) return { kind: 'deleteDrifted' };
  return { kind: 'keep' };
}
