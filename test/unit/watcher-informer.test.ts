import type { KubernetesObject } from '@kubernetes/client-node';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  Informer,
  type ListResult,
  type WatchEventType,
  type WatchHandle,
  type WatchSource,
} from '../../src/watcher/informer.js';
import { collectGarbage } from '../support/gc.js';

/** One watch the informer opened on the fake source. */
interface OpenWatch {
  resourceVersion: string;
  send(type: WatchEventType, obj: unknown): void;
  done(err?: unknown): void;
  aborted: boolean;
}

/** Fake of the informer's one boundary: scripted lists, watches the test drives by hand. */
class FakeSource implements WatchSource<KubernetesObject> {
  lists: Array<ListResult<KubernetesObject> | Error> = [];
  listCalls = 0;
  watches: OpenWatch[] = [];
  failOpen?: Error;

  async list(): Promise<ListResult<KubernetesObject>> {
    this.listCalls++;
    const next = this.lists.length > 1 ? this.lists.shift() : this.lists[0];
    if (!next) throw new Error('no list scripted');
    if (next instanceof Error) throw next;
    return structuredClone(next);
  }

  async watch(
    resourceVersion: string,
    onEvent: (type: WatchEventType, obj: unknown) => void,
    onDone: (err?: unknown) => void,
  ): Promise<WatchHandle> {
    if (this.failOpen) throw this.failOpen;
    const w: OpenWatch = {
      resourceVersion,
      aborted: false,
      send: (t, o) => onEvent(t, o),
      done: (e) => onDone(e),
    };
    this.watches.push(w);
    return {
      abort: () => {
        w.aborted = true;
      },
    };
  }

  get last(): OpenWatch {
    const w = this.watches[this.watches.length - 1];
    if (!w) throw new Error('no watch open');
    return w;
  }
}

const obj = (name: string, rv: string, extra: Record<string, unknown> = {}): KubernetesObject =>
  ({ metadata: { name, namespace: 'ns', resourceVersion: rv }, ...extra }) as KubernetesObject;

const log = pino({ level: 'silent' });
const tick = (ms = 0) => vi.advanceTimersByTimeAsync(ms);

function setup(opts: { stallTimeoutMs?: number; healthyAfterMs?: number; defaultBackoff?: boolean } = {}) {
  const source = new FakeSource();
  const inf = new Informer<KubernetesObject>({
    name: 'test',
    source,
    log,
    stallTimeoutMs: opts.stallTimeoutMs ?? 60_000,
    backoff: opts.defaultBackoff
      ? undefined
      : { initialMs: 200, maxMs: 30_000, healthyAfterMs: opts.healthyAfterMs ?? 10_000 },
  });
  const events: string[] = [];
  inf.on('add', (o) => events.push(`add ${o.metadata?.name}@${o.metadata?.resourceVersion}`));
  inf.on('update', (o, old) =>
    events.push(
      `update ${o.metadata?.name}@${old?.metadata?.resourceVersion}->${o.metadata?.resourceVersion}`,
    ),
  );
  inf.on('delete', (o) => events.push(`delete ${o.metadata?.name}`));
  return { source, inf, events };
}

describe('Informer', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  let stopMe: Informer<KubernetesObject> | undefined;
  afterEach(async () => {
    await stopMe?.stop();
    stopMe = undefined;
    vi.useRealTimers();
  });

  it('lists, reports synced, fills the cache and watches from the list resourceVersion', async () => {
    const { source, inf, events } = setup();
    stopMe = inf;
    source.lists = [{ items: [obj('a', '5'), obj('b', '6')], resourceVersion: '10' }];
    expect(inf.synced()).toBe(false);
    inf.start();
    await tick();
    expect(inf.synced()).toBe(true);
    expect(events).toEqual(['add a@5', 'add b@6']);
    expect(inf.get('ns', 'a')?.metadata?.resourceVersion).toBe('5');
    expect(source.watches).toHaveLength(1);
    expect(source.last.resourceVersion).toBe('10');
  });

  it('holds the whole list in its cache before the first list event goes out, and says so (listed)', async () => {
    const { source, inf } = setup();
    stopMe = inf;
    source.lists = [{ items: [obj('a', '5'), obj('b', '6')], resourceVersion: '10' }];
    const seenAtFirstEvent: Array<[boolean, string | undefined]> = [];
    inf.on('add', () => {
      if (seenAtFirstEvent.length === 0)
        seenAtFirstEvent.push([inf.listed(), inf.get('ns', 'b')?.metadata?.name]);
    });
    expect(inf.listed()).toBe(false);
    inf.start();
    await tick();
    expect(seenAtFirstEvent).toEqual([[true, 'b']]);
  });

  it('keeps no reference to a list once applied: objects the watch has since replaced can be collected', async () => {
    // The watch loop's frame lives as long as the informer; a list held there would keep a second copy of
    // every object the watch replaced since (an operator restarted beside 1000 pods: ~2 MiB).
    const { source, inf } = setup();
    stopMe = inf;
    source.lists = [{ items: [obj('a', '5'), obj('b', '6')], resourceVersion: '10' }];
    const listed: Array<WeakRef<object>> = [];
    const list = source.list.bind(source);
    source.list = async () => {
      const result = await list();
      listed.push(new WeakRef(result), ...result.items.map((o) => new WeakRef(o)));
      return result;
    };
    inf.start();
    await tick();
    source.last.send('MODIFIED', obj('a', '7'));
    source.last.send('MODIFIED', obj('b', '8'));
    await tick();
    expect(inf.get('ns', 'a')?.metadata?.resourceVersion).toBe('7');
    collectGarbage();
    expect(listed.map((ref) => ref.deref() === undefined)).toEqual([true, true, true]);
  });

  it('applies watch events to the cache and calls handlers with the old object', async () => {
    const { source, inf, events } = setup();
    stopMe = inf;
    source.lists = [{ items: [obj('a', '5')], resourceVersion: '10' }];
    inf.start();
    await tick();
    source.last.send('ADDED', obj('c', '11'));
    source.last.send('MODIFIED', obj('a', '12'));
    source.last.send('DELETED', obj('c', '13'));
    expect(events.slice(1)).toEqual(['add c@11', 'update a@5->12', 'delete c']);
    expect(inf.list().map((o) => o.metadata?.name)).toEqual(['a']);
    expect(inf.stats().events).toBe(3);
  });

  it('resumes from the last bookmark after a clean watch end, without relisting', async () => {
    const { source, inf } = setup();
    stopMe = inf;
    source.lists = [{ items: [], resourceVersion: '10' }];
    inf.start();
    await tick();
    source.last.send('BOOKMARK', { metadata: { resourceVersion: '42' } });
    source.last.done();
    await tick(200);
    expect(source.watches).toHaveLength(2);
    expect(source.last.resourceVersion).toBe('42');
    expect(source.listCalls).toBe(1);
    expect(inf.stats()).toMatchObject({ bookmarks: 1, restarts: 1, lists: 1 });
  });

  it('relists on a 410 ERROR event and delivers the diff (gone → delete, changed → update, same → nothing)', async () => {
    const { source, inf, events } = setup();
    stopMe = inf;
    source.lists = [
      { items: [obj('a', '5'), obj('b', '6'), obj('c', '7')], resourceVersion: '10' },
      { items: [obj('a', '5'), obj('b', '20'), obj('d', '21')], resourceVersion: '30' },
    ];
    inf.start();
    await tick();
    events.length = 0;
    source.last.send('ERROR', {
      kind: 'Status',
      code: 410,
      reason: 'Expired',
      message: 'too old resource version',
    });
    await tick();
    expect(source.listCalls).toBe(2);
    expect(events).toEqual(['update b@6->20', 'add d@21', 'delete c']);
    expect(source.last.resourceVersion).toBe('30');
    expect(inf.stats().gone).toBe(1);
  });

  it('relists when the watch request itself fails with HTTP 410', async () => {
    const { source, inf } = setup();
    stopMe = inf;
    source.lists = [{ items: [], resourceVersion: '10' }];
    inf.start();
    await tick();
    source.last.done(Object.assign(new Error('Gone'), { statusCode: 410 }));
    await tick();
    expect(source.listCalls).toBe(2);
  });

  it('restarts after any other error from the last resourceVersion, with exponential backoff up to the ceiling', async () => {
    const { source, inf } = setup();
    stopMe = inf;
    source.lists = [{ items: [], resourceVersion: '10' }];
    inf.start();
    await tick();
    const delays: number[] = [];
    for (let i = 0; i < 10; i++) {
      const before = source.watches.length;
      source.last.done(new Error('connection reset'));
      let waited = 0;
      while (source.watches.length === before) {
        await tick(100);
        waited += 100;
      }
      delays.push(waited);
    }
    expect(delays).toEqual([200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
    expect(source.listCalls).toBe(1);
    expect(source.last.resourceVersion).toBe('10');
  });

  it('resets the backoff after a watch stayed healthy', async () => {
    const { source, inf } = setup({ healthyAfterMs: 10_000 });
    stopMe = inf;
    source.lists = [{ items: [], resourceVersion: '10' }];
    inf.start();
    await tick();
    source.last.done(new Error('x'));
    await tick(200);
    source.last.done(new Error('x'));
    await tick(400);
    expect(source.watches).toHaveLength(3);
    await tick(10_000); // healthy now
    source.last.done(new Error('x'));
    await tick(200);
    expect(source.watches).toHaveLength(4);
  });

  it('restarts when the watch reports an ERROR that is not 410, without relisting', async () => {
    const { source, inf } = setup();
    stopMe = inf;
    source.lists = [{ items: [], resourceVersion: '10' }];
    inf.start();
    await tick();
    source.last.send('ERROR', { kind: 'Status', code: 500, message: 'internal error' });
    expect(source.watches[0]?.aborted).toBe(true);
    await tick(200);
    expect(source.watches).toHaveLength(2);
    expect(source.listCalls).toBe(1);
  });

  it('detects a silent stalled watch (no event, no bookmark) and restarts it', async () => {
    const { source, inf } = setup({ stallTimeoutMs: 60_000 });
    stopMe = inf;
    source.lists = [{ items: [], resourceVersion: '10' }];
    inf.start();
    await tick();
    await tick(40_000);
    source.last.send('BOOKMARK', { metadata: { resourceVersion: '11' } });
    await tick(40_000); // 80 s since open, 40 s since the bookmark: alive
    expect(source.watches).toHaveLength(1);
    await tick(20_000); // 60 s of silence
    expect(source.watches[0]?.aborted).toBe(true);
    expect(inf.stats().stalls).toBe(1);
    await tick(200);
    expect(source.watches).toHaveLength(2);
    expect(source.last.resourceVersion).toBe('11');
  });

  it('retries a failed list with backoff and stays unsynced until a list succeeds', async () => {
    const { source, inf } = setup();
    stopMe = inf;
    source.lists = [
      new Error('apiserver down'),
      new Error('apiserver down'),
      { items: [obj('a', '1')], resourceVersion: '2' },
    ];
    inf.start();
    await tick();
    expect(inf.synced()).toBe(false);
    await tick(200);
    expect(inf.synced()).toBe(false);
    await tick(400);
    expect(inf.synced()).toBe(true);
    expect(inf.stats()).toMatchObject({ listFailures: 2, lists: 1, cached: 1 });
  });

  it('treats a watch that cannot be opened as an error and keeps retrying', async () => {
    const { source, inf } = setup();
    stopMe = inf;
    source.lists = [{ items: [], resourceVersion: '10' }];
    source.failOpen = new Error('ECONNREFUSED');
    inf.start();
    await tick(200 + 400 + 800);
    expect(inf.stats().watchesStarted).toBe(4);
    source.failOpen = undefined;
    await tick(1600);
    expect(source.watches).toHaveLength(1);
  });

  it('restartWatch() ends the current watch; restartWatch(true) relists', async () => {
    const { source, inf } = setup();
    stopMe = inf;
    source.lists = [{ items: [], resourceVersion: '10' }];
    inf.start();
    await tick();
    inf.restartWatch();
    expect(source.watches[0]?.aborted).toBe(true);
    await tick(200);
    expect(source.watches).toHaveLength(2);
    expect(source.listCalls).toBe(1);
    inf.restartWatch(true);
    await tick(400);
    expect(source.listCalls).toBe(2);
  });

  it('keeps going when a handler throws', async () => {
    const { source, inf, events } = setup();
    stopMe = inf;
    inf.on('add', () => {
      throw new Error('boom');
    });
    source.lists = [{ items: [], resourceVersion: '10' }];
    inf.start();
    await tick();
    source.last.send('ADDED', obj('a', '11'));
    source.last.send('ADDED', obj('b', '12'));
    expect(events).toEqual(['add a@11', 'add b@12']);
  });

  it('stop() closes the watch, ends the loop and ignores late callbacks', async () => {
    const { source, inf, events } = setup();
    source.lists = [{ items: [], resourceVersion: '10' }];
    inf.start();
    await tick();
    const w = source.last;
    await inf.stop();
    expect(w.aborted).toBe(true);
    w.send('ADDED', obj('late', '99'));
    w.done(new Error('aborted'));
    await tick(60_000);
    expect(events).toEqual([]);
    expect(source.watches).toHaveLength(1);
  });
});

/** Waits (fake time, 50 ms steps) until the informer opens its next watch; returns the wait in ms. */
async function waitForNextWatch(source: FakeSource, before: number): Promise<number> {
  let waited = 0;
  while (source.watches.length === before) {
    await tick(50);
    waited += 50;
    if (waited > 120_000) throw new Error('no new watch within 120 s');
  }
  return waited;
}

describe('Informer restart policy after an apiserver outage', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  let stopMe: Informer<KubernetesObject> | undefined;
  afterEach(async () => {
    await stopMe?.stop();
    stopMe = undefined;
    vi.useRealTimers();
  });

  it('caps the restart delay at 1 s by default, so a returning apiserver is seen within a second', async () => {
    const { source, inf } = setup({ defaultBackoff: true });
    stopMe = inf;
    source.lists = [{ items: [], resourceVersion: '10' }];
    inf.start();
    await tick();
    const delays: number[] = [];
    for (let i = 0; i < 12; i++) {
      const before = source.watches.length;
      source.last.done(new Error('connect ECONNREFUSED'));
      delays.push(await waitForNextWatch(source, before));
    }
    expect(delays.slice(0, 4)).toEqual([200, 400, 800, 1000]);
    expect(Math.max(...delays)).toBe(1000);
  });

  it('relists at once on 410 Gone, without waiting out the backoff the outage built up', async () => {
    const { source, inf } = setup();
    stopMe = inf;
    source.lists = [{ items: [], resourceVersion: '10' }];
    inf.start();
    await tick();
    for (let i = 0; i < 6; i++) {
      const before = source.watches.length;
      source.last.done(new Error('connect ECONNREFUSED'));
      await waitForNextWatch(source, before); // backoff now at 12.8 s
    }
    source.lists = [{ items: [], resourceVersion: '50' }];
    source.last.send('ERROR', { kind: 'Status', code: 410, reason: 'Expired', message: 'too old' });
    await tick();
    expect(source.listCalls).toBe(2);
    expect(source.last.resourceVersion).toBe('50');
  });

  it('resets the backoff on a successful list: the next failure waits the first delay again', async () => {
    const { source, inf } = setup();
    stopMe = inf;
    source.lists = [{ items: [], resourceVersion: '10' }];
    inf.start();
    await tick();
    for (let i = 0; i < 6; i++) {
      const before = source.watches.length;
      source.last.done(new Error('connect ECONNREFUSED'));
      await waitForNextWatch(source, before);
    }
    source.last.done(Object.assign(new Error('Gone'), { statusCode: 410 }));
    await tick();
    expect(source.listCalls).toBe(2);
    const before = source.watches.length;
    source.last.done(new Error('connection reset'));
    expect(await waitForNextWatch(source, before)).toBe(200);
  });

  it('is unsynced from a watch failure until a watch is accepted or a list succeeds again', async () => {
    const { source, inf } = setup();
    stopMe = inf;
    source.lists = [{ items: [], resourceVersion: '10' }];
    inf.start();
    await tick();
    expect(inf.synced()).toBe(true);
    source.last.done(); // the server's timeout: a clean end is not a failure
    expect(inf.synced()).toBe(true);
    await tick(200);
    source.failOpen = new Error('connect ECONNREFUSED');
    source.last.done(new Error('socket hang up'));
    await tick();
    expect(inf.synced()).toBe(false);
    await tick(400 + 800);
    expect(inf.synced()).toBe(false);
    expect(inf.unsyncedForMs()).toBe(1200);
    let woke = false;
    void inf.waitForSync().then(() => {
      woke = true;
    });
    source.failOpen = undefined;
    await tick(1600);
    expect(inf.synced()).toBe(true);
    expect(inf.unsyncedForMs()).toBe(0);
    expect(woke).toBe(true);
    source.last.send('ERROR', { kind: 'Status', code: 410, reason: 'Expired', message: 'too old' });
    source.lists = [new Error('apiserver down'), { items: [], resourceVersion: '60' }];
    await tick();
    expect(inf.synced()).toBe(false);
    expect(source.listCalls).toBe(2);
    await tick(3200); // the backoff the outage built up (reset only by a successful list)
    expect(source.listCalls).toBe(3);
    expect(inf.synced()).toBe(true);
  });
});
