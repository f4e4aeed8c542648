/**
 * The Node side of the fake worlds (test/unit/plan-world.ts, test/workflow/cocoonset-world.ts): the answer
 * of a label-selector Node List, as the pass's `anyNode` asks it.
 */

/**
 * Whether any of `nodes` (each a Node's labels; undefined: a cluster with a node for every selector) carries
 * every `k=v` of `selector` (equality terms joined by `,`, as the pass writes them).
 */
export function nodesMatch(nodes: Record<string, string>[] | undefined, selector: string): boolean {
  if (nodes === undefined) return true;
  const want = selector.split(',').map((kv) => kv.split('=') as [string, string]);
  return nodes.some((labels) => want.every(([k, v]) => labels[k] === v));
}
