/**
 * Temporal workflow ids and task queue names. Every sender computes an entity workflow's id from the
 * object it saw, without reading anything (docs/architecture.md#entity-workflows).
 */
import { WorkflowAnnotations } from './keys.js';

/** Workflow id of the VM entity workflow for pod `<namespace>/<pod>`: `vm/<namespace>/<pod>`. */
export function vmWorkflowId(namespace: string, pod: string): string {
  return `vm/${namespace}/${pod}`;
}

/** Workflow id of the CocoonSet entity workflow: `cocoonset/<namespace>/<name>`. */
export function cocoonSetWorkflowId(namespace: string, name: string): string {
  return `cocoonset/${namespace}/${name}`;
}

/** Where the Temporal Web UI shows workflows: its base URL and the Temporal namespace. */
export interface TemporalUi {
  url: string;
  namespace: string;
}

/**
 * The annotations that name an object's entity workflow (keys in src/api/keys.ts WorkflowAnnotations):
 * always its id; with `ui`, also the UI page `<url>/namespaces/<namespace>/workflows/<id>` (the UI shows
 * the latest run of that id).
 */
export function workflowAnnotations(workflowId: string, ui?: TemporalUi): Record<string, string> {
  const out: Record<string, string> = { [WorkflowAnnotations.id]: workflowId };
  if (ui) {
    out[WorkflowAnnotations.url] =
      `${ui.url}/namespaces/${encodeURIComponent(ui.namespace)}/workflows/${encodeURIComponent(workflowId)}`;
  }
  return out;
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
