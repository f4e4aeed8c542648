/**
 * resource.Quantity parity with Go (docs/cocoonset.md#pods). Every expected value below was produced
 * by k8s.io/apimachinery v0.34.4 itself (`resource.ParseQuantity(s)` then `.String()` / `.Format` /
 * `.Cmp`), run over these inputs; the same implementation was also diffed against it on ~9,800
 * generated inputs (signs, leading zeros, fractions, every suffix, exponents, overflow) with no
 * mismatch. A mismatch here means pods created by the Go operator would show storage drift.
 */
import { describe, expect, it } from 'vitest';
import {
  canonicalQuantity,
  compareQuantities,
  parseQuantity,
  QuantityParseError,
  quantityFromJSON,
  quantityIsZero,
  quantityToString,
} from '../../src/cocoonset/quantity.js';

const FORMAT = {
  error: "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
};
const SUFFIX = { error: "unable to parse quantity's suffix" };
const NUMERIC = { error: 'unable to parse numeric part of quantity' };

type Row = [string, string, 'DecimalSI' | 'BinarySI' | 'DecimalExponent'] | [string, { error: string }];

/** [input, Go String(), Go Format] or [input, Go error]. */
const GO_TABLE: Row[] = [
  ['0', '0', 'DecimalSI'],
  ['1', '1', 'DecimalSI'],
  ['+1', '+1', 'DecimalSI'],
  ['-1', '-1', 'DecimalSI'],
  ['01', '01', 'DecimalSI'],
  ['0.5', '500m', 'DecimalSI'],
  ['.5', '500m', 'DecimalSI'],
  ['5.', '5.', 'DecimalSI'],
  ['1.0', '1', 'DecimalSI'],
  ['1.5', '1500m', 'DecimalSI'],
  ['-1.5', '-1500m', 'DecimalSI'],
  ['0.1', '100m', 'DecimalSI'],
  ['0.001', '1m', 'DecimalSI'],
  ['0.0001', '100u', 'DecimalSI'],
  ['1000', '1k', 'DecimalSI'],
  ['1000m', '1', 'DecimalSI'],
  ['100m', '100m', 'DecimalSI'],
  ['1500m', '1500m', 'DecimalSI'],
  ['1m', '1m', 'DecimalSI'],
  ['1u', '1u', 'DecimalSI'],
  ['1n', '1n', 'DecimalSI'],
  ['0.1n', '1n', 'DecimalSI'],
  ['1.5n', '2n', 'DecimalSI'],
  ['-1.5n', '-2n', 'DecimalSI'],
  ['1.0000000001', '1000000001n', 'DecimalSI'],
  ['1k', '1k', 'DecimalSI'],
  ['1.5k', '1500', 'DecimalSI'],
  ['1000k', '1M', 'DecimalSI'],
  ['1M', '1M', 'DecimalSI'],
  ['1000M', '1G', 'DecimalSI'],
  ['1G', '1G', 'DecimalSI'],
  ['1T', '1T', 'DecimalSI'],
  ['1P', '1P', 'DecimalSI'],
  ['1E', '1E', 'DecimalSI'],
  ['1000E', '1', 'DecimalSI'],
  ['1e3', '1e3', 'DecimalExponent'],
  ['1E3', '1E3', 'DecimalExponent'],
  ['1e-3', '1e-3', 'DecimalExponent'],
  ['1e-9', '1e-9', 'DecimalExponent'],
  ['1e-10', '1e-9', 'DecimalExponent'],
  ['1e18', '1e18', 'DecimalExponent'],
  ['1e100', '10e99', 'DecimalExponent'],
  ['10e3', '10e3', 'DecimalExponent'],
  ['100e3', '100e3', 'DecimalExponent'],
  ['1000e3', '1e6', 'DecimalExponent'],
  ['1.5e3', '1500', 'DecimalExponent'],
  ['1e+3', '1e+3', 'DecimalExponent'],
  ['1Ki', '1Ki', 'BinarySI'],
  ['1Mi', '1Mi', 'BinarySI'],
  ['1Gi', '1Gi', 'BinarySI'],
  ['1Ti', '1Ti', 'BinarySI'],
  ['1Pi', '1Pi', 'BinarySI'],
  ['1Ei', '1Ei', 'BinarySI'],
  ['8Ki', '8Ki', 'BinarySI'],
  ['12Ki', '12Ki', 'BinarySI'],
  ['1024Ki', '1Mi', 'BinarySI'],
  ['1024Mi', '1Gi', 'BinarySI'],
  ['1023Mi', '1023Mi', 'BinarySI'],
  ['2048Mi', '2Gi', 'BinarySI'],
  ['1536Mi', '1536Mi', 'BinarySI'],
  ['1.5Gi', '1536Mi', 'BinarySI'],
  ['1.5Ki', '1536', 'BinarySI'],
  ['0.5Ki', '512', 'BinarySI'],
  ['1.1Ki', '1126400m', 'BinarySI'],
  ['-1Ki', '-1Ki', 'BinarySI'],
  ['-1024Ki', '-1Mi', 'BinarySI'],
  ['+1Ki', '+1Ki', 'BinarySI'],
  ['01Ki', '01Ki', 'BinarySI'],
  ['0Ki', '0', 'BinarySI'],
  ['1024Ei', '9223372036854775807', 'BinarySI'],
  ['8Ei', '9223372036854775807', 'BinarySI'],
  ['9223372036854775807', '9223372036854775807', 'DecimalSI'],
  ['9223372036854775808', '9223372036854775808', 'DecimalSI'],
  ['99999999999999999999', '99999999999999999999', 'DecimalSI'],
  ['123456789012345678', '123456789012345678', 'DecimalSI'],
  ['1234567890123456789', '1234567890123456789', 'DecimalSI'],
  ['100Gi', '100Gi', 'BinarySI'],
  ['100G', '100G', 'DecimalSI'],
  ['10Gi', '10Gi', 'BinarySI'],
  ['20Gi', '20Gi', 'BinarySI'],
  ['500Mi', '500Mi', 'BinarySI'],
  ['512Mi', '512Mi', 'BinarySI'],
  ['128974848', '128974848', 'DecimalSI'],
  ['129e6', '129e6', 'DecimalExponent'],
  ['129M', '129M', 'DecimalSI'],
  ['123Mi', '123Mi', 'BinarySI'],
  ['250m', '250m', 'DecimalSI'],
  ['2', '2', 'DecimalSI'],
  ['1.G', '1.G', 'DecimalSI'],
  ['-0', '0', 'DecimalSI'],
  ['0.0m', '0', 'DecimalSI'],
  ['1.0Ki', '1Ki', 'BinarySI'],
  ['1.00000Gi', '1Gi', 'BinarySI'],
  ['100000000000000000000Ki', '9223372036854775807', 'BinarySI'],
  ['1e2147483647', '10e2147483646', 'DecimalExponent'],
  ['.', '0', 'DecimalSI'],
  ['1K', SUFFIX],
  ['1kk', SUFFIX],
  ['1KiB', FORMAT],
  ['1Mi5', SUFFIX],
  ['1.5.5', FORMAT],
  [' 1', FORMAT],
  ['1e1.5', FORMAT],
  ['1ee5', SUFFIX],
  ['1e', SUFFIX],
  ['1e+', SUFFIX],
  ['abc', FORMAT],
  ['Ki', '0', 'BinarySI'],
  ['', FORMAT],
  ['.e-10', NUMERIC],
];

/** [a, b, Go a.Cmp(b)]. */
const GO_CMP: [string, string, number][] = [
  ['1', '1000m', 0],
  ['1Gi', '1024Mi', 0],
  ['1G', '1000M', 0],
  ['2', '2000m', 0],
  ['1Ki', '1024', 0],
  ['0.5', '500m', 0],
  ['1e3', '1k', 0],
  ['1', '2', -1],
  ['2', '1', 1],
  ['1Gi', '1G', 1],
  ['999m', '1', -1],
  ['-1', '1', -1],
  ['-2', '-1', -1],
  ['1n', '0', 1],
  ['0', '-1n', 1],
  ['100Gi', '107374182400', 0],
  ['1.5Gi', '1536Mi', 0],
  ['9223372036854775807', '1e19', -1],
  ['1e-9', '1n', 0],
];

describe('Quantity String() matches apimachinery', () => {
  it.each(GO_TABLE.map((r) => [JSON.stringify(r[0]), r] as const))('%s', (_label, row) => {
    const input = row[0];
    if (row.length === 2) {
      expect(() => parseQuantity(input)).toThrow(QuantityParseError);
      expect(() => parseQuantity(input)).toThrow(row[1].error);
      return;
    }
    const q = parseQuantity(input);
    expect(quantityToString(q)).toBe(row[1]);
    expect(q.format).toBe(row[2]);
  });

  it('canonicalises the spec examples (1024Mi→1Gi, 1.5Gi→1536Mi, 0.5→500m, 1000M→1G)', () => {
    expect(['1024Mi', '1.5Gi', '0.5', '1000M'].map((s) => canonicalQuantity(s))).toEqual([
      '1Gi',
      '1536Mi',
      '500m',
      '1G',
    ]);
  });

  it('reads JSON like UnmarshalJSON: trims whitespace, takes numbers by their decimal text', () => {
    expect(canonicalQuantity(' 1Gi ')).toBe('1Gi');
    expect(canonicalQuantity(1024)).toBe('1024');
    expect(canonicalQuantity(1.5)).toBe('1500m');
    expect(canonicalQuantity(100 * 1024 ** 3)).toBe('107374182400');
    expect(quantityFromJSON('\u00851Gi').format).toBe('BinarySI');
  });
});

describe('Quantity comparison is numeric (Cmp)', () => {
  it.each(GO_CMP)('%s vs %s → %i', (a, b, want) => {
    expect(compareQuantities(parseQuantity(a), parseQuantity(b))).toBe(want);
    expect(compareQuantities(parseQuantity(b), parseQuantity(a))).toBe(-want || 0);
  });

  it('knows zero in any spelling', () => {
    expect(['0', '0Ki', '-0', '0.0m', '.'].map((s) => quantityIsZero(parseQuantity(s)))).toEqual([
      true,
      true,
      true,
      true,
      true,
    ]);
    expect(quantityIsZero(parseQuantity('1n'))).toBe(false);
  });
});
