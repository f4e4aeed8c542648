/**
 * src/workflow-thread-preload.cjs against the installed Temporal SDK: in a worker thread started with the
 * preload (as the operator's workflow thread is), the SDK's stack-trace promise hook is not installed
 * unless WORKFLOW_STACK_TRACES asks for it; and src/workflow-threads.ts hands the setting over. If an SDK
 * upgrade moves what the preload patches, the first test fails (and stack traces would stay on).
 */
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { configureWorkflowStackTraces, WORKFLOW_STACK_TRACES_ENV } from '../../src/workflow-threads.js';

const PRELOAD = fileURLToPath(new URL('../../src/workflow-thread-preload.cjs', import.meta.url));

/**
 * In a fresh worker thread (with the preload or not, `env` as its environment): installs the SDK's global
 * workflow VM handlers, as the SDK's workflow thread does before running workflows, and answers whether
 * its stack-trace promise hook got installed.
 */
function sdkHookInstalled(opts: { preload: boolean; env: NodeJS.ProcessEnv }): Promise<boolean> {
  const code = `
    const { parentPort } = require('node:worker_threads');
    const { globalHandlers } = require('@temporalio/worker/lib/workflow/vm-shared.js');
    globalHandlers.install();
    parentPort.postMessage(globalHandlers.promiseHookInstalled);
  `;
  const worker = new Worker(code, {
    eval: true,
    env: opts.env,
    execArgv: opts.preload ? ['--require', PRELOAD] : [],
  });
  return new Promise((resolve, reject) => {
    worker.once('message', (installed: boolean) => {
      resolve(installed);
      void worker.terminate();
    });
    worker.once('error', reject);
  });
}

describe('workflow stack traces (WORKFLOW_STACK_TRACES)', () => {
  const saved = process.env[WORKFLOW_STACK_TRACES_ENV];
  afterEach(() => {
    if (saved === undefined) delete process.env[WORKFLOW_STACK_TRACES_ENV];
    else process.env[WORKFLOW_STACK_TRACES_ENV] = saved;
  });

  it('the preload keeps the SDK from installing its per-promise stack hook in a worker thread, unless asked for', async () => {
    expect(await sdkHookInstalled({ preload: false, env: {} })).toBe(true);
    expect(await sdkHookInstalled({ preload: true, env: {} })).toBe(false);
    expect(await sdkHookInstalled({ preload: true, env: { [WORKFLOW_STACK_TRACES_ENV]: 'false' } })).toBe(
      false,
    );
    expect(await sdkHookInstalled({ preload: true, env: { [WORKFLOW_STACK_TRACES_ENV]: 'true' } })).toBe(
      true,
    );
  });

  it('configureWorkflowStackTraces hands the setting to threads started later and says what they will do', async () => {
    // This process was started without the preload: stack traces stay on whatever is wanted.
    expect(configureWorkflowStackTraces(false)).toEqual({ recorded: true, preloaded: false });
    expect(process.env[WORKFLOW_STACK_TRACES_ENV]).toBe('false');
    // A thread started now (with the preload, env inherited from process.env) skips the hook.
    expect(await sdkHookInstalled({ preload: true, env: process.env })).toBe(false);
    expect(configureWorkflowStackTraces(true)).toEqual({ recorded: true, preloaded: false });
    expect(await sdkHookInstalled({ preload: true, env: process.env })).toBe(true);
  });
});
