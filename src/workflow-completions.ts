/**
 * The Temporal SDK's worker keeps, for every workflow in its cache, the last activation completion it
 * produced: `Worker#handleWorkflowActivations` folds one workflow's activations with rxjs `mergeScan`, and
 * the fold's accumulator, `{ state, output: { close, completion } }`, lives as long as the workflow stays
 * cached. That completion is protobufjs's `encodeDelimited(…).finish()`, a `Buffer.allocUnsafe` slice of
 * Node's shared buffer pool: slabs of `Buffer.poolSize` bytes, 64 KiB on Node 24 (the image's), 8 KiB on
 * Node 20. A slice keeps its whole slab alive, so the few hundred bytes an idle cached workflow holds pin up
 * to one slab each. Measured as shipped with 1000 VMs and a workflow cache of 1000: 320 slabs, 20 MiB of the
 * main thread's external memory (docs/performance.md#completions-that-pin-buffer-pool-slabs-session-39).
 */

/** The part of the SDK's `Worker` prototype this module wraps (a private method of @temporalio/worker 1.x). */
interface HandlesActivations {
  handleActivation?: (...args: unknown[]) => Promise<unknown>;
}

const WRAPPED = Symbol.for('cocoon-operator.own-completion-bytes');

/**
 * Wraps `workerPrototype.handleActivation` (pass `Worker.prototype` from @temporalio/worker, before the
 * first `Worker.create`) so that every completion it returns owns its bytes: a completion that is a view of
 * a larger buffer is replaced by a copy of exactly its length (`new Uint8Array(view)`); one that already
 * owns its buffer is left alone. The SDK hands the same bytes to its core either way (it copies them again
 * there), so only what the cache keeps changes. Idempotent. Returns false, changing nothing, when the
 * prototype has no such method (an SDK that moved it: test/unit/workflow-completions.test.ts fails first).
 */
export function ownCompletionBytes(workerPrototype: object): boolean {
  const proto = workerPrototype as HandlesActivations & { [WRAPPED]?: true };
  const handle = proto.handleActivation;
  if (typeof handle !== 'function') return false;
  if (proto[WRAPPED]) return true;
  proto.handleActivation = async function handleActivationOwningBytes(this: unknown, ...args: unknown[]) {
    const result = await handle.apply(this, args);
    const output = (result as { output?: { completion?: unknown } } | undefined)?.output;
    const completion = output?.completion;
    if (completion instanceof Uint8Array && completion.byteLength !== completion.buffer.byteLength) {
      output!.completion = new Uint8Array(completion);
    }
    return result;
  };
  proto[WRAPPED] = true;
  return true;
}

/**
 * True when `workerPrototype.handleActivation` is the wrapper {@link ownCompletionBytes} installs. The
 * operator logs it at start (`completionsOwnBytes` on the workflow-bundle line), where the process tests
 * check it: the wrapper lives in no test's worker but the shipped one.
 */
export function ownsCompletionBytes(workerPrototype: object): boolean {
  return (workerPrototype as { [WRAPPED]?: true })[WRAPPED] === true;
}
