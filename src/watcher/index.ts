/**
 * The watcher (docs/architecture.md#the-watcher): informers on CocoonHibernations and pods (and, with
 * `cocoonSets: true`, CocoonSets), a router that maps their relevant changes to entity-workflow signals,
 * and a dispatcher that delivers them with signal-with-start. Leader election is the caller's concern:
 * start this only while holding the Lease.
 */
import type { KubernetesObject, V1Pod } from '@kubernetes/client-node';
import type { Client } from '@temporalio/client';
import type { Logger } from 'pino';
import type { CocoonHibernation } from '../api/types.js';
import type { KubeClients } from '../kube/client.js';
import type { OwnWrites } from '../kube/own-writes.js';
import { Dispatcher, type DispatcherStats, type Signaller, temporalSignaller } from './dispatch.js';
import { type BackoffOptions, Informer, type InformerStats, type WatchSource } from './informer.js';
import { cocoonSetSource, hibernationSource, podSource } from './kube-source.js';
import {
  CocoonSetRoute,
  HibernationRoute,
  type ResourceKind,
  type Route,
  Router,
  type RouterStats,
} from './routes.js';

export type { Signaller } from './dispatch.js';
export { temporalSignaller } from './dispatch.js';
export type { WatchSource } from './informer.js';

export interface WatcherOptions {
  kube: KubeClients;
  client: Client;
  /** Task queue the entity workflows are started on. */
  taskQueue: string;
  /**
   * Namespace scope; '' or absent = all namespaces (the reference's cache scope,
   * docs/configuration.md#notes-on-some-settings).
   */
  namespace?: string;
  log: Logger;
  /** Replaces the Temporal delivery (tests). Default: temporalSignaller(client, taskQueue). */
  signaller?: Signaller;
  /** Also watch CocoonSets and route owned pods to CocoonSet workflows (off until that workflow exists). */
  cocoonSets?: boolean;
  /** Watch restart backoff and stall timeout, passed to every informer. */
  backoff?: BackoffOptions;
  stallTimeoutMs?: number;
  /** Deliveries in flight across workflows (default 32). */
  maxInFlight?: number;
  /** Replaces the Kubernetes list/watch per kind (tests). */
  sources?: Partial<Record<ResourceKind, WatchSource<KubernetesObject>>>;
  /**
   * The writes this process's activities made (src/kube/own-writes.ts): their echoes are not signalled
   * back to the workflow that wrote them. Absent: every change is signalled.
   */
  ownWrites?: OwnWrites;
}

/** Counters for tests and benchmarks. */
export interface WatcherStats {
  /** Informer events seen (adds, updates, deletes, including relist diffs). */
  eventsSeen: number;
  /** Signals delivered. */
  signalsSent: number;
  /** Candidate signals dropped as irrelevant (payload unchanged since the last one sent). */
  signalsDropped: number;
  /** Signals that could not be delivered after retries. */
  signalsFailed: number;
  /** Signals queued or in flight. */
  signalsPending: number;
  router: RouterStats;
  dispatcher: DispatcherStats;
  informers: Record<string, InformerStats>;
}

export interface Watcher {
  /** True while every informer is synced (see Informer.synced: current, not a one-time latch). */
  synced(): boolean;
  /** Names of the informers not synced now (e.g. `pods`), empty while synced. */
  unsynced(): string[];
  /** Resolves once synced. */
  waitForSync(): Promise<void>;
  /** Resolves when no signal is queued or in flight (tests). */
  idle(): Promise<void>;
  /** Ends every current watch so it restarts (after backoff) from its last resourceVersion. */
  restartWatches(relist?: boolean): void;
  stop(): Promise<void>;
  stats(): WatcherStats;
}

/** Longest an event waits for the answer of a write of ours to its object (a hung request), ms. */
const MAX_ECHO_WAIT_MS = 5_000;

function withTimeout(p: Promise<void>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    p,
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/**
 * Starts the informers and returns at once (check `synced()` / `waitForSync()` for readiness).
 * Errors of the Kubernetes API and of Temporal are retried and logged, never thrown.
 */
export async function startWatcher(opts: WatcherOptions): Promise<Watcher> {
  const log = opts.log.child({ component: 'watcher' });
  const ns = opts.namespace ?? '';
  const informerOpts = { log, backoff: opts.backoff, stallTimeoutMs: opts.stallTimeoutMs };
  const src = opts.sources ?? {};

  const make = (
    kind: ResourceKind,
    name: string,
    fallback: () => WatchSource<unknown>,
  ): Informer<KubernetesObject> =>
    new Informer<KubernetesObject>({
      ...informerOpts,
      name,
      source: src[kind] ?? (fallback() as WatchSource<KubernetesObject>),
    });
  const pods = make('pod', 'pods', () => podSource(opts.kube, ns));
  const hibernations = make('cocoonhibernation', 'cocoonhibernations', () =>
    hibernationSource(opts.kube, ns),
  );
  const informers: Array<[ResourceKind, Informer<KubernetesObject>]> = [
    ['cocoonhibernation', hibernations],
    ['pod', pods],
  ];
  const routes: Route[] = [new HibernationRoute()];
  if (opts.cocoonSets) {
    informers.push(['cocoonset', make('cocoonset', 'cocoonsets', () => cocoonSetSource(opts.kube, ns))]);
    routes.push(new CocoonSetRoute());
  }

  const router = new Router(routes, {
    pod: (namespace, name) => pods.get(namespace, name) as V1Pod | undefined,
    hibernation: (namespace, name) => hibernations.get(namespace, name) as CocoonHibernation | undefined,
    cachesListed: () => pods.listed() && hibernations.listed(),
    note: (msg, fields) => log.info(fields, msg),
    ownWrites: opts.ownWrites,
  });
  const dispatcher = new Dispatcher({
    signaller: opts.signaller ?? temporalSignaller(opts.client, opts.taskQueue),
    log,
    maxInFlight: opts.maxInFlight,
    onGiveUp: (sig) => router.forget(sig.key),
  });

  // Events of an object one of our activities is writing wait for that write's answer, so the router can
  // tell its echo (src/kube/own-writes.ts); later events of the same object queue behind them, in order.
  const held = new Map<string, Promise<void>>();
  for (const [kind, inf] of informers) {
    const handle =
      (type: 'add' | 'update' | 'delete') =>
      (obj: KubernetesObject, old?: KubernetesObject): void => {
        const routeNow = () => {
          for (const sig of router.route({ kind, type, obj, old })) dispatcher.enqueue(sig);
        };
        const namespace = obj.metadata?.namespace ?? '';
        const name = obj.metadata?.name ?? '';
        const key = `${kind}/${namespace}/${name}`;
        const writing = opts.ownWrites?.settled(kind, namespace, name);
        const before = held.get(key);
        if (!writing && !before) {
          routeNow();
          return;
        }
        const next = Promise.all([before, writing && withTimeout(writing, MAX_ECHO_WAIT_MS)])
          .then(routeNow)
          .catch((err) =>
            log.error({ err: String(err), kind, namespace, name }, 'routing a held event failed'),
          )
          .finally(() => {
            if (held.get(key) === next) held.delete(key);
          });
        held.set(key, next);
      };
    inf.on('add', handle('add'));
    inf.on('update', handle('update'));
    inf.on('delete', handle('delete'));
  }
  for (const [, inf] of informers) inf.start();
  log.info({ namespace: ns || '(all)', cocoonSets: !!opts.cocoonSets }, 'watcher started');

  return {
    synced: () => informers.every(([, inf]) => inf.synced()),
    unsynced: () => informers.filter(([, inf]) => !inf.synced()).map(([kind]) => kind),
    waitForSync: async () => {
      await Promise.all(informers.map(([, inf]) => inf.waitForSync()));
    },
    idle: async () => {
      while (held.size > 0) await Promise.all(held.values());
      await dispatcher.idle();
    },
    restartWatches: (relist = false) => {
      for (const [, inf] of informers) inf.restartWatch(relist);
    },
    stop: async () => {
      await Promise.all(informers.map(([, inf]) => inf.stop()));
      await dispatcher.stop();
      log.info('watcher stopped');
    },
    stats: () => {
      const r = router.stats();
      const d = dispatcher.stats();
      return {
        eventsSeen: r.events,
        signalsSent: d.sent,
        signalsDropped: r.dropped,
        signalsFailed: d.failed,
        signalsPending: d.pending,
        router: r,
        dispatcher: d,
        informers: Object.fromEntries(informers.map(([kind, inf]) => [kind, inf.stats()])),
      };
    },
  };
}
