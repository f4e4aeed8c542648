/**
 * Search attributes the entity workflows publish, so `temporal workflow list --query` and the UI find an
 * entity by namespace, VM name, phase and kind (all Keyword; registered by the stack and by compose).
 */
import { upsertSearchAttributes } from '@temporalio/workflow';
import { SearchAttributes } from '../api/keys.js';

/**
 * Upserts the four attributes when they differ from what `state.published` records (a JSON key carried
 * across continue-as-new), so a steady workflow emits no command. Workflow code only.
 */
export function publishSearchAttributes(
  state: { published?: string },
  values: { namespace: string; vmName: string; phase: string; kind: 'VM' | 'CocoonSet' },
): void {
  const attrs = {
    [SearchAttributes.namespace]: [values.namespace],
    [SearchAttributes.vmName]: [values.vmName],
    [SearchAttributes.phase]: [values.phase],
    [SearchAttributes.kind]: [values.kind],
  };
  const key = JSON.stringify(attrs);
  if (key === state.published) return;
  state.published = key;
  upsertSearchAttributes(attrs);
}
