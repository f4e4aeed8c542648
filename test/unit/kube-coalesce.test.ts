/**
 * FreshReadCoalescer (src/kube/coalesce.ts), with a fake read over a versioned store: concurrent callers
 * share reads, and none is ever served a read that started before it called.
 */
import { describe, expect, it } from 'vitest';
import { FreshReadCoalescer } from '../../src/kube/coalesce.js';

/** A store whose reads take until `finish()` is called and answer the version current at their start. */
class SlowStore {
  version = 0;
  reads: { key: string; version: number; finish: () => void; fail: (e: Error) => void }[] = [];
  read = (key: string): Promise<number> =>
    new Promise<number>((resolve, reject) => {
      const version = this.version;
      this.reads.push({ key, version, finish: () => resolve(version), fail: reject });
    });
}

const tick = () => new Promise((r) => setImmediate(r));

describe('FreshReadCoalescer', () => {
  it('gives a lone caller its own read', async () => {
    const store = new SlowStore();
    const c = new FreshReadCoalescer(store.read);
    const a = c.get('ns');
    expect(store.reads).toHaveLength(1);
    store.reads[0]!.finish();
    expect(await a).toBe(0);
  });

  it('never serves a caller a read that was already running when it called (reads see every earlier write)', async () => {
    const store = new SlowStore();
    const c = new FreshReadCoalescer(store.read);
    const first = c.get('ns'); // read 1 starts at version 0
    store.version = 1; // a write lands (e.g. the CR whose create started the next caller's workflow)
    const second = c.get('ns'); // called after the write: must not get read 1's answer
    const third = c.get('ns');
    expect(store.reads).toHaveLength(1); // the next read waits for the running one
    store.reads[0]!.finish();
    expect(await first).toBe(0);
    await tick();
    expect(store.reads).toHaveLength(2);
    store.reads[1]!.finish();
    expect(await second).toBe(1);
    expect(await third).toBe(1); // shared with the second caller: it started after both calls
    expect(c.stats()).toEqual({ calls: 3, reads: 2 });
  });

  it('serves many concurrent callers with at most two reads in flight, and callers of a queued read share it', async () => {
    const store = new SlowStore();
    const c = new FreshReadCoalescer(store.read);
    const results = Array.from({ length: 50 }, () => c.get('ns'));
    expect(store.reads).toHaveLength(1);
    store.reads[0]!.finish();
    await tick();
    const late = c.get('ns'); // arrives while the queued read runs: joins a third one
    store.reads[1]!.finish();
    await tick();
    expect(store.reads).toHaveLength(3);
    store.reads[2]!.finish();
    await Promise.all([...results, late]);
    expect(c.stats()).toEqual({ calls: 51, reads: 3 });
  });

  it('keeps keys apart', async () => {
    const store = new SlowStore();
    const c = new FreshReadCoalescer(store.read);
    const a = c.get('a');
    const b = c.get('b');
    expect(store.reads.map((r) => r.key)).toEqual(['a', 'b']);
    for (const r of store.reads) r.finish();
    await Promise.all([a, b]);
  });

  it('hands a failed read to every caller it served, and starts afresh after it', async () => {
    const store = new SlowStore();
    const c = new FreshReadCoalescer(store.read);
    const first = c.get('ns');
    const second = c.get('ns');
    const third = c.get('ns');
    store.reads[0]!.fail(new Error('apiserver down'));
    await expect(first).rejects.toThrow('apiserver down');
    await tick();
    store.reads[1]!.fail(new Error('still down'));
    await expect(second).rejects.toThrow('still down');
    await expect(third).rejects.toThrow('still down');
    const fourth = c.get('ns');
    expect(store.reads).toHaveLength(3);
    store.reads[2]!.finish();
    expect(await fourth).toBe(0);
  });
});
