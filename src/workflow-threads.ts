/**
 * Whether the Temporal SDK records workflow stack traces in this process's workflow threads
 * (src/workflow-thread-preload.cjs, the WORKFLOW_STACK_TRACES setting). Call before the first
 * `Worker.create` that runs workflows: the SDK starts its workflow thread there, and the thread's
 * environment is a copy of `process.env` at that moment.
 */

/** The environment variable the preload reads in each worker thread (private to this process). */
export const WORKFLOW_STACK_TRACES_ENV = 'COCOON_WORKFLOW_STACK_TRACES';

/** What the workflow threads started after this call will do. */
export interface WorkflowStackTraces {
  /** Stack traces are recorded (the SDK's default: asked for, or the preload is missing). */
  recorded: boolean;
  /** The process was started with the preload (`--require …/workflow-thread-preload.cjs`). */
  preloaded: boolean;
}

/**
 * Hands `wanted` (true = record stack traces, the SDK's default behaviour) to the workflow threads started
 * from now on. Returns what they will do: without the preload they record stack traces whatever is wanted.
 */
export function configureWorkflowStackTraces(wanted: boolean): WorkflowStackTraces {
  process.env[WORKFLOW_STACK_TRACES_ENV] = String(wanted);
  const preloaded =
    (globalThis as Record<symbol, unknown>)[Symbol.for('cocoon-operator.workflow-thread-preload')] === true;
  return { recorded: wanted || !preloaded, preloaded };
}
