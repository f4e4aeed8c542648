/**
 * A list+watch informer that keeps itself alive. client-node's own ListWatch re-lists on 410 but stops on
 * any other watch error, so this one owns the loop: list, watch from the list's resourceVersion with
 * bookmarks, relist at once on 410 Gone, restart on any error or end with exponential backoff (reset by a
 * successful list, capped at 1 s so an apiserver that comes back is seen within a second), and restart a
 * watch that has gone silent (no event and no bookmark) for too long.
 *
 * `synced()` is the informer's current state, not a one-time latch: true after a successful list or once a
 * watch is established, false from a watch failure (error, 410, stall) or a failed list until one of
 * those succeeds again, so readiness shows a blind watcher.
 *
 * The Kubernetes API is reached through one boundary, {@link WatchSource}, so the loop is unit-tested
 * against a fake source and run in production against {@link kubeWatchSource}.
 */
import type { KubernetesObject } from '@kubernetes/client-node';

/** The logging the informer does (a pino logger fits). */
export interface InformerLog {
  debug(fields: object, msg: string): void;
  info(fields: object, msg: string): void;
  warn(fields: object, msg: string): void;
  error(fields: object, msg: string): void;
}

/** One page-merged list: the objects and the collection resourceVersion to watch from. */
export interface ListResult<T> {
  items: T[];
  resourceVersion: string;
}

/** Watch event types the apiserver sends (`BOOKMARK` only when bookmarks were asked for). */
export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';

/** A running watch; `abort()` closes it (its `onDone` may still fire afterwards and is ignored). */
export interface WatchHandle {
  abort(): void;
}

/**
 * The informer's only boundary. `list()` returns the full collection (all pages). `watch()` opens a watch
 * from `resourceVersion` with bookmarks on and resolves once the server has accepted it (HTTP 200); it
 * calls `onEvent` per event and `onDone` exactly once when the watch ends, with the error if any (an HTTP
 * failure carries `statusCode`, e.g. 410). A watch that cannot be opened calls `onDone` before resolving,
 * or rejects.
 */
export interface WatchSource<T> {
  list(): Promise<ListResult<T>>;
  watch(
    resourceVersion: string,
    onEvent: (type: WatchEventType, obj: unknown) => void,
    onDone: (err?: unknown) => void,
  ): Promise<WatchHandle>;
}

/** Handler of an added, updated or deleted object. `old` is the cached object it replaces (update only). */
export type InformerHandler<T> = (obj: T, old?: T) => void;

export interface BackoffOptions {
  /** First restart delay, ms (default 200). */
  initialMs?: number;
  /** Ceiling, ms (default 1 000: a restarted apiserver is seen at most this long after it answers). */
  maxMs?: number;
  /** A watch that stayed open at least this long resets the delay to `initialMs` (default 30 000 ms). */
  healthyAfterMs?: number;
}

export interface InformerOptions<T> {
  /** Name used in logs and stats (e.g. `pods`, `cocoonhibernations`). */
  name: string;
  source: WatchSource<T>;
  log: InformerLog;
  backoff?: BackoffOptions;
  /** A watch with no event and no bookmark for this long is restarted (default 300 000 ms = 5 min). */
  stallTimeoutMs?: number;
}

/** Counters exposed for tests, logs and benchmarks. */
export interface InformerStats {
  lists: number;
  listFailures: number;
  watchesStarted: number;
  /** Watch ends and errors (anything that made the loop open a new watch). */
  restarts: number;
  /** Relists caused by 410 Gone / Expired. */
  gone: number;
  stalls: number;
  events: number;
  bookmarks: number;
  cached: number;
}

export const DEFAULT_BACKOFF_INITIAL_MS = 200;
export const DEFAULT_BACKOFF_MAX_MS = 1_000;
export const DEFAULT_HEALTHY_AFTER_MS = 30_000;
export const DEFAULT_STALL_TIMEOUT_MS = 5 * 60_000;

/** Why one watch ended. */
type WatchOutcome =
  | { kind: 'gone'; detail: string }
  | { kind: 'error'; detail: string }
  | { kind: 'end' }
  | { kind: 'stall' }
  | { kind: 'stopped' };

/** `namespace/name` of an object (`name` alone for cluster-scoped ones). */
export function objectKey(obj: KubernetesObject): string {
  const ns = obj.metadata?.namespace;
  const name = obj.metadata?.name ?? '';
  return ns ? `${ns}/${name}` : name;
}

/** True when an error or a watch ERROR object means the resourceVersion is too old (HTTP 410). */
export function isGone(err: unknown): boolean {
  const e = err as { statusCode?: unknown; code?: unknown; reason?: unknown } | undefined;
  return e?.statusCode === 410 || e?.code === 410 || e?.reason === 'Expired' || e?.reason === 'Gone';
}

function describe(err: unknown): string {
  if (err instanceof Error) return err.message;
  if (err && typeof err === 'object') {
    const s = err as { message?: unknown; code?: unknown };
    return `${String(s.message ?? 'watch error')} (code ${String(s.code ?? '?')})`;
  }
  return String(err);
}

/**
 * Exponential backoff state: `next()` returns the current delay and doubles it up to the ceiling;
 * `reset()` goes back to the first delay.
 */
export class Backoff {
  private current: number;
  constructor(
    private readonly initialMs: number,
    private readonly maxMs: number,
  ) {
    this.current = initialMs;
  }
  /** Delay to wait now, ms. */
  next(): number {
    const d = this.current;
    this.current = Math.min(this.maxMs, this.current * 2);
    return d;
  }
  /** Back to the first delay (after a successful list or a healthy period). */
  reset(): void {
    this.current = this.initialMs;
  }
}

/**
 * A self-healing informer with a local cache (key `namespace/name` → object). Call `on()` before
 * `start()`. Handlers run synchronously in event order; a throwing handler is logged and skipped.
 * After a relist, objects missing from the new list are delivered as deletions, new ones as adds and
 * changed ones (different resourceVersion) as updates, so consumers see a consistent diff.
 */
export class Informer<T extends KubernetesObject> {
  private readonly cache = new Map<string, T>();
  private readonly handlers: {
    add: InformerHandler<T>[];
    update: InformerHandler<T>[];
    delete: InformerHandler<T>[];
  } = { add: [], update: [], delete: [] };
  private readonly backoff: Backoff;
  private readonly healthyAfterMs: number;
  private readonly stallTimeoutMs: number;
  private readonly counters: Omit<InformerStats, 'cached'> = {
    lists: 0,
    listFailures: 0,
    watchesStarted: 0,
    restarts: 0,
    gone: 0,
    stalls: 0,
    events: 0,
    bookmarks: 0,
  };
  private isSynced = false;
  private listedOnce = false;
  /** Epoch ms since when the informer is not synced (undefined while synced). */
  private unsyncedAt: number | undefined = Date.now();
  private forceRelist = false;
  private stopped = true;
  private loop?: Promise<void>;
  /** Ends the current watch or backoff sleep early (set while one is pending). */
  private interrupt?: (o: WatchOutcome) => void;
  private syncWaiters: Array<() => void> = [];

  constructor(private readonly opts: InformerOptions<T>) {
    this.backoff = new Backoff(
      opts.backoff?.initialMs ?? DEFAULT_BACKOFF_INITIAL_MS,
      opts.backoff?.maxMs ?? DEFAULT_BACKOFF_MAX_MS,
    );
    this.healthyAfterMs = opts.backoff?.healthyAfterMs ?? DEFAULT_HEALTHY_AFTER_MS;
    this.stallTimeoutMs = opts.stallTimeoutMs ?? DEFAULT_STALL_TIMEOUT_MS;
  }

  /** Registers a handler. `update` receives `(new, old)`; `delete` receives the last known object. */
  on(event: 'add' | 'update' | 'delete', handler: InformerHandler<T>): void {
    this.handlers[event].push(handler);
  }

  /** Starts the list+watch loop in the background (idempotent). */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.loop = this.run();
  }

  /** Stops the loop and closes the watch; resolves when the loop has exited. The cache is kept. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.interrupt?.({ kind: 'stopped' });
    await this.loop;
    this.loop = undefined;
  }

  /**
   * Ends the current watch as if it had failed, so the loop restarts it (after backoff) from the last
   * resourceVersion. For operators and tests ("kill the watch"); `relist` forces a full list first.
   */
  restartWatch(relist = false): void {
    this.forceRelist ||= relist;
    this.interrupt?.({ kind: 'error', detail: 'restart requested' });
  }

  /**
   * True while the cache is known current: after a successful list or once a watch is established, until
   * a watch fails (error, 410 Gone, stall) or a list fails. A watch's clean end (the server's timeout)
   * does not count as a failure.
   */
  synced(): boolean {
    return this.isSynced;
  }

  /** How long (ms) the informer has not been synced; 0 while synced. */
  unsyncedForMs(): number {
    return this.unsyncedAt === undefined ? 0 : Date.now() - this.unsyncedAt;
  }

  /** Resolves when synced (immediately if it is now). */
  waitForSync(): Promise<void> {
    if (this.isSynced) return Promise.resolve();
    return new Promise((resolve) => this.syncWaiters.push(resolve));
  }

  /** Cached object by namespace and name. */
  get(namespace: string, name: string): T | undefined {
    return this.cache.get(namespace ? `${namespace}/${name}` : name);
  }

  /** All cached objects (a snapshot array). */
  list(): T[] {
    return [...this.cache.values()];
  }

  /** Loop counters and the cache size. */
  stats(): InformerStats {
    return { ...this.counters, cached: this.cache.size };
  }

  private async run(): Promise<void> {
    let resourceVersion = '';
    let needList = true;
    while (!this.stopped) {
      if (needList || this.forceRelist) {
        this.forceRelist = false;
        try {
          const listedAt = await this.relist();
          if (listedAt === null) return;
          resourceVersion = listedAt;
          needList = false;
          this.backoff.reset();
          this.setSynced(true);
        } catch (err) {
          this.counters.listFailures++;
          this.setSynced(false);
          const delay = this.backoff.next();
          this.opts.log.warn(
            { informer: this.opts.name, err: describe(err), delayMs: delay },
            'list failed; retrying',
          );
          await this.sleep(delay);
          continue;
        }
      }
      const openedAt = Date.now();
      const { outcome, lastResourceVersion } = await this.watchOnce(resourceVersion);
      if (lastResourceVersion) resourceVersion = lastResourceVersion;
      if (outcome.kind === 'stopped') return;
      this.counters.restarts++;
      if (outcome.kind !== 'end') this.setSynced(false);
      if (Date.now() - openedAt >= this.healthyAfterMs) this.backoff.reset();
      if (outcome.kind === 'stall') this.counters.stalls++;
      if (outcome.kind === 'gone') {
        // The resourceVersion is too old (e.g. after an apiserver restart): relist now, no backoff.
        this.counters.gone++;
        needList = true;
        this.opts.log.info(
          { informer: this.opts.name, detail: outcome.detail, resourceVersion },
          'watch expired; relisting',
        );
        continue;
      }
      const delay = this.backoff.next();
      const fields = { informer: this.opts.name, reason: outcome.kind, delayMs: delay, resourceVersion };
      if (outcome.kind === 'end') this.opts.log.debug(fields, 'watch ended; restarting');
      else
        this.opts.log.warn(
          { ...fields, detail: 'detail' in outcome ? outcome.detail : undefined },
          'watch restarting',
        );
      await this.sleep(delay);
    }
  }

  /**
   * Lists the whole collection and makes it the cache; returns the list's resourceVersion, or null when the
   * informer was stopped meanwhile (nothing applied). Throws what the source's `list()` throws. A method of
   * its own so the list is let go once applied: held in `run`'s frame, which lives as long as the
   * informer, it kept a second copy of every object the watch has replaced since.
   */
  private async relist(): Promise<string | null> {
    const listed = await this.opts.source.list();
    if (this.stopped) return null;
    this.counters.lists++;
    this.replace(listed.items);
    return listed.resourceVersion;
  }

  /** Records the sync state; wakes `waitForSync` callers when it turns true. */
  private setSynced(synced: boolean): void {
    if (synced === this.isSynced) return;
    this.isSynced = synced;
    this.unsyncedAt = synced ? undefined : Date.now();
    if (synced) for (const w of this.syncWaiters.splice(0)) w();
  }

  /** Waits `ms` unless stopped first. */
  private sleep(ms: number): Promise<void> {
    if (this.stopped) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.interrupt = undefined;
        resolve();
      }, ms);
      this.interrupt = (o) => {
        if (o.kind !== 'stopped') return; // a restart request during backoff changes nothing
        clearTimeout(timer);
        this.interrupt = undefined;
        resolve();
      };
    });
  }

  /** Runs one watch until it ends; reports why and the last resourceVersion seen (events and bookmarks). */
  private watchOnce(fromVersion: string): Promise<{ outcome: WatchOutcome; lastResourceVersion: string }> {
    return new Promise((resolve) => {
      let lastRV = fromVersion;
      let lastActivity = Date.now();
      let finished = false;
      let handle: WatchHandle | undefined;
      let stallTimer: ReturnType<typeof setTimeout> | undefined;

      const finish = (outcome: WatchOutcome): void => {
        if (finished) return;
        finished = true;
        if (stallTimer) clearTimeout(stallTimer);
        this.interrupt = undefined;
        handle?.abort();
        resolve({ outcome, lastResourceVersion: lastRV });
      };
      // One timer, re-armed for the remaining time when it fires, instead of one per event.
      const armStall = (delay: number): void => {
        stallTimer = setTimeout(() => {
          const idle = Date.now() - lastActivity;
          if (idle >= this.stallTimeoutMs) finish({ kind: 'stall' });
          else armStall(this.stallTimeoutMs - idle);
        }, delay);
      };

      this.interrupt = finish;
      this.counters.watchesStarted++;
      armStall(this.stallTimeoutMs);
      const onEvent = (type: WatchEventType, raw: unknown): void => {
        if (finished) return;
        lastActivity = Date.now();
        if (type === 'ERROR') {
          const detail = describe(raw);
          finish(isGone(raw) ? { kind: 'gone', detail } : { kind: 'error', detail });
          return;
        }
        const obj = raw as T;
        const rv = obj?.metadata?.resourceVersion;
        if (rv) lastRV = rv;
        if (type === 'BOOKMARK') {
          this.counters.bookmarks++;
          return;
        }
        this.counters.events++;
        this.apply(type, obj);
      };
      const onDone = (err?: unknown): void => {
        if (finished) return;
        if (err == null) finish({ kind: 'end' });
        else
          finish(
            isGone(err) ? { kind: 'gone', detail: describe(err) } : { kind: 'error', detail: describe(err) },
          );
      };
      this.opts.source.watch(fromVersion, onEvent, onDone).then(
        (h) => {
          handle = h;
          if (finished) h.abort();
          else this.setSynced(true); // the server accepted the watch: events flow again
        },
        (err) => onDone(err ?? new Error('watch failed to open')),
      );
    });
  }

  private apply(type: 'ADDED' | 'MODIFIED' | 'DELETED', obj: T): void {
    const key = objectKey(obj);
    const old = this.cache.get(key);
    if (type === 'DELETED') {
      this.cache.delete(key);
      this.emit('delete', obj);
      return;
    }
    this.cache.set(key, obj);
    if (old) this.emit('update', obj, old);
    else this.emit('add', obj);
  }

  /**
   * Applies a full list as a diff against the cache: the cache takes the whole list first, then the events
   * go out, so a handler reading the cache during them sees the complete list.
   */
  private replace(items: T[]): void {
    const seen = new Set<string>();
    const events: Array<['add' | 'update' | 'delete', T, T | undefined]> = [];
    for (const obj of items) {
      const key = objectKey(obj);
      seen.add(key);
      const old = this.cache.get(key);
      this.cache.set(key, obj);
      if (!old) events.push(['add', obj, undefined]);
      else if (old.metadata?.resourceVersion !== obj.metadata?.resourceVersion)
        events.push(['update', obj, old]);
    }
    for (const [key, old] of [...this.cache]) {
      if (seen.has(key)) continue;
      this.cache.delete(key);
      events.push(['delete', old, undefined]);
    }
    this.listedOnce = true;
    for (const [event, obj, old] of events) this.emit(event, obj, old);
  }

  /** True once the cache has held a complete list (the first list applied); stays true. */
  listed(): boolean {
    return this.listedOnce;
  }

  private emit(event: 'add' | 'update' | 'delete', obj: T, old?: T): void {
    for (const h of this.handlers[event]) {
      try {
        h(obj, old);
      } catch (err) {
        this.opts.log.error(
          { informer: this.opts.name, event, key: objectKey(obj), err: describe(err) },
          'handler threw',
        );
      }
    }
  }
}
