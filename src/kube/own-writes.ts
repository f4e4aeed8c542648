/**
 * The operator's own writes, remembered so the watcher can drop their echoes (docs/architecture.md#echoes).
 *
 * A Kubernetes write answers with the object as written, and the workflow that wrote it keeps that answer.
 * The watch then delivers the same object version again as an update event; signalled back to the writer,
 * it would cost a workflow task to learn nothing. Each write records `(kind, namespace/name,
 * resourceVersion) → writer workflow id`; an informer event carrying exactly that version is the echo of that
 * write and nothing else (any later change has a later resourceVersion), so the router drops it for the
 * writer, and only for the writer: other workflows still see it.
 *
 * The watch event can reach the watcher before the write's answer reaches the activity, so a write is
 * marked in flight from before its request (`begin`) until its answer (the function `begin` returned), and
 * the watcher holds that object's events until then (`settled`).
 *
 * The record is per process: it works where the activity and the watcher share one (the default
 * deployment, `OPERATOR_MODE=all`). Where they do not, the echo is simply sent, as before: a lost record
 * costs a workflow task, never an update.
 */

/** Object kinds whose writes are recorded (the watcher's resource kinds). */
export type WrittenKind = 'pod' | 'cocoonhibernation' | 'cocoonset';

interface Entry {
  writer: string;
  at: number;
}

/** See the module comment. Bounded: entries older than `ttlMs` and beyond `max` are forgotten. */
export class OwnWrites {
  private readonly writes = new Map<string, Entry>();
  private readonly inFlight = new Map<string, { count: number; done: Promise<void>; resolve: () => void }>();
  private counters = { recorded: 0, echoes: 0 };

  /**
   * @param ttlMs how long a write waits for its echo (ms; default 60 s, far above watch delivery times)
   * @param max most writes remembered at once (default 10,000)
   * @param now clock (epoch ms), for tests
   */
  constructor(
    private readonly ttlMs = 60_000,
    private readonly max = 10_000,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Marks a write of workflow `writer` to `kind` `namespace/name` in flight. Call the returned function once
   * the write has answered, with the object's resourceVersion in the answer (undefined when it failed or
   * answered no object): it records the write (`record`) and ends the in-flight mark. Without a writer (a
   * write outside a workflow) nothing is marked.
   */
  begin(
    kind: WrittenKind,
    namespace: string,
    name: string,
    writer: string | undefined,
  ): (resourceVersion: string | undefined) => void {
    if (!writer) return () => {};
    const k = objectKey(kind, namespace, name);
    let f = this.inFlight.get(k);
    if (!f) {
      let resolve!: () => void;
      const done = new Promise<void>((r) => {
        resolve = r;
      });
      f = { count: 0, done, resolve };
      this.inFlight.set(k, f);
    }
    const flight = f;
    flight.count++;
    let ended = false;
    return (resourceVersion) => {
      if (ended) return;
      ended = true;
      this.record(kind, namespace, name, resourceVersion, writer);
      if (--flight.count === 0) {
        this.inFlight.delete(k);
        flight.resolve();
      }
    };
  }

  /**
   * Runs `write` as workflow `writer`'s write of `kind` `namespace/name`: `begin` before it, and its end with
   * the resourceVersion `answered` reads from the answer (nothing recorded when `write` throws or `answered`
   * gives undefined). Returns or throws what `write` does.
   */
  async around<T>(
    kind: WrittenKind,
    namespace: string,
    name: string,
    writer: string | undefined,
    write: () => Promise<T>,
    answered: (out: T) => string | undefined,
  ): Promise<T> {
    const end = this.begin(kind, namespace, name, writer);
    let resourceVersion: string | undefined;
    try {
      const out = await write();
      resourceVersion = answered(out);
      return out;
    } finally {
      end(resourceVersion);
    }
  }

  /** Resolves once no write to the object is in flight; undefined when none is now. */
  settled(kind: WrittenKind, namespace: string, name: string): Promise<void> | undefined {
    return this.inFlight.get(objectKey(kind, namespace, name))?.done;
  }

  /**
   * Records that workflow `writer` wrote `kind` `namespace/name` and the write answered with
   * `resourceVersion`. A missing version or writer records nothing.
   */
  record(
    kind: WrittenKind,
    namespace: string,
    name: string,
    resourceVersion: string | undefined,
    writer: string | undefined,
  ): void {
    if (!resourceVersion || !writer) return;
    const at = this.now();
    this.writes.set(key(kind, namespace, name, resourceVersion), { writer, at });
    this.counters.recorded++;
    // Map order is insertion order: the oldest entries are first.
    for (const [k, e] of this.writes) {
      if (this.writes.size <= this.max && at - e.at <= this.ttlMs) break;
      this.writes.delete(k);
    }
  }

  /**
   * The workflow id that wrote this exact version of the object, if a recorded write did; the record is
   * consumed (an object version has one echo).
   */
  take(
    kind: WrittenKind,
    namespace: string,
    name: string,
    resourceVersion: string | undefined,
  ): string | undefined {
    if (!resourceVersion || this.writes.size === 0) return undefined;
    const k = key(kind, namespace, name, resourceVersion);
    const e = this.writes.get(k);
    if (!e) return undefined;
    this.writes.delete(k);
    if (this.now() - e.at > this.ttlMs) return undefined;
    this.counters.echoes++;
    return e.writer;
  }

  /** Writes recorded, echoes recognised, and writes still waiting for their echo. */
  stats(): { recorded: number; echoes: number; waiting: number } {
    return { ...this.counters, waiting: this.writes.size };
  }
}

function objectKey(kind: WrittenKind, namespace: string, name: string): string {
  return `${kind}\u0000${namespace}\u0000${name}`;
}

function key(kind: WrittenKind, namespace: string, name: string, resourceVersion: string): string {
  return `${objectKey(kind, namespace, name)}\u0000${resourceVersion}`;
}
