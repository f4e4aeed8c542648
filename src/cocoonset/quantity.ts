/**
 * Kubernetes `resource.Quantity`: parsing and the canonical `String()` form, reproducing
 * k8s.io/apimachinery v0.34 `pkg/api/resource` exactly (docs/cocoonset.md#pods,
 * docs/cocoonset.md#drift). The operator stamps `Quantity.String()` of `storage` into the pod's
 * `cocoonset.cocoonstack.io/storage` annotation and compares it byte for byte on every pass, so the
 * string must equal what the Go operator wrote or every pod it created would drift.
 *
 * No npm package reproduces Go's canonicalisation (the ones found only convert to a float), so this is
 * our own implementation over BigInt, pinned by a table generated from the Go library.
 *
 * Behaviour that surprises but is Go's (and therefore ours):
 * - A literal already in canonical form is kept verbatim, including a sign or leading zeros:
 *   `+1` → `+1`, `01Ki` → `01Ki`, `1E3` → `1E3`.
 * - Decimal values are written as mantissa × 10^(3k) with the SI suffix for 3k; an exponent outside
 *   n..E loses its suffix (`1000E` → `1`), as Go does.
 * - Binary values that are not whole numbers, or lie strictly between -1024 and 1024, print in decimal
 *   SI (`1.1Ki` → `1126400m`, `0.5Ki` → `512`).
 * - Values below one nano round up (away from zero) to the next nano; binary values are capped at
 *   2^63-1.
 *
 * Pure and deterministic (safe inside Temporal workflow code).
 */

/** Go's `resource.Format`. */
export type QuantityFormat = 'DecimalExponent' | 'BinarySI' | 'DecimalSI';

/**
 * A parsed quantity. The value is `unscaled × 10^exp`. `literal` is the input string when Go would
 * keep it as the cached canonical form (its fast path), otherwise undefined.
 */
export interface Quantity {
  readonly unscaled: bigint;
  readonly exp: number;
  readonly format: QuantityFormat;
  readonly literal?: string;
}

/** Error thrown for a string Go's `ParseQuantity` rejects; `message` is Go's error text. */
export class QuantityParseError extends Error {
  constructor(
    readonly input: string,
    message: string,
  ) {
    super(message);
    this.name = 'QuantityParseError';
  }
}

const SPLIT_RE_STRING = '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$';
const ERR_FORMAT_WRONG = `quantities must match the regular expression '${SPLIT_RE_STRING}'`;
const ERR_NUMERIC = 'unable to parse numeric part of quantity';
const ERR_SUFFIX = "unable to parse quantity's suffix";

const MAX_INT64 = (1n << 63n) - 1n;
const MIN_INT64 = -(1n << 63n);
/** Decimal digits an int64 always holds (Go maxInt64Factors). */
const MAX_INT64_FACTORS = 18;
/** Smallest representable step: 10^-9 (Go `Nano`). */
const NANO = -9;

const DECIMAL_SUFFIXES: ReadonlyMap<string, number> = new Map([
  ['n', -9],
  ['u', -6],
  ['m', -3],
  ['', 0],
  ['k', 3],
  ['M', 6],
  ['G', 9],
  ['T', 12],
  ['P', 15],
  ['E', 18],
]);
const BINARY_SUFFIXES: ReadonlyMap<string, number> = new Map([
  ['Ki', 10],
  ['Mi', 20],
  ['Gi', 30],
  ['Ti', 40],
  ['Pi', 50],
  ['Ei', 60],
]);
const DECIMAL_BY_EXP = new Map([...DECIMAL_SUFFIXES].map(([s, e]) => [e, s]));
const BINARY_BY_EXP = new Map([...BINARY_SUFFIXES].map(([s, e]) => [e, s]));

/** Go int32 conversion (two's complement wrap). */
function i32(n: number): number {
  return n | 0;
}

function isDigit(c: string | undefined): boolean {
  return c !== undefined && c >= '0' && c <= '9';
}

interface Scanned {
  positive: boolean;
  value: string;
  num: string;
  denom: string;
  suffix: string;
}

/** Go `parseQuantityString`: splits sign, integer digits (leading zeros stripped), fraction and suffix. */
function scan(str: string): Scanned {
  const end = str.length;
  let positive = true;
  let pos = 0;
  if (pos < end) {
    if (str[0] === '-') {
      positive = false;
      pos++;
    } else if (str[0] === '+') {
      pos++;
    }
  }
  for (let i = pos; ; i++) {
    if (i >= end) return { positive, value: '0', num: '0', denom: '', suffix: '' };
    if (str[i] !== '0') break;
    pos++;
  }
  let num = '';
  for (let i = pos; ; i++) {
    if (i >= end) return { positive, value: str, num: str.slice(pos), denom: '', suffix: '' };
    if (!isDigit(str[i])) {
      num = str.slice(pos, i);
      pos = i;
      break;
    }
  }
  if (num.length === 0) num = '0';
  let denom = '';
  if (pos < end && str[pos] === '.') {
    pos++;
    for (let i = pos; ; i++) {
      if (i >= end) return { positive, value: str, num, denom: str.slice(pos), suffix: '' };
      if (!isDigit(str[i])) {
        denom = str.slice(pos, i);
        pos = i;
        break;
      }
    }
  }
  const value = str.slice(0, pos);
  const suffixStart = pos;
  for (let i = pos; ; i++) {
    if (i >= end) return { positive, value, num, denom, suffix: str.slice(suffixStart) };
    if (!'eEinumkKMGTP'.includes(str[i]!)) {
      pos = i;
      break;
    }
  }
  if (pos < end && (str[pos] === '-' || str[pos] === '+')) pos++;
  for (let i = pos; ; i++) {
    if (i >= end) return { positive, value, num, denom, suffix: str.slice(suffixStart) };
    if (!isDigit(str[i])) break;
  }
  throw new QuantityParseError(str, ERR_FORMAT_WRONG);
}

interface Suffix {
  base: 2 | 10;
  exponent: number;
  format: QuantityFormat;
}

/** Go `quantitySuffixer.interpret`. */
function interpretSuffix(s: string): Suffix | undefined {
  const dec = DECIMAL_SUFFIXES.get(s);
  if (dec !== undefined) return { base: 10, exponent: dec, format: 'DecimalSI' };
  const bin = BINARY_SUFFIXES.get(s);
  if (bin !== undefined) return { base: 2, exponent: bin, format: 'BinarySI' };
  if (s.length > 1 && (s[0] === 'e' || s[0] === 'E')) {
    const digits = s.slice(1);
    if (!/^[+-]?[0-9]+$/.test(digits)) return undefined;
    const parsed = BigInt(digits);
    if (parsed > MAX_INT64 || parsed < MIN_INT64) return undefined;
    return { base: 10, exponent: Number(BigInt.asIntN(32, parsed)), format: 'DecimalExponent' };
  }
  return undefined;
}

/** inf.Dec `SetString` of the scanned numeric part: [sign] digits [. digits], at least one digit. */
function parseDecimal(value: string): { unscaled: bigint; exp: number } | undefined {
  const m = /^([+-]?)([0-9]*)(?:\.([0-9]*))?$/.exec(value);
  if (!m) return undefined;
  const int = m[2] ?? '';
  const frac = m[3] ?? '';
  if (int.length + frac.length === 0) return undefined;
  const unscaled = BigInt(`${m[1] === '-' ? '-' : ''}${int}${frac}` || '0');
  return { unscaled, exp: -frac.length };
}

function pow10(n: number): bigint {
  return 10n ** BigInt(n);
}

function abs(n: bigint): bigint {
  return n < 0n ? -n : n;
}

/**
 * Parses a quantity exactly as Go's `resource.ParseQuantity` (no surrounding whitespace allowed).
 * Throws QuantityParseError with Go's message on a malformed string.
 */
export function parseQuantity(str: string): Quantity {
  if (str.length === 0) throw new QuantityParseError(str, ERR_FORMAT_WRONG);
  if (str === '0') return { unscaled: 0n, exp: 0, format: 'DecimalSI', literal: '0' };

  const { positive, value, num, denom, suffix } = scan(str);
  const suf = interpretSuffix(suffix);
  if (!suf) throw new QuantityParseError(str, ERR_SUFFIX);
  const { base, exponent } = suf;
  let format = suf.format;

  // Fast path: the value fits an int64 at a scale of at least nano (Go int64Amount).
  let precision = 0;
  let scale = 0;
  let mantissa = 1n;
  if (format === 'BinarySI') {
    if (exponent >= 0 && denom.length === 0) {
      mantissa = 1n << BigInt(exponent);
      precision = 15 - num.length - Math.trunc((exponent * 3) / 10) - 1;
    } else {
      precision = -1;
    }
  } else {
    scale = exponent;
    precision = MAX_INT64_FACTORS - (num.length + denom.length);
  }
  if (precision >= 0) {
    scale = i32(scale - denom.length);
    if (scale >= NANO) {
      const shifted = num + denom;
      const parsed = BigInt(shifted);
      if (parsed > MAX_INT64) throw new QuantityParseError(str, ERR_NUMERIC);
      const product = parsed * mantissa;
      if (product <= MAX_INT64) {
        const unscaled = positive ? product : -product;
        let canonical: boolean;
        if (format === 'BinarySI') canonical = exponent % 10 === 0 && (parsed & 7n) !== 0n;
        else canonical = scale % 3 === 0 && !shifted.endsWith('000') && shifted[0] !== '0';
        return canonical ? { unscaled, exp: scale, format, literal: str } : { unscaled, exp: scale, format };
      }
    }
  }

  // Slow path: arbitrary precision (Go inf.Dec), rounded up to nano, binary capped at int64.
  const dec = parseDecimal(value);
  if (!dec) throw new QuantityParseError(str, ERR_NUMERIC);
  let unscaled = dec.unscaled;
  let exp = dec.exp;
  if (base === 10) exp = i32(exp + exponent);
  else unscaled *= 1n << BigInt(exponent);
  const negative = unscaled < 0n;
  unscaled = abs(unscaled);
  if (unscaled !== 0n && exp < NANO) {
    const drop = NANO - exp;
    const digits = unscaled.toString().length;
    if (drop > digits) {
      unscaled = 1n;
    } else {
      const div = pow10(drop);
      const q = unscaled / div;
      unscaled = q * div === unscaled ? q : q + 1n;
    }
    exp = NANO;
  }
  if (format === 'BinarySI' && compareValue(unscaled, exp, MAX_INT64, 0) > 0) {
    unscaled = MAX_INT64;
    exp = 0;
  }
  if (format === 'BinarySI' && unscaled !== 0n && compareValue(unscaled, exp, 1n, 0) < 0) {
    format = 'DecimalSI';
  }
  return { unscaled: negative ? -unscaled : unscaled, exp, format };
}

/** Removes factors of `base` from |n| (Go removeBigIntFactors); returns the reduced value and the count. */
function removeFactors(n: bigint, base: bigint): { value: bigint; times: number } {
  let value = n;
  let times = 0;
  while (value !== 0n && value % base === 0n) {
    value /= base;
    times++;
  }
  return { value, times };
}

/** Value as `mantissa × 10^exponent` with exponent a multiple of 3 (Go AsCanonicalBytes). */
function canonicalDecimal(q: Quantity): { mantissa: bigint; exponent: number } {
  const { value, times } = removeFactors(q.unscaled, 10n);
  let mantissa = value;
  let exponent = i32(q.exp + times);
  while (exponent % 3 !== 0) {
    mantissa *= 10n;
    exponent = i32(exponent - 1);
  }
  return { mantissa, exponent };
}

/** Rounds away from zero to an integer; `exact` tells whether the value already was one. */
function toInteger(q: Quantity): { value: bigint; exact: boolean } {
  if (q.exp >= 0) return { value: q.unscaled * pow10(q.exp), exact: true };
  const div = pow10(-q.exp);
  const t = q.unscaled / div;
  if (t * div === q.unscaled) return { value: t, exact: true };
  return { value: q.unscaled > 0n ? t + 1n : t - 1n, exact: false };
}

/**
 * Go `Quantity.String()`: the kept literal when the parse kept one, otherwise the canonical form
 * (`CanonicalizeBytes`).
 */
export function quantityToString(q: Quantity): string {
  if (q.literal !== undefined) return q.literal;
  if (q.unscaled === 0n) return '0';
  let format = q.format;
  let integer: bigint | undefined;
  if (format === 'BinarySI') {
    if (compareQuantities(q, fromInt(-1024n)) > 0 && compareQuantities(q, fromInt(1024n)) < 0) {
      format = 'DecimalSI';
    } else {
      const r = toInteger(q);
      if (r.exact) integer = r.value;
      else format = 'DecimalSI';
    }
  }
  if (format === 'BinarySI' && integer !== undefined) {
    const { value, times } = removeFactors(integer, 1024n);
    return `${value}${BINARY_BY_EXP.get(times * 10) ?? ''}`;
  }
  const { mantissa, exponent } = canonicalDecimal(q);
  if (format === 'DecimalExponent') return exponent === 0 ? `${mantissa}` : `${mantissa}e${exponent}`;
  return `${mantissa}${DECIMAL_BY_EXP.get(exponent) ?? ''}`;
}

function fromInt(n: bigint): Quantity {
  return { unscaled: n, exp: 0, format: 'DecimalSI' };
}

/** Go `strings.TrimSpace` (Unicode White_Space, as `unicode.IsSpace`). */
function trimGoSpace(s: string): string {
  return s.replace(
    /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/g,
    '',
  );
}

/**
 * Parses a quantity as it arrives in a JSON object (Go `Quantity.UnmarshalJSON`): a string is trimmed
 * of surrounding whitespace, a number is read from its decimal text. Throws QuantityParseError.
 */
export function quantityFromJSON(raw: string | number): Quantity {
  return parseQuantity(trimGoSpace(typeof raw === 'number' ? String(raw) : raw));
}

/**
 * The string Go writes for a quantity read from JSON: `Quantity.String()` after `UnmarshalJSON`
 * (`1024Mi` → `1Gi`, `1.5Gi` → `1536Mi`, `0.5` → `500m`, `1000M` → `1G`). Throws QuantityParseError.
 */
export function canonicalQuantity(raw: string | number): string {
  return quantityToString(quantityFromJSON(raw));
}

/** Compares `a×10^ea` with `b×10^eb` exactly, without building powers larger than the operands. */
function compareValue(a: bigint, ea: number, b: bigint, eb: number): -1 | 0 | 1 {
  const sa = a === 0n ? 0 : a > 0n ? 1 : -1;
  const sb = b === 0n ? 0 : b > 0n ? 1 : -1;
  if (sa !== sb) return sa < sb ? -1 : 1;
  if (sa === 0) return 0;
  // Same sign, both non-zero: compare magnitudes by order first.
  const ma = abs(a);
  const mb = abs(b);
  const oa = ma.toString().length + ea;
  const ob = mb.toString().length + eb;
  let cmp: number;
  if (oa !== ob) {
    cmp = oa < ob ? -1 : 1;
  } else {
    const e = Math.min(ea, eb);
    const xa = ma * pow10(ea - e);
    const xb = mb * pow10(eb - e);
    cmp = xa === xb ? 0 : xa < xb ? -1 : 1;
  }
  return (sa > 0 ? cmp : -cmp) as -1 | 0 | 1;
}

/** Numeric comparison of two quantities (Go `Quantity.Cmp`): -1, 0 or 1. `1000m` equals `1`. */
export function compareQuantities(a: Quantity, b: Quantity): -1 | 0 | 1 {
  return compareValue(a.unscaled, a.exp, b.unscaled, b.exp);
}

/** True when the quantity is zero (Go `IsZero`). */
export function quantityIsZero(q: Quantity): boolean {
  return q.unscaled === 0n;
}

/** `a` and `b` as unscaled integers at their common (smaller) exponent. */
function aligned(a: Quantity, b: Quantity): { a: bigint; b: bigint; exp: number } {
  const exp = Math.min(a.exp, b.exp);
  return { a: a.unscaled * pow10(a.exp - exp), b: b.unscaled * pow10(b.exp - exp), exp };
}

/**
 * Exact `a + b` (Go `Quantity.Add`, k8s.io/apimachinery v0.34 pkg/api/resource/quantity.go): the sum
 * keeps `a`'s format, or takes `b`'s when `a` is zero, as Go's receiver does; it carries no literal, so
 * `quantityToString` prints it canonically (`1536Mi` + `2Gi` → `3584Mi`, `500m` + `1` → `1500m`), as Go
 * clears the cached string on Add. Arbitrary precision: no int64 overflow, no rounding (both operands are
 * multiples of 10^-9 after parsing, so the sum is too).
 */
export function addQuantities(a: Quantity, b: Quantity): Quantity {
  const x = aligned(a, b);
  return { unscaled: x.a + x.b, exp: x.exp, format: a.unscaled === 0n ? b.format : a.format };
}

/**
 * Exact `a - b` (Go `Quantity.Sub`): same format rule as `addQuantities` (`a`'s, or `b`'s when `a` is
 * zero), no literal. The result may be negative (`6Gi` - `2Gi` → `4Gi`, `1` - `1500m` → `-500m`).
 */
export function subtractQuantities(a: Quantity, b: Quantity): Quantity {
  const x = aligned(a, b);
  return { unscaled: x.a - x.b, exp: x.exp, format: a.unscaled === 0n ? b.format : a.format };
}
