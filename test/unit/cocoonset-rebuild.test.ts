/**
 * Rebuild history, backoff and sub-agent triage (port of rebuild_test.go plus the triage rules,
 * docs/cocoonset.md#sub-agent-rebuild-and-dead-letter).
 */
import { describe, expect, it } from 'vitest';
import { Annotations } from '../../src/api/keys.js';
import type { CocoonSet } from '../../src/api/types.js';
import { buildAgentPod } from '../../src/cocoonset/pods.js';
import {
  backoffDelayMs,
  encodeRebuildHistory,
  formatRFC3339Nano,
  lastDeletedMs,
  parseRFC3339,
  type RebuildHistory,
  readRebuildHistory,
  triageSubAgent,
  ZERO_TIME,
} from '../../src/cocoonset/rebuild.js';
import { annotate, newCocoonSet } from '../support/builders.js';

const T1 = '2026-05-14T01:00:00Z';
const T2 = '2026-05-14T02:00:00.5Z';
const NOW = Date.parse(T1);

function withHistory(raw: string | undefined, replicas = 3): CocoonSet {
  return newCocoonSet('demo', (c) => {
    c.spec.agent.replicas = replicas;
    if (raw !== undefined) c.metadata.annotations = { [Annotations.rebuildHistory]: raw };
  });
}

describe('rebuild history annotation', () => {
  it('round-trips counts', () => {
    const m: RebuildHistory = new Map([
      [1, { count: 2, lastDeleted: T1 }],
      [2, { count: 1, lastDeleted: T2 }],
    ]);
    const read = readRebuildHistory(withHistory(encodeRebuildHistory(3, m)));
    expect([read.get(1)!.count, read.get(2)!.count]).toEqual([2, 1]);
    expect(read.get(2)!.lastDeleted).toBe(T2);
  });

  it('garbage-collects slots above replicas on encode, mutating the map', () => {
    const m: RebuildHistory = new Map([
      [1, { count: 1, lastDeleted: T1 }],
      [2, { count: 1, lastDeleted: T1 }],
      [7, { count: 1, lastDeleted: T1 }],
    ]);
    const out = encodeRebuildHistory(2, m);
    expect([...m.keys()]).toEqual([1, 2]);
    expect(Object.keys(JSON.parse(out))).toEqual(['1', '2']);
  });

  it("encodes like Go's json: keys sorted as strings, zero time for never", () => {
    const m: RebuildHistory = new Map([
      [2, { count: 1, lastDeleted: T1 }],
      [10, { count: 3, lastDeleted: ZERO_TIME }],
      [1, { count: 2, lastDeleted: T2 }],
    ]);
    expect(encodeRebuildHistory(10, m)).toBe(
      '{"1":{"count":2,"lastDeleted":"2026-05-14T02:00:00.5Z"},' +
        '"10":{"count":3,"lastDeleted":"0001-01-01T00:00:00Z"},' +
        '"2":{"count":1,"lastDeleted":"2026-05-14T01:00:00Z"}}',
    );
    expect(encodeRebuildHistory(0, new Map())).toBe('{}');
  });

  it('reads a corrupt annotation as empty', () => {
    for (const raw of [
      'not-json',
      '[1]',
      '"x"',
      '{"a":{"count":1}}',
      '{"1":{"count":"x"}}',
      '{"1":{"lastDeleted":"yesterday"}}',
      '{"99999999999":{}}',
    ]) {
      expect(readRebuildHistory(withHistory(raw)).size, raw).toBe(0);
    }
  });

  it('reads null as an empty, writable map', () => {
    const m = readRebuildHistory(withHistory('null'));
    expect(m.size).toBe(0);
    m.set(1, { count: 1, lastDeleted: T1 });
    expect(encodeRebuildHistory(1, m)).toBe('{"1":{"count":1,"lastDeleted":"2026-05-14T01:00:00Z"}}');
  });

  it('reads missing/empty as empty, null entries as zero, and Go-written nano timestamps', () => {
    expect(readRebuildHistory(withHistory(undefined)).size).toBe(0);
    expect(readRebuildHistory(withHistory('')).size).toBe(0);
    const m = readRebuildHistory(
      withHistory('{"1":null,"+2":{"Count":4,"lastDeleted":"2026-05-14T03:00:00.123456789+02:00"}}'),
    );
    expect(m.get(1)).toEqual({ count: 0, lastDeleted: ZERO_TIME });
    expect(m.get(2)!.count).toBe(4);
    expect(lastDeletedMs(m.get(2)!)).toBe(Date.parse('2026-05-14T01:00:00.123Z'));
  });

  it('parses and formats RFC 3339 like Go', () => {
    expect(parseRFC3339('2026-05-14T01:00:00.500Z')!.text).toBe('2026-05-14T01:00:00.5Z');
    expect(parseRFC3339('2026-05-14T01:00:00+00:00')!.text).toBe('2026-05-14T01:00:00Z');
    expect(parseRFC3339('2026-02-30T01:00:00Z')).toBeUndefined();
    expect(parseRFC3339('2026-05-14 01:00:00Z')).toBeUndefined();
    expect(formatRFC3339Nano(Date.parse('2026-05-14T01:00:00.120Z'))).toBe('2026-05-14T01:00:00.12Z');
    expect(lastDeletedMs({ count: 0, lastDeleted: ZERO_TIME })).toBe(Date.parse('0001-01-01T00:00:00Z'));
  });
});

describe('backoff', () => {
  it('follows the schedule 0, 1 s, 5 s, 30 s, 30 s', () => {
    expect([0, 1, 2, 3, 10].map(backoffDelayMs)).toEqual([0, 1_000, 5_000, 30_000, 30_000]);
  });
});

describe('triageSubAgent', () => {
  const cs = withHistory(undefined, 1);
  const failedSub = () => {
    const p = buildAgentPod(cs, 1, 'vk-ns-demo-0', 'n');
    p.status = { phase: 'Failed' };
    return p;
  };

  it('keeps a healthy sub-agent and deletes a drifted one', () => {
    const p = buildAgentPod(cs, 1, 'vk-ns-demo-0', 'n');
    expect(triageSubAgent(cs, p, 1, new Map(), NOW)).toEqual({ kind: 'keep' });
    const edited = withHistory(undefined, 1);
    edited.spec.agent.image = 'other';
    expect(triageSubAgent(edited, p, 1, new Map(), NOW)).toEqual({ kind: 'deleteDrifted' });
  });

  it('rebuilds a first failure at once and records count 1 at now', () => {
    const t = triageSubAgent(cs, failedSub(), 1, new Map(), NOW);
    expect(t).toEqual({
      kind: 'rebuild',
      attempt: 1,
      history: '{"1":{"count":1,"lastDeleted":"2026-05-14T01:00:00Z"}}',
      event: { type: 'Normal', reason: 'SubAgentRebuilding', message: 'slot 1 attempt 1/4' },
    });
  });

  it('treats lifecycle failed as terminal while the kubelet says Running', () => {
    const p = annotate(buildAgentPod(cs, 1, 'vk-ns-demo-0', 'n'), { [Annotations.lifecycleState]: 'failed' });
    p.status = { phase: 'Running' };
    expect(triageSubAgent(cs, p, 1, new Map(), NOW).kind).toBe('rebuild');
    p.metadata!.annotations![Annotations.lifecycleState] = 'Failed';
    expect(triageSubAgent(cs, p, 1, new Map(), NOW).kind).toBe('keep');
  });

  it('waits out the backoff measured from the last delete', () => {
    const h: RebuildHistory = new Map([[1, { count: 2, lastDeleted: T1 }]]);
    expect(triageSubAgent(cs, failedSub(), 1, h, NOW + 1_500)).toEqual({ kind: 'wait', waitMs: 3_500 });
    const t = triageSubAgent(cs, failedSub(), 1, h, NOW + 5_000);
    expect(t.kind === 'rebuild' && t.attempt).toBe(3);
  });

  it('dead-letters after four rebuilds and keeps the pod', () => {
    const h: RebuildHistory = new Map([[1, { count: 4, lastDeleted: T1 }]]);
    expect(triageSubAgent(cs, failedSub(), 1, h, NOW + 3_600_000)).toEqual({
      kind: 'deadLetter',
      podAnnotations: { [Annotations.deadLetter]: 'true' },
      event: {
        type: 'Warning',
        reason: 'SubAgentDeadLetter',
        message: 'slot 1 exhausted 4 rebuilds; pod demo-1 left in dead-letter',
      },
    });
  });

  it('keeps a dead-lettered pod (even terminal) until the spec changes, then lifts it with a fresh budget', () => {
    const h: RebuildHistory = new Map([[1, { count: 4, lastDeleted: T1 }]]);
    const p = annotate(failedSub(), { [Annotations.deadLetter]: 'true' });
    expect(triageSubAgent(cs, p, 1, h, NOW)).toEqual({ kind: 'keep' });
    const edited = withHistory(undefined, 1);
    edited.spec.agent.image = 'fixed';
    expect(triageSubAgent(edited, p, 1, h, NOW)).toEqual({ kind: 'liftDeadLetter', history: '{}' });
    expect(triageSubAgent(edited, p, 1, new Map(), NOW)).toEqual({ kind: 'liftDeadLetter' });
    expect(h.has(1)).toBe(true);
  });
});
