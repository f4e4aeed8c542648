/**
 * src/workflow-completions.ts against the installed Temporal SDK: the completion `Worker#handleActivation`
 * returns (and the SDK's cache keeps per workflow) is a view of Node's shared buffer pool; wrapped, it is a
 * copy of exactly its bytes. The SDK's own method is called (on its eviction path, which needs no workflow),
 * so an SDK that renames it or changes what it returns fails here first.
 */
import { EventEmitter } from 'node:events';
import { coresdk } from '@temporalio/proto';
import { Worker } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { ownCompletionBytes } from '../../src/workflow-completions.js';

interface Handled {
  state: unknown;
  output: { close: boolean; completion?: Uint8Array };
}

/** Calls `proto.handleActivation` as the SDK does for a non-synthetic eviction of run `r1` with no workflow. */
async function evict(proto: object): Promise<Handled> {
  const self = { evictionsEmitter: new EventEmitter(), logger: { trace() {} } };
  const activation = coresdk.workflow_activation.WorkflowActivation.create({
    runId: 'r1',
    jobs: [{ removeFromCache: { message: 'evicted by the test' } }],
  });
  const handle = (proto as { handleActivation: (...a: unknown[]) => Promise<Handled> }).handleActivation;
  return handle.call(self, undefined, { activation, synthetic: false });
}

/** The bytes the SDK would hand its core: the completion decoded back. */
function decoded(bytes: Uint8Array) {
  return coresdk.workflow_completion.WorkflowActivationCompletion.decodeDelimited(bytes);
}

describe('ownCompletionBytes', () => {
  it("the SDK's own handleActivation returns a completion that is a view of a larger pool buffer", async () => {
    // What the wrapper exists for: without it, each cached workflow's last completion pins a pool slab.
    const { output } = await evict(Worker.prototype);
    expect(output.completion).toBeInstanceOf(Uint8Array);
    expect(output.completion!.buffer.byteLength).toBeGreaterThan(output.completion!.byteLength);
  });

  it("wrapped, the SDK's handleActivation returns a copy of exactly the completion's bytes", async () => {
    const proto = Object.create(Worker.prototype);
    expect(ownCompletionBytes(proto)).toBe(true);
    const plain = await evict(Worker.prototype);
    const owned = await evict(proto);
    const bytes = owned.output.completion!;
    expect(bytes.buffer.byteLength).toBe(bytes.byteLength);
    expect(bytes.byteOffset).toBe(0);
    expect(Buffer.from(bytes).equals(Buffer.from(plain.output.completion!))).toBe(true);
    expect(decoded(bytes).runId).toBe('r1');
    expect(owned.output.close).toBe(true);
    expect(owned.state).toBeUndefined();
  });

  it('keeps state, close and a completion that already owns its buffer as they are', async () => {
    const workflow = { id: 'w' };
    const own = new Uint8Array([1, 2, 3]);
    const proto = {
      async handleActivation() {
        return { state: workflow, output: { close: false, completion: own } };
      },
    };
    ownCompletionBytes(proto);
    const r = (await proto.handleActivation()) as Handled;
    expect(r.state).toBe(workflow);
    expect(r.output).toEqual({ close: false, completion: own });
    expect(r.output.completion).toBe(own);
  });

  it('passes a missing completion (a synthetic eviction) through', async () => {
    const proto = {
      async handleActivation() {
        return { state: undefined, output: { close: true, completion: undefined } };
      },
    };
    ownCompletionBytes(proto);
    expect(await proto.handleActivation()).toEqual({ state: undefined, output: { close: true } });
  });

  it('wraps once however often it is called, and passes the arguments and this through', async () => {
    const calls: unknown[][] = [];
    const proto = {
      async handleActivation(this: unknown, ...args: unknown[]) {
        calls.push([this, ...args]);
        return { state: undefined, output: { close: true, completion: Buffer.from('abc') } };
      },
    };
    expect(ownCompletionBytes(proto)).toBe(true);
    const wrapped = proto.handleActivation;
    expect(ownCompletionBytes(proto)).toBe(true);
    expect(proto.handleActivation).toBe(wrapped);
    const self = {};
    await proto.handleActivation.call(self, 'workflow', 'activation');
    expect(calls).toEqual([[self, 'workflow', 'activation']]);
  });

  it('changes nothing and says so when there is no handleActivation', () => {
    const proto = {};
    expect(ownCompletionBytes(proto)).toBe(false);
    expect(proto).toEqual({});
  });
});
