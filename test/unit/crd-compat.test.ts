/**
 * The project's CRD manifests (config/crd/) must stay wire-compatible with the upstream ones
 * (test/fixtures/upstream-crds/, cocoon-common v0.3.0; docs/cocoonset.md#the-resource,
 * docs/hibernation.md#the-resource): same names, scope, versions, schema (types, formats, enums, defaults,
 * required lists, bounds, patterns, x-kubernetes-* markers, CEL rules and messages), subresources and printer
 * columns. Only `description` texts and metadata other than the name (controller-gen annotations, our labels)
 * may differ. The comparator is itself tested with mutations so that it is known to bite.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const OURS_DIR = join(REPO_ROOT, 'config/crd');
const REFERENCE_DIR = join(REPO_ROOT, 'test/fixtures/upstream-crds');
const FILES = [
  'cocoonset.cocoonstack.io_cocoonsets.yaml',
  'cocoonset.cocoonstack.io_cocoonhibernations.yaml',
];

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Obj = { [k: string]: Json };

function isObj(v: Json | undefined): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Parses a YAML file that must hold exactly one non-empty document. */
function loadSingleDoc(file: string): Obj {
  const docs = parseAllDocuments(readFileSync(file, 'utf8')).filter((d) => d.contents !== null);
  if (docs.length !== 1) throw new Error(`${file}: expected one YAML document, found ${docs.length}`);
  const doc = docs[0]!;
  if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors[0]!.message}`);
  const value = doc.toJS() as Json;
  if (!isObj(value)) throw new Error(`${file}: not a mapping`);
  return value;
}

/** Lists whose order carries no meaning (compared as sets). */
const SET_LIKE = new Set(['required', 'enum', 'shortNames', 'categories']);

/**
 * Removes what may legitimately differ: every schema `description` (but not a property that happens to be
 * named "description" inside a `properties` map) and all metadata except `name`.
 */
function normalize(crd: Obj): Obj {
  const strip = (v: Json, parentKey: string | undefined): Json => {
    if (Array.isArray(v)) {
      const items = v.map((x) => strip(x, undefined));
      return parentKey !== undefined && SET_LIKE.has(parentKey)
        ? [...items].sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)))
        : items;
    }
    if (!isObj(v)) return v;
    const out: Obj = {};
    for (const [k, x] of Object.entries(v)) {
      if (k === 'description' && parentKey !== 'properties') continue;
      out[k] = strip(x, k);
    }
    return out;
  };
  const copy = strip(crd, undefined) as Obj;
  const meta = isObj(copy.metadata) ? copy.metadata : {};
  copy.metadata = { name: meta.name ?? null };
  return copy;
}

/**
 * Structural difference between our CRD and the reference, as human-readable lines
 * (`<path>: <what>`); empty when compatible.
 */
function diffCrds(ours: Obj, reference: Obj): string[] {
  const out: string[] = [];
  const walk = (a: Json | undefined, b: Json | undefined, path: string): void => {
    if (a === undefined && b !== undefined) {
      out.push(`${path}: missing in ours (reference has ${JSON.stringify(b)})`);
      return;
    }
    if (b === undefined && a !== undefined) {
      out.push(`${path}: not in the reference (ours has ${JSON.stringify(a)})`);
      return;
    }
    if (Array.isArray(a) && Array.isArray(b)) {
      if (a.length !== b.length) out.push(`${path}: ${a.length} items, reference has ${b.length}`);
      for (let i = 0; i < Math.max(a.length, b.length); i++) walk(a[i], b[i], `${path}[${i}]`);
      return;
    }
    if (isObj(a) && isObj(b)) {
      const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
      for (const k of [...keys].sort()) walk(a[k], b[k], path === '' ? k : `${path}.${k}`);
      return;
    }
    if (JSON.stringify(a) !== JSON.stringify(b)) {
      out.push(`${path}: ours ${JSON.stringify(a)}, reference ${JSON.stringify(b)}`);
    }
  };
  walk(normalize(ours), normalize(reference), '');
  return out;
}

/** Follows a dotted path (numeric segments index arrays) and returns the object found there. */
function at(root: Obj, path: string): Obj {
  let cur: Json = root;
  for (const seg of path.split('.')) {
    if (Array.isArray(cur)) cur = cur[Number(seg)] as Json;
    else if (isObj(cur)) cur = cur[seg] as Json;
    else throw new Error(`path ${path} breaks at ${seg}`);
    if (cur === undefined) throw new Error(`path ${path}: no ${seg}`);
  }
  if (!isObj(cur)) throw new Error(`path ${path} is not an object`);
  return cur;
}

const SCHEMA = 'spec.versions.0.schema.openAPIV3Schema';
const CS_SPEC = `${SCHEMA}.properties.spec`;
const CS_AGENT = `${CS_SPEC}.properties.agent`;
const CS_TOOLBOX = `${CS_SPEC}.properties.toolboxes.items`;

function clone(o: Obj): Obj {
  return structuredClone(o);
}

describe('CRD manifests are schema-compatible with the reference CRDs', () => {
  it('finds the upstream CRDs in test/fixtures/upstream-crds', () => {
    expect(
      existsSync(REFERENCE_DIR),
      `reference CRDs not found at ${REFERENCE_DIR} (test/fixtures/upstream-crds/)`,
    ).toBe(true);
    expect(
      readdirSync(REFERENCE_DIR)
        .filter((f) => f.endsWith('.yaml'))
        .sort(),
    ).toEqual([...FILES].sort());
  });

  for (const file of FILES) {
    it(`${file} matches the reference except for descriptions`, () => {
      const ours = loadSingleDoc(join(OURS_DIR, file));
      const ref = loadSingleDoc(join(REFERENCE_DIR, file));
      expect(diffCrds(ours, ref)).toEqual([]);
    });

    it(`${file} carries its own descriptions, not the reference's`, () => {
      const collect = (v: Json, acc: string[], parentKey?: string): string[] => {
        if (Array.isArray(v)) {
          for (const x of v) collect(x, acc);
        } else if (isObj(v)) {
          for (const [k, x] of Object.entries(v)) {
            if (k === 'description' && parentKey !== 'properties' && typeof x === 'string')
              acc.push(x.trim());
            else collect(x, acc, k);
          }
        }
        return acc;
      };
      const ours = collect(loadSingleDoc(join(OURS_DIR, file)), []);
      const ref = new Set(collect(loadSingleDoc(join(REFERENCE_DIR, file)), []));
      expect(ours.length).toBeGreaterThan(10);
      expect(ours.filter((d) => ref.has(d))).toEqual([]);
    });
  }

  it('config/crd/kustomization.yaml lists exactly the two CRDs', () => {
    const k = loadSingleDoc(join(OURS_DIR, 'kustomization.yaml'));
    expect([...((k.resources as string[]) ?? [])].sort()).toEqual([...FILES].sort());
  });
});

describe('the comparator bites', () => {
  const cs = loadSingleDoc(join(OURS_DIR, FILES[0]!));
  const ch = loadSingleDoc(join(OURS_DIR, FILES[1]!));
  const csRef = loadSingleDoc(join(REFERENCE_DIR, FILES[0]!));
  const chRef = loadSingleDoc(join(REFERENCE_DIR, FILES[1]!));

  /** Applies `mutate` to a copy of `base` and returns the differences against `ref`. */
  const mutated = (base: Obj, ref: Obj, mutate: (c: Obj) => void): string[] => {
    const c = clone(base);
    mutate(c);
    return diffCrds(c, ref);
  };

  const cases: Array<[string, Obj, Obj, (c: Obj) => void, RegExp]> = [
    [
      'a dropped enum value',
      cs,
      csRef,
      (c) => {
        const p = at(c, `${CS_SPEC}.properties.snapshotPolicy`);
        p.enum = (p.enum as string[]).filter((v) => v !== 'never');
      },
      /snapshotPolicy\.enum/,
    ],
    [
      'an added enum value',
      ch,
      chRef,
      (c) => {
        (at(c, `${SCHEMA}.properties.spec.properties.desire`).enum as string[]).push('Sleep');
      },
      /desire\.enum/,
    ],
    [
      'a dropped default',
      cs,
      csRef,
      (c) => {
        delete at(c, `${CS_AGENT}.properties.mode`).default;
      },
      /agent\.properties\.mode\.default: missing in ours/,
    ],
    [
      'a changed default',
      cs,
      csRef,
      (c) => {
        at(c, `${CS_TOOLBOX}.properties.mode`).default = 'clone';
      },
      /toolboxes\.items\.properties\.mode\.default: ours "clone", reference "run"/,
    ],
    [
      'the empty-string default of envFrom configMapRef.name',
      cs,
      csRef,
      (c) => {
        delete at(c, `${CS_AGENT}.properties.envFrom.items.properties.configMapRef.properties.name`).default;
      },
      /configMapRef\.properties\.name\.default/,
    ],
    [
      'a dropped property',
      cs,
      csRef,
      (c) => {
        delete (at(c, `${CS_TOOLBOX}.properties`) as Obj).vncPort;
      },
      /toolboxes\.items\.properties\.vncPort: missing in ours/,
    ],
    [
      'an extra property',
      ch,
      chRef,
      (c) => {
        (at(c, `${SCHEMA}.properties.status.properties`) as Obj).nodeName = { type: 'string' };
      },
      /status\.properties\.nodeName: not in the reference/,
    ],
    [
      'an extra property literally named "description"',
      ch,
      chRef,
      (c) => {
        (at(c, `${SCHEMA}.properties.spec.properties`) as Obj).description = { type: 'string' };
      },
      /spec\.properties\.description: not in the reference/,
    ],
    [
      'a dropped required entry',
      ch,
      chRef,
      (c) => {
        at(c, `${SCHEMA}.properties.spec`).required = ['podRef'];
      },
      /spec\.required/,
    ],
    [
      'a changed CEL message',
      cs,
      csRef,
      (c) => {
        const rules = at(c, CS_SPEC)['x-kubernetes-validations'] as Obj[];
        rules[1]!.message = 'snapshotCompatibilityClass cannot change';
      },
      /x-kubernetes-validations\[1\]\.message/,
    ],
    [
      'a changed CEL rule',
      ch,
      chRef,
      (c) => {
        const rules = at(c, `${SCHEMA}.properties.spec.properties.podRef`)[
          'x-kubernetes-validations'
        ] as Obj[];
        rules[0]!.rule = 'true';
      },
      /podRef\.x-kubernetes-validations\[0\]\.rule/,
    ],
    [
      'a dropped CEL rule',
      cs,
      csRef,
      (c) => {
        (at(c, CS_SPEC)['x-kubernetes-validations'] as Obj[]).pop();
      },
      /x-kubernetes-validations: 1 items, reference has 2/,
    ],
    [
      'a dropped printer column',
      cs,
      csRef,
      (c) => {
        (at(c, 'spec.versions.0').additionalPrinterColumns as Obj[]).splice(1, 1);
      },
      /additionalPrinterColumns/,
    ],
    [
      'a changed printer column path',
      ch,
      chRef,
      (c) => {
        (at(c, 'spec.versions.0').additionalPrinterColumns as Obj[])[0]!.jsonPath = '.status.vmName';
      },
      /additionalPrinterColumns\[0\]\.jsonPath/,
    ],
    [
      'a dropped status subresource',
      ch,
      chRef,
      (c) => {
        delete at(c, 'spec.versions.0').subresources;
      },
      /subresources: missing in ours/,
    ],
    [
      'a changed pattern',
      cs,
      csRef,
      (c) => {
        at(c, `${CS_TOOLBOX}.properties.name`).pattern = '^[a-z0-9-]+$';
      },
      /toolboxes\.items\.properties\.name\.pattern/,
    ],
    [
      'a changed bound',
      cs,
      csRef,
      (c) => {
        at(c, `${CS_AGENT}.properties.probePort`).maximum = 65536;
      },
      /probePort\.maximum/,
    ],
    [
      'a dropped int-or-string marker',
      cs,
      csRef,
      (c) => {
        delete at(c, `${CS_AGENT}.properties.storage`)['x-kubernetes-int-or-string'];
      },
      /storage\.x-kubernetes-int-or-string/,
    ],
    [
      'a dropped list-map key',
      cs,
      csRef,
      (c) => {
        at(c, `${SCHEMA}.properties.status.properties.agents`)['x-kubernetes-list-map-keys'] = ['podName'];
      },
      /agents\.x-kubernetes-list-map-keys\[0\]/,
    ],
    [
      'a changed format',
      cs,
      csRef,
      (c) => {
        at(c, `${SCHEMA}.properties.status.properties.observedGeneration`).format = 'int32';
      },
      /observedGeneration\.format/,
    ],
    [
      'a dropped short name',
      ch,
      chRef,
      (c) => {
        at(c, 'spec.names').shortNames = ['ch'];
      },
      /names\.shortNames/,
    ],
    [
      'a changed scope',
      cs,
      csRef,
      (c) => {
        (c.spec as Obj).scope = 'Cluster';
      },
      /spec\.scope/,
    ],
  ];

  for (const [what, base, ref, mutate, expected] of cases) {
    it(`reports ${what}`, () => {
      expect(diffCrds(base, ref)).toEqual([]);
      const diffs = mutated(base, ref, mutate);
      expect(diffs.length).toBeGreaterThan(0);
      expect(
        diffs.some((d) => expected.test(d)),
        diffs.join('\n'),
      ).toBe(true);
    });
  }

  it('ignores description changes and metadata annotations', () => {
    const diffs = mutated(cs, csRef, (c) => {
      at(c, `${CS_AGENT}.properties.image`).description = 'something else entirely';
      (c.metadata as Obj).annotations = { 'controller-gen.kubebuilder.io/version': 'v9' };
    });
    expect(diffs).toEqual([]);
  });

  it('does not ignore a renamed CRD', () => {
    const diffs = mutated(ch, chRef, (c) => {
      (c.metadata as Obj).name = 'hibernations.cocoonset.cocoonstack.io';
    });
    expect(diffs).toEqual([
      'metadata.name: ours "hibernations.cocoonset.cocoonstack.io", reference "cocoonhibernations.cocoonset.cocoonstack.io"',
    ]);
  });
});
