/**
 * Preloaded into every thread of the operator process (`node --require ./dist/workflow-thread-preload.cjs`,
 * as the image, `npm start` and `npm run dev` start it; `--require` runs in worker threads too, `--import`
 * does not). In a worker thread (the Temporal SDK runs the workflow code in one) it turns off the SDK's
 * workflow stack traces unless the operator asked for them (WORKFLOW_STACK_TRACES, handed to the thread
 * by src/workflow-threads.ts through the thread's environment).
 *
 * Why: to answer the stack-trace query (the Temporal UI's Stack Trace tab, `temporal workflow stack`), the
 * SDK installs a V8 promise hook that records a source-mapped stack wherever workflow code creates a
 * promise. Measured with `npm run bench:activation`, that is about half of the CPU the worker spends on a
 * workflow task (docs/performance.md). Without the hook the SDK runs as on a runtime that has none (its
 * own fallback): the query answers "Workflow stack traces are not enabled on this worker"; nothing else
 * depends on it.
 *
 * How: the hook is installed by `GlobalHandlers#setPromiseHook` of the SDK's workflow VM module
 * (@temporalio/worker/lib/workflow/vm-shared.js, the same module instance the SDK loads in this thread);
 * that method becomes a no-op, so `promiseHookInstalled` stays false and the SDK tells its workflows that
 * stack traces are off. Only that hook: `v8.promiseHooks` itself is left alone (Node 20's
 * AsyncLocalStorage, which the SDK's cancellation scopes use, creates promise hooks through it). If a
 * future SDK moves the method, nothing is patched and stack traces stay on
 * (test/unit/workflow-threads.test.ts fails first). The main thread marks itself so src/workflow-threads.ts
 * can tell the preload ran.
 *
 * It also drops the SDK's deadlock watchdog from the two calls into the workflow context that run none of
 * the workflow's code (`skipWatchdogOnSdkOnlyCalls`). The SDK enters the context with a `vm` timeout
 * (`isolateExecutionTimeout`) on every call, and for each such call Node starts and joins a watchdog
 * thread: 0.1–0.25 ms of CPU per call on Node 24, three calls per activation. The watchdog stays on the
 * calls that run workflow code (`activate`, `tryUnblockConditions`, `initialize`, `initRuntime`), so a
 * workflow that never yields still fails its task as "Potential deadlock detected" and only it is stuck;
 * `concludeActivation` (takes the commands the activation produced) and `dispose` (the SDK's destructors)
 * are the SDK's own bounded code here (no workflow interceptors, no updates).
 */
'use strict';
const { isMainThread } = require('node:worker_threads');

/**
 * Keeps the Temporal SDK from installing its stack-trace promise hook in this thread (call before the SDK
 * creates its workflow VM). Returns whether it could.
 */
function skipWorkflowStackTraces() {
  const { GlobalHandlers } = require('@temporalio/worker/lib/workflow/vm-shared.js');
  if (typeof GlobalHandlers?.prototype?.setPromiseHook !== 'function') return false;
  GlobalHandlers.prototype.setPromiseHook = function skipped() {};
  return true;
}

/** The SDK's calls into the workflow context that run only SDK code (@temporalio/workflow worker-interface). */
const SDK_ONLY_CALLS = new Set(['concludeActivation', 'dispose']);

/**
 * Runs the SDK's `SDK_ONLY_CALLS` into the workflow context without the `vm` timeout (so without Node's
 * per-call watchdog thread); every other `runInContext` keeps its options. The SDK names the call in
 * `context.__temporal_args` (`[holder, fn, args]`) just before it enters the context
 * (@temporalio/worker/lib/workflow/reusable-vm.js); a call it does not name keeps its timeout, so an SDK
 * that changes this only loses the saving (test/unit/workflow-threads.test.ts fails first).
 */
function skipWatchdogOnSdkOnlyCalls() {
  const { Script } = require('node:vm');
  const runInContext = Script.prototype.runInContext;
  Script.prototype.runInContext = function runInContextSdkAware(context, options) {
    const args = options?.timeout !== undefined ? context?.__temporal_args : undefined;
    if (Array.isArray(args) && SDK_ONLY_CALLS.has(args[1])) {
      const { timeout, ...rest } = options;
      return runInContext.call(this, context, rest);
    }
    return runInContext.call(this, context, options);
  };
}

globalThis[Symbol.for('cocoon-operator.workflow-thread-preload')] = true;
if (!isMainThread) {
  if (process.env.COCOON_WORKFLOW_STACK_TRACES !== 'true') skipWorkflowStackTraces();
  skipWatchdogOnSdkOnlyCalls();
}

module.exports = { skipWorkflowStackTraces, skipWatchdogOnSdkOnlyCalls };
