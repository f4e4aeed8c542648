/**
 * A KubeConfig that counts the Kubernetes API requests made through it, so a benchmark can report what
 * the operator (its activities and its watcher) asks of the apiserver, apart from the benchmark's own
 * setup traffic (which uses a separate, uncounted KubeConfig).
 *
 * client-node 1.4 calls `applySecurityAuthentication` once per typed-API request (with the request's
 * method and URL) and `applyToFetchOptions` once per `Watch.watch` (no URL), so overriding those two
 * sees every request the product makes.
 */
import { KubeConfig, type RequestContext } from '@kubernetes/client-node';

/** Request counts by class. `byKey` is keyed `METHOD resource[/subresource]` (e.g. `PATCH pods`). */
export interface KubeRequestCounts {
  /** All requests, watches included. */
  total: number;
  /** GETs of a collection (paginated list pages count one each). */
  lists: number;
  /** Watch requests opened. */
  watches: number;
  /** Every other request (reads of one object and all writes). */
  other: number;
  byKey: Record<string, number>;
}

/** Resource (and subresource) of an API path: `/api/v1/namespaces/x/pods/p/status` → `pods/status`. */
function classify(url: string): { resource: string; collection: boolean } {
  const path = new URL(url).pathname.split('/').filter(Boolean);
  // /api/v1/... or /apis/<group>/<version>/...
  let rest = path[0] === 'api' ? path.slice(2) : path.slice(3);
  if (rest[0] === 'namespaces' && rest.length >= 3) rest = rest.slice(2);
  const resource = rest[0] ?? '(root)';
  const collection = rest.length <= 1;
  const sub = rest.length >= 3 ? `/${rest[2]}` : '';
  return { resource: `${resource}${sub}`, collection };
}

/** See the module comment. Load it like any KubeConfig (`loadFromFile`). */
export class CountingKubeConfig extends KubeConfig {
  private counts: KubeRequestCounts = { total: 0, lists: 0, watches: 0, other: 0, byKey: {} };

  override async applySecurityAuthentication(context: RequestContext): Promise<void> {
    const method = String(context.getHttpMethod());
    const { resource, collection } = classify(context.getUrl());
    this.counts.total++;
    if (method === 'GET' && collection) this.counts.lists++;
    else this.counts.other++;
    const key = `${method === 'GET' && collection ? 'LIST' : method} ${resource}`;
    this.counts.byKey[key] = (this.counts.byKey[key] ?? 0) + 1;
    return super.applySecurityAuthentication(context);
  }

  override async applyToFetchOptions(
    opts: Parameters<KubeConfig['applyToFetchOptions']>[0],
  ): ReturnType<KubeConfig['applyToFetchOptions']> {
    this.counts.total++;
    this.counts.watches++;
    this.counts.byKey.WATCH = (this.counts.byKey.WATCH ?? 0) + 1;
    return super.applyToFetchOptions(opts);
  }

  /** A copy of the counts so far. */
  snapshot(): KubeRequestCounts {
    return { ...this.counts, byKey: { ...this.counts.byKey } };
  }
}

/** `after − before`, field by field (keys missing on one side count 0). */
export function diffCounts(after: KubeRequestCounts, before: KubeRequestCounts): KubeRequestCounts {
  const byKey: Record<string, number> = {};
  for (const k of new Set([...Object.keys(after.byKey), ...Object.keys(before.byKey)])) {
    const d = (after.byKey[k] ?? 0) - (before.byKey[k] ?? 0);
    if (d !== 0) byKey[k] = d;
  }
  return {
    total: after.total - before.total,
    lists: after.lists - before.lists,
    watches: after.watches - before.watches,
    other: after.other - before.other,
    byKey,
  };
}
