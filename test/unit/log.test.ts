/** Log formats: JSON lines by default, readable lines with LOG_FORMAT=pretty (src/log.ts). */

import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { createLogger, prettyLine, temporalLogger } from '../../src/log.js';

function capture(format: 'json' | 'pretty') {
  const lines: string[] = [];
  const log = createLogger('info', { write: (s: string) => lines.push(s) }, format);
  return { log, lines };
}

describe('log formats', () => {
  it('writes one JSON object per line by default', () => {
    const { log, lines } = capture('json');
    log.child({ component: 'watcher' }).info({ kind: 'Pod' }, 'synced');
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toMatchObject({
      level: 'info',
      name: 'cocoon-operator',
      component: 'watcher',
      kind: 'Pod',
      msg: 'synced',
    });
  });

  it('writes clock, level, component, message and fields with LOG_FORMAT=pretty', () => {
    const { log, lines } = capture('pretty');
    log.child({ component: 'watcher' }).warn({ kind: 'Pod', why: 'a b' }, 'relist');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^\d\d:\d\d:\d\d\.\d{3} WARN {2}\[watcher\] relist {2}kind=Pod why="a b"\n$/);
  });

  it('puts an error stack under the pretty line', () => {
    const { log, lines } = capture('pretty');
    log.error({ err: new Error('boom') }, 'startup failed');
    expect(lines[0]).toMatch(/^\S+ ERROR startup failed\n {4}Error: boom\n +at /);
  });

  it("keeps the SDK's activity-only-worker warning at debug, other SDK warnings at warn (found by a new-user run)", () => {
    const { log, lines } = capture('json');
    const sdk = temporalLogger(log);
    sdk.warn('No workflows registered, not polling', { sdkComponent: 'worker' });
    sdk.warn('Activity heartbeat timed out', { sdkComponent: 'worker' });
    expect(lines.map((l) => JSON.parse(l).msg)).toEqual(['Activity heartbeat timed out']);
  });

  it("an activity's own failure (ApplicationFailure) is logged without its stack, any other error with it", () => {
    const { log, lines } = capture('json');
    const sdk = temporalLogger(log);
    const failure = ApplicationFailure.create({ type: 'RegistryError', message: 'delete vm:hibernate: 503' });
    sdk.warn('Activity failed', { sdkComponent: 'worker', error: failure });
    sdk.warn('Activity failed', { sdkComponent: 'worker', error: new TypeError('x is undefined') });
    const [own, bug] = lines.map((l) => JSON.parse(l).err);
    expect(own).toBe('RegistryError: delete vm:hibernate: 503');
    expect(bug.stack).toMatch(/^TypeError: x is undefined\n +at /);
  });

  it("with quietSdk (pretty at info) drops the SDK's own info lines but keeps the workflows' (their transitions)", () => {
    const { log, lines } = capture('json');
    const sdk = temporalLogger(log, { quietSdk: true });
    sdk.info('Worker state changed', { sdkComponent: 'worker' });
    sdk.info('cocoonhibernation ns/hib: Hibernating → Hibernated', {
      sdkComponent: 'workflow',
      workflowId: 'vm/ns/demo-0',
      runId: 'r1',
      taskQueue: 'q',
      workflowType: 'vmWorkflow',
    });
    sdk.warn('Activity heartbeat timed out', { sdkComponent: 'worker' });
    expect(lines.map((l) => JSON.parse(l).msg)).toEqual([
      'cocoonhibernation ns/hib: Hibernating → Hibernated',
      'Activity heartbeat timed out',
    ]);
    // The workflow's line keeps its workflow id and drops the rest of the SDK's context.
    const line = JSON.parse(lines[0]!);
    expect(line.workflowId).toBe('vm/ns/demo-0');
    expect(line).not.toHaveProperty('runId');
    expect(line).not.toHaveProperty('taskQueue');
  });

  it('passes a line that is not JSON through', () => {
    expect(prettyLine('plain text')).toBe('plain text\n');
  });

  it('keeps a child logger at its own level (the Temporal SDK logger runs at warn in pretty mode)', () => {
    const { log, lines } = capture('pretty');
    const sdk = log.child({ component: 'temporal' }, { level: 'warn' });
    sdk.info('Workflow bundle created');
    sdk.warn('slow task');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('[temporal] slow task');
  });
});
