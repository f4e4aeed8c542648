/**
 * Temporal workflow ids and task queue names. Every sender computes an entity workflow's id from the
 * object it saw, without reading anything (DESIGN.md §2 "Workflow ids").
 */

/** Workflow id of the VM entity workflow for pod `<namespace>/<pod>`: `vm/<namespace>/<pod>`. */
export function vmWorkflowId(namespace: string, pod: string): string {
  return `vm/${namespace}/${pod}`;
}

/** Workflow id of the CocoonSet entity workflow: `cocoonset/<namespace>/<name>`. */
export function cocoonSetWorkflowId(namespace: string, name: string): string {
  return `cocoonset/${namespace}/${name}`;
}

/** Task queues derived from the base queue (TEMPORAL_TASK_QUEUE, default `cocoon-operator`). */
export function taskQueues(base: string): {
  workflows: string;
  hibernationRegistry: string;
  cocoonSetRegistry: string;
} {
  return {
    workflows: base,
    hibernationRegistry: `${base}-hibernation-registry`,
    cocoonSetRegistry: `${base}-cocoonset-registry`,
  };
}
