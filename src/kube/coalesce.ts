/**
 * Shares one read among concurrent callers without handing anyone an answer older than their call.
 *
 * Why: the VM workflow's world read (`readVMWorld`, src/activities/kube.ts) must see every
 * CocoonHibernation whose `spec.podRef.name` is its pod (spec/hibernation.md §2.2 fan-out, §8 holder
 * rule), and the only API read that answers that without a CRD change or labels the wire contract does
 * not have is a List of the namespace. With N CRs in a namespace and N workflows starting together, N
 * Lists of N objects each are quadratic. Callers asking for the same namespace while a List is in flight
 * are served together instead.
 *
 * Freshness: a caller never joins a read that was already running when it called (that read may have
 * been answered before the caller's own cause — e.g. the CR create that started its workflow — was
 * written). It joins the *next* read, which starts when the running one ends; every caller arriving
 * before that next read starts shares it. So each caller gets a read that began after its call, exactly
 * what a read of its own would give, and at most two reads per key are outstanding at any time.
 */
export class FreshReadCoalescer<K, T> {
  private readonly running = new Map<K, Promise<T>>();
  private readonly queued = new Map<K, Promise<T>>();
  private readonly counters = { calls: 0, reads: 0 };

  /** `read(key)` performs one real read; its rejection is shared by every caller served by it. */
  constructor(private readonly read: (key: K) => Promise<T>) {}

  /** A read of `key` that started after this call (see the module comment). */
  get(key: K): Promise<T> {
    this.counters.calls++;
    const queued = this.queued.get(key);
    if (queued) return queued;
    const running = this.running.get(key);
    if (!running) return this.start(key);
    const next = running.then(
      () => this.startQueued(key),
      () => this.startQueued(key),
    );
    this.queued.set(key, next);
    return next;
  }

  /** Calls so far, and real reads made for them. */
  stats(): { calls: number; reads: number } {
    return { ...this.counters };
  }

  private startQueued(key: K): Promise<T> {
    this.queued.delete(key);
    return this.start(key);
  }

  private start(key: K): Promise<T> {
    this.counters.reads++;
    const p: Promise<T> = this.read(key).finally(() => {
      if (this.running.get(key) === p) this.running.delete(key);
    });
    this.running.set(key, p);
    return p;
  }
}
