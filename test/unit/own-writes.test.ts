import { describe, expect, it } from 'vitest';
import { OwnWrites } from '../../src/kube/own-writes.js';

describe('OwnWrites', () => {
  it('names the writer of exactly the recorded object version, once', () => {
    const w = new OwnWrites();
    w.record('pod', 'ns', 'p1', '42', 'vm/ns/p1');
    expect(w.take('pod', 'ns', 'p1', '41')).toBeUndefined();
    expect(w.take('cocoonhibernation', 'ns', 'p1', '42')).toBeUndefined();
    expect(w.take('pod', 'ns', 'p2', '42')).toBeUndefined();
    expect(w.take('pod', 'ns', 'p1', '42')).toBe('vm/ns/p1');
    expect(w.take('pod', 'ns', 'p1', '42')).toBeUndefined();
    expect(w.stats()).toEqual({ recorded: 1, echoes: 1, waiting: 0 });
  });

  it('records nothing without a resourceVersion or a writer (a write outside a workflow)', () => {
    const w = new OwnWrites();
    w.record('pod', 'ns', 'p1', undefined, 'vm/ns/p1');
    w.record('pod', 'ns', 'p1', '7', undefined);
    expect(w.stats().waiting).toBe(0);
  });

  it('forgets writes whose echo never came: past the ttl, and beyond the size bound (oldest first)', () => {
    let now = 0;
    const w = new OwnWrites(1_000, 2, () => now);
    w.record('pod', 'ns', 'a', '1', 'x');
    now = 500;
    w.record('pod', 'ns', 'b', '2', 'x');
    now = 1_600; // a is 1.6 s old: gone on the next record; b (1.1 s) is past the ttl for take
    w.record('pod', 'ns', 'c', '3', 'x');
    expect(w.stats().waiting).toBe(1);
    expect(w.take('pod', 'ns', 'c', '3')).toBe('x');
    now = 1_700;
    w.record('pod', 'ns', 'd', '4', 'x');
    w.record('pod', 'ns', 'e', '5', 'x');
    w.record('pod', 'ns', 'f', '6', 'x');
    expect(w.stats().waiting).toBe(2);
    expect(w.take('pod', 'ns', 'd', '4')).toBeUndefined();
    expect(w.take('pod', 'ns', 'f', '6')).toBe('x');
  });

  it('marks a write in flight until it answers, then records the answered version (two writes: until both end)', async () => {
    const w = new OwnWrites();
    expect(w.settled('cocoonhibernation', 'ns', 'h')).toBeUndefined();
    const endA = w.begin('cocoonhibernation', 'ns', 'h', 'vm/ns/p');
    const endB = w.begin('cocoonhibernation', 'ns', 'h', 'vm/ns/p');
    const settled = w.settled('cocoonhibernation', 'ns', 'h');
    let done = false;
    void settled?.then(() => {
      done = true;
    });
    endA('10');
    await Promise.resolve();
    expect(done).toBe(false);
    endB(undefined); // failed: nothing recorded for it
    endB('99'); // a second call is ignored
    await settled;
    expect(done).toBe(true);
    expect(w.settled('cocoonhibernation', 'ns', 'h')).toBeUndefined();
    expect(w.take('cocoonhibernation', 'ns', 'h', '10')).toBe('vm/ns/p');
    expect(w.stats()).toEqual({ recorded: 1, echoes: 1, waiting: 0 });
    // Outside a workflow nothing is marked.
    w.begin('pod', 'ns', 'p', undefined)('5');
    expect(w.settled('pod', 'ns', 'p')).toBeUndefined();
  });

  it('around: in flight while the write runs, then the version the answer gives; nothing recorded when the write throws', async () => {
    const w = new OwnWrites();
    let release!: (rv: string) => void;
    const answer = new Promise<string>((r) => {
      release = r;
    });
    const running = w.around(
      'pod',
      'ns',
      'p',
      'cocoonset/ns/s',
      () => answer,
      (rv) => rv,
    );
    expect(w.settled('pod', 'ns', 'p')).toBeDefined();
    release('7');
    expect(await running).toBe('7');
    expect(w.settled('pod', 'ns', 'p')).toBeUndefined();
    expect(w.take('pod', 'ns', 'p', '7')).toBe('cocoonset/ns/s');

    const failing = w.around(
      'pod',
      'ns',
      'q',
      'cocoonset/ns/s',
      () => Promise.reject(new Error('409')),
      () => '8',
    );
    await expect(failing).rejects.toThrow('409');
    expect(w.settled('pod', 'ns', 'q')).toBeUndefined();
    expect(w.take('pod', 'ns', 'q', '8')).toBeUndefined();
  });
});
