/**
 * The production {@link WatchSource}s: paginated lists through the typed client-node 1.4 APIs and watches
 * through client-node's `Watch` (bookmarks on, a server-side timeout so the apiserver ends each watch
 * cleanly now and then, as client-go's reflector does). Every object they deliver has its managedFields
 * stripped (src/kube/client.ts `stripManagedFields`): the informers cache what these return.
 */
import { type KubernetesObject, type V1Pod, Watch } from '@kubernetes/client-node';
// Not re-exported from the package index; used so watched pods have the same typed shape (Dates, models)
// as pods read through CoreV1Api, whichever path filled the cache.
import { ObjectSerializer } from '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
import { GROUP, PLURAL_COCOONHIBERNATIONS, PLURAL_COCOONSETS, VERSION } from '../api/keys.js';
import type { CocoonHibernation, CocoonSet } from '../api/types.js';
import { type KubeClients, stripManagedFields } from '../kube/client.js';
import type { ListResult, WatchEventType, WatchHandle, WatchSource } from './informer.js';

/** Page size of list calls. */
export const LIST_PAGE_SIZE = 500;
/** The apiserver ends each watch after a random 5–10 min (client-go's reflector range). */
const WATCH_TIMEOUT_MIN_S = 300;

interface Page<T> {
  items: T[];
  metadata?: { resourceVersion?: string; _continue?: string; continue?: string };
}

/**
 * Builds a WatchSource from a page fetcher and a watch path. `decode` turns a raw watch object into the
 * shape the lister returns; `watchQuery` adds query parameters to the watch (e.g. the lister's
 * `fieldSelector`).
 */
export function kubeWatchSource<T extends KubernetesObject>(
  kube: KubeClients,
  watchPath: string,
  listPage: (cont: string | undefined) => Promise<Page<T>>,
  decode: (raw: unknown) => T = (raw) => raw as T,
  watchQuery: Record<string, string> = {},
): WatchSource<T> {
  const watcher = new Watch(kube.kc);
  return {
    async list(): Promise<ListResult<T>> {
      const items: T[] = [];
      let cont: string | undefined;
      let resourceVersion = '';
      do {
        const page = await listPage(cont);
        for (const item of page.items ?? []) items.push(stripManagedFields(item));
        resourceVersion = page.metadata?.resourceVersion ?? resourceVersion;
        cont = page.metadata?._continue ?? page.metadata?.continue;
      } while (cont);
      return { items, resourceVersion };
    },
    async watch(resourceVersion, onEvent, onDone): Promise<WatchHandle> {
      const timeoutSeconds = WATCH_TIMEOUT_MIN_S + Math.floor(Math.random() * WATCH_TIMEOUT_MIN_S);
      const controller = await watcher.watch(
        watchPath,
        {
          ...watchQuery,
          allowWatchBookmarks: true,
          resourceVersion: resourceVersion || undefined,
          timeoutSeconds,
        },
        (type: string, obj: unknown) => {
          const t = type as WatchEventType;
          onEvent(t, t === 'ERROR' || t === 'BOOKMARK' ? obj : stripManagedFields(decode(obj)));
        },
        onDone,
      );
      return { abort: () => controller.abort() };
    },
  };
}

/** Pods in `namespace` ('' = all namespaces), optionally only those matching `fieldSelector`. */
export function podSource(kube: KubeClients, namespace = '', fieldSelector?: string): WatchSource<V1Pod> {
  const path = namespace ? `/api/v1/namespaces/${namespace}/pods` : '/api/v1/pods';
  const page = { limit: LIST_PAGE_SIZE, fieldSelector };
  return kubeWatchSource<V1Pod>(
    kube,
    path,
    (cont) =>
      namespace
        ? kube.core.listNamespacedPod({ namespace, ...page, _continue: cont })
        : kube.core.listPodForAllNamespaces({ ...page, _continue: cont }),
    (raw) => ObjectSerializer.deserialize(raw, 'V1Pod', '') as V1Pod,
    fieldSelector === undefined ? {} : { fieldSelector },
  );
}

/** Custom objects of `plural` in group cocoonset.cocoonstack.io/v1, in `namespace` ('' = all). */
export function customSource<T extends KubernetesObject>(
  kube: KubeClients,
  plural: string,
  namespace = '',
): WatchSource<T> {
  const base = `/apis/${GROUP}/${VERSION}`;
  const path = namespace ? `${base}/namespaces/${namespace}/${plural}` : `${base}/${plural}`;
  return kubeWatchSource<T>(kube, path, async (cont) => {
    const req = { group: GROUP, version: VERSION, plural, limit: LIST_PAGE_SIZE, _continue: cont };
    const page = namespace
      ? await kube.custom.listNamespacedCustomObject({ ...req, namespace })
      : await kube.custom.listClusterCustomObject(req);
    return page as Page<T>;
  });
}

/** CocoonHibernations in `namespace` ('' = all). */
export function hibernationSource(kube: KubeClients, namespace = ''): WatchSource<CocoonHibernation> {
  return customSource<CocoonHibernation & KubernetesObject>(kube, PLURAL_COCOONHIBERNATIONS, namespace);
}

/** CocoonSets in `namespace` ('' = all). */
export function cocoonSetSource(kube: KubeClients, namespace = ''): WatchSource<CocoonSet> {
  return customSource<CocoonSet & KubernetesObject>(kube, PLURAL_COCOONSETS, namespace);
}
