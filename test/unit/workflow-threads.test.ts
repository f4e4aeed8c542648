/**
 * src/workflow-thread-preload.cjs against the installed Temporal SDK: in a worker thread started with the
 * preload (as the operator's workflow thread is), the SDK's stack-trace promise hook is not installed
 * unless WORKFLOW_STACK_TRACES asks for it; and src/workflow-threads.ts hands the setting over. If an SDK
 * upgrade moves what the preload patches, the first test fails (and stack traces would stay on). The
 * preload also drops the deadlock watchdog (the `vm` timeout) from the SDK's calls into the workflow
 * context that run no workflow code, and only from those: checked in a thread, and against the SDK's
 * real calls by replaying a golden history.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { Script } from 'node:vm';
import { Worker, type WorkerOptions } from 'node:worker_threads';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import type { temporal } from '@temporalio/proto';
import { Worker as TemporalWorker } from '@temporalio/worker';
import { afterEach, describe, expect, it } from 'vitest';
import { configureWorkflowStackTraces, WORKFLOW_STACK_TRACES_ENV } from '../../src/workflow-threads.js';
import { workflowBundle } from '../workflow/harness.js';

const PRELOAD = fileURLToPath(new URL('../../src/workflow-thread-preload.cjs', import.meta.url));

/** Runs `code` (CommonJS) in a fresh worker thread started with `options`; resolves with its first message. */
function firstMessage<T>(code: string, options: WorkerOptions): Promise<T> {
  const worker = new Worker(code, { ...options, eval: true });
  return new Promise((resolve, reject) => {
    worker.once('message', (m: T) => {
      resolve(m);
      void worker.terminate();
    });
    worker.once('error', reject);
  });
}

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
  return firstMessage<boolean>(code, { env: opts.env, execArgv: opts.preload ? ['--require', PRELOAD] : [] });
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

/**
 * In a fresh worker thread (with the preload or not): runs a script that spins for 300 ms under a 20 ms
 * `vm` timeout, the SDK's call name `fn` in the context's `__temporal_args` as the SDK sets it (none when
 * undefined); answers 'finished' or 'timed out'.
 */
function spinUnderTimeout(opts: { preload: boolean; fn?: string }): Promise<string> {
  const code = `
    const { parentPort, workerData } = require('node:worker_threads');
    const vm = require('node:vm');
    const context = vm.createContext({});
    if (workerData.fn !== undefined) context.__temporal_args = [{}, workerData.fn, []];
    const spin = new vm.Script('const until = Date.now() + 300; while (Date.now() < until) {}');
    try {
      spin.runInContext(context, { timeout: 20 });
      parentPort.postMessage('finished');
    } catch (err) {
      parentPort.postMessage(/timed out/.test(err.message) ? 'timed out' : err.message);
    }
  `;
  return firstMessage<string>(code, {
    workerData: { fn: opts.fn },
    execArgv: opts.preload ? ['--require', PRELOAD] : [],
  });
}

describe('the deadlock watchdog on the SDK-only calls into the workflow context', () => {
  it('in a thread with the preload, concludeActivation and dispose run without the vm timeout; workflow-code calls keep it', async () => {
    expect(await spinUnderTimeout({ preload: false, fn: 'concludeActivation' })).toBe('timed out');
    expect(await spinUnderTimeout({ preload: true, fn: 'concludeActivation' })).toBe('finished');
    expect(await spinUnderTimeout({ preload: true, fn: 'dispose' })).toBe('finished');
    for (const fn of ['activate', 'tryUnblockConditions', 'initialize', 'initRuntime', undefined])
      expect(await spinUnderTimeout({ preload: true, fn })).toBe('timed out');
  });

  it("the SDK's real calls, replaying a golden hibernate: concludeActivation untimed, activate and tryUnblockConditions timed", async () => {
    // Records what reaches Node's runInContext (under the preload's patch): the SDK's call name and whether
    // it carries a timeout.
    const original = Script.prototype.runInContext;
    const seen = new Map<string, { timed: number; untimed: number }>();
    Script.prototype.runInContext = function recorded(this: Script, context, options) {
      const fn = (context as { __temporal_args?: unknown[] } | undefined)?.__temporal_args?.[1];
      if (typeof fn === 'string') {
        const n = seen.get(fn) ?? { timed: 0, untimed: 0 };
        if (options?.timeout === undefined) n.untimed++;
        else n.timed++;
        seen.set(fn, n);
      }
      return original.call(this, context, options);
    };
    try {
      createRequire(import.meta.url)(PRELOAD).skipWatchdogOnSdkOnlyCalls();
      const root = fileURLToPath(new URL('../replay/histories/', import.meta.url));
      const folder = readdirSync(root).sort().at(-1)!;
      const history = historyFromJSON(
        JSON.parse(readFileSync(`${root}${folder}/vm-hibernate.json`, 'utf8')),
      ) as temporal.api.history.v1.IHistory;
      await TemporalWorker.runReplayHistory({ workflowBundle: await workflowBundle() }, history);
    } finally {
      Script.prototype.runInContext = original;
    }
    expect(seen.get('concludeActivation')).toMatchObject({ timed: 0 });
    expect(seen.get('concludeActivation')?.untimed).toBeGreaterThan(0);
    expect(seen.get('activate')).toMatchObject({ untimed: 0 });
    expect(seen.get('activate')?.timed).toBeGreaterThan(0);
    expect(seen.get('tryUnblockConditions')).toMatchObject({ untimed: 0 });
    expect(seen.get('initialize')).toMatchObject({ untimed: 0 });
  }, 60_000);
});
