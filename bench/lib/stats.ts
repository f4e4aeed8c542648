/**
 * Small order statistics for benchmark figures. All inputs are plain numbers in whatever unit the caller
 * uses (the benchmarks use milliseconds); empty inputs yield NaN so a missing figure never reads as 0.
 */

/** Summary of repeated measurements: count, median, min, max, and the spread (max − min) / median. */
export interface Summary {
  n: number;
  median: number;
  min: number;
  max: number;
  /** (max − min) / median; NaN for fewer than two values. */
  relSpread: number;
}

/** Values sorted ascending (a copy). */
function sorted(xs: readonly number[]): number[] {
  return [...xs].sort((a, b) => a - b);
}

/** Median (mean of the two middle values for an even count); NaN when empty. */
export function median(xs: readonly number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = sorted(xs);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/**
 * Nearest-rank percentile `p` in [0, 100]: the smallest value with at least p % of the values at or below
 * it (p99 of 200 values is the 198th smallest). NaN when empty.
 */
export function percentile(xs: readonly number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = sorted(xs);
  const rank = Math.max(1, Math.ceil((p / 100) * s.length));
  return s[Math.min(rank, s.length) - 1]!;
}

/** Arithmetic mean; NaN when empty. */
export function mean(xs: readonly number[]): number {
  return xs.length === 0 ? Number.NaN : xs.reduce((a, b) => a + b, 0) / xs.length;
}

/** Median, min, max and relative spread of repeated measurements. */
export function summarize(xs: readonly number[]): Summary {
  const med = median(xs);
  const min = xs.length ? Math.min(...xs) : Number.NaN;
  const max = xs.length ? Math.max(...xs) : Number.NaN;
  return { n: xs.length, median: med, min, max, relSpread: xs.length > 1 ? (max - min) / med : Number.NaN };
}

/** Runs `fn` over `items` with at most `limit` calls in flight; resolves with results in input order. */
export async function pool<T, R>(items: readonly T[], limit: number, fn: (item: T, i: number) => Promise<R>) {
  const out = new Array<R>(items.length);
  let next = 0;
  const lanes = Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, async () => {
    for (;;) {
      const i = next++;
      if (i >= items.length) return;
      out[i] = await fn(items[i]!, i);
    }
  });
  await Promise.all(lanes);
  return out;
}
