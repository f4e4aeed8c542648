/**
 * The one polling helper of the test suite. A wait for something to HAPPEN (a phase reached, an object
 * created) polls; a check that something did NOT happen waits on the workflow's own barrier instead
 * (`settled` in test/workflow/harness.ts), never on elapsed time.
 */

/**
 * Polls `probe` every `intervalMs` (default 50 ms) until it returns something other than `undefined` or
 * `false`, and returns that value. A throwing probe counts as "not yet". After `timeoutMs` (real time,
 * default 30 s) it throws an Error naming `what`, the last error, and what `describe()` (if given) shows.
 */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 30_000,
  opts: { intervalMs?: number; describe?: () => unknown } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined && v !== false) return v as T;
      last = undefined;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      const seen = opts.describe ? ` last seen: ${JSON.stringify(opts.describe())}` : '';
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (${String(last)})` : ''}${seen}`,
      );
    }
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 50));
  }
}
