/**
 * A full garbage collection, on demand, for tests that prove something is no longer referenced (a
 * `WeakRef` whose target must be gone). V8's `gc` is exposed for this process on first use.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** Runs a full, synchronous garbage collection of this isolate now. */
export function collectGarbage(): void {
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
}
