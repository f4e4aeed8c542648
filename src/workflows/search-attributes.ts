/**
 * Search attributes of the entity workflows, so `temporal workflow list --query` and the UI find an entity
 * by namespace, VM name and kind (all Keyword; registered by the stack, by compose and at start).
 *
 * Runs this version starts carry the identity attributes from their start (`identityAttributes`, set by
 * whoever signals-with-start: the watcher, the CocoonSet workflow's `cocoonSetAskVM`) and upsert one only
 * when it changes (a VM name learned later), so a transition costs no upsert: each upsert is a history
 * event and a visibility write, about a third of the Temporal server's CPU per transition when it ran on
 * every phase change (docs/performance.md#search-attributes). Runs an older version started (their input
 * without `searchAttributes: 'identity'`) keep publishing all four, CocoonPhase at every change, until they
 * continue as new; the first task of the next run removes their CocoonPhase.
 */
import {
  defineSearchAttributeKey,
  type SearchAttributePair,
  SearchAttributeType,
  type SearchAttributeUpdatePair,
} from '@temporalio/common';
import { upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import { SearchAttributes } from '../api/keys.js';

/** How a run publishes its search attributes (its start argument's `searchAttributes` field). */
export type SearchAttributeMode = 'identity' | undefined;

/** What an entity is, for its identity search attributes. `vmName` '' = not known yet (left unset). */
export interface EntityIdentity {
  namespace: string;
  vmName: string;
  kind: 'VM' | 'CocoonSet';
}

const keys = {
  namespace: defineSearchAttributeKey(SearchAttributes.namespace, SearchAttributeType.KEYWORD),
  vmName: defineSearchAttributeKey(SearchAttributes.vmName, SearchAttributeType.KEYWORD),
  phase: defineSearchAttributeKey(SearchAttributes.phase, SearchAttributeType.KEYWORD),
  kind: defineSearchAttributeKey(SearchAttributes.kind, SearchAttributeType.KEYWORD),
};

/**
 * The identity search attributes a start sets (`typedSearchAttributes` of a signal-with-start): namespace
 * and kind always, the VM name when known. Callable outside workflow code.
 */
export function identityAttributes(id: EntityIdentity): SearchAttributePair[] {
  const pairs: SearchAttributePair[] = [
    { key: keys.namespace, value: id.namespace },
    { key: keys.kind, value: id.kind },
  ];
  if (id.vmName !== '') pairs.push({ key: keys.vmName, value: id.vmName });
  return pairs;
}

/**
 * Publishes the run's search attributes, by its mode. `identity`: upserts those of `id` that differ from
 * the run's current ones (`workflowInfo().typedSearchAttributes`: the start's, or those continue-as-new
 * carried, plus upserts), and removes the CocoonPhase of an older run this one continues (known by the
 * `state.published` it carried); no command when nothing differs. Otherwise (a run an older version started): upserts all four when they differ from what
 * `state.published` records (a JSON key carried across continue-as-new). Workflow code only.
 */
export function publishSearchAttributes(
  mode: SearchAttributeMode,
  state: { published?: string },
  id: EntityIdentity,
  phase: string,
): void {
  if (mode === 'identity') {
    const have = workflowInfo().typedSearchAttributes;
    const updates: SearchAttributeUpdatePair[] = identityAttributes(id).filter(
      (p) => have.get(p.key as typeof keys.namespace) !== p.value,
    );
    if (state.published !== undefined) {
      // Carried from a run an older version started: the CocoonPhase it published goes.
      updates.push({ key: keys.phase, value: null });
      delete state.published;
    }
    if (updates.length) upsertSearchAttributes(updates);
    return;
  }
  const attrs = {
    [SearchAttributes.namespace]: [id.namespace],
    [SearchAttributes.vmName]: [id.vmName],
    [SearchAttributes.phase]: [phase],
    [SearchAttributes.kind]: [id.kind],
  };
  const key = JSON.stringify(attrs);
  if (key === state.published) return;
  state.published = key;
  upsertSearchAttributes(attrs);
}
