/**
 * The install manifests (config/default = namespace + CRDs + RBAC + manager) render with kustomize and say
 * what the operator needs (docs/installation.md#in-a-cluster-kustomize): the namespace, the service account,
 * a binding to the ClusterRole, a Deployment whose environment uses only settings src/config.ts knows, and
 * samples that validate against our own CRD schemas.
 *
 * kubectl is found as $KUBECTL, else the project's built kubectl (scripts/tools.sh path kube), else
 * `kubectl` on PATH. Without one this suite fails: it must not pass without rendering.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { ENV_SETTINGS } from '../../src/config.js';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Obj = { [k: string]: Json };
// biome-ignore lint/suspicious/noExplicitAny: rendered manifests are navigated freely in assertions.
type K8sObject = any;

function isObj(v: Json | undefined): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Locates a kubectl binary, or returns the places that were tried. */
function findKubectl(): { path: string } | { tried: string[] } {
  const tried: string[] = [];
  const candidates: string[] = [];
  if (process.env.KUBECTL) candidates.push(process.env.KUBECTL);
  try {
    const dir = execFileSync('bash', [join(REPO_ROOT, 'scripts/tools.sh'), 'path', 'kube'], {
      encoding: 'utf8',
    }).trim();
    if (dir) candidates.push(join(dir, 'bin/kubectl'));
  } catch {
    tried.push('scripts/tools.sh path kube (failed)');
  }
  for (const c of candidates) {
    if (existsSync(c)) return { path: c };
    tried.push(c);
  }
  try {
    execFileSync('kubectl', ['version', '--client'], { stdio: 'ignore' });
    return { path: 'kubectl' };
  } catch {
    tried.push('kubectl on PATH');
  }
  return { tried };
}

/** Runs `kubectl kustomize <dir>` and returns the rendered objects. */
function kustomize(kubectl: string, dir: string): K8sObject[] {
  const out = execFileSync(kubectl, ['kustomize', join(REPO_ROOT, dir)], { encoding: 'utf8' });
  return parseAllDocuments(out)
    .filter((d) => d.contents !== null)
    .map((d) => d.toJS());
}

/**
 * A small structural validator for the subset of OpenAPI v3 that our CRDs use (types, enums, required,
 * patterns, lengths, bounds, additionalProperties, int-or-string). Returns one line per violation.
 */
function validate(value: Json | undefined, schema: Obj, path: string, errs: string[] = []): string[] {
  const fail = (msg: string) => errs.push(`${path || '<root>'}: ${msg}`);
  if (value === undefined) return errs;
  const checkString = (s: string) => {
    if (Array.isArray(schema.enum) && !schema.enum.includes(s)) fail(`"${s}" not in enum`);
    if (typeof schema.pattern === 'string' && !new RegExp(schema.pattern).test(s))
      fail(`"${s}" does not match ${schema.pattern}`);
    if (typeof schema.minLength === 'number' && s.length < schema.minLength) fail('too short');
    if (typeof schema.maxLength === 'number' && s.length > schema.maxLength) fail('too long');
  };
  const checkNumber = (n: number) => {
    if (typeof schema.minimum === 'number' && n < schema.minimum) fail(`${n} < ${schema.minimum}`);
    if (typeof schema.maximum === 'number' && n > schema.maximum) fail(`${n} > ${schema.maximum}`);
  };
  if (schema['x-kubernetes-int-or-string'] === true) {
    if (typeof value === 'string') checkString(value);
    else if (!Number.isInteger(value)) fail('expected an integer or a string');
    return errs;
  }
  switch (schema.type) {
    case 'object': {
      if (!isObj(value)) {
        fail('expected an object');
        break;
      }
      const props = isObj(schema.properties) ? schema.properties : undefined;
      for (const r of (schema.required as string[] | undefined) ?? []) {
        if (!(r in value)) fail(`missing required "${r}"`);
      }
      if (!props && !isObj(schema.additionalProperties)) break; // free-form (e.g. metadata)
      for (const [k, v] of Object.entries(value)) {
        const sub = props?.[k] ?? schema.additionalProperties;
        if (isObj(sub)) validate(v, sub, path ? `${path}.${k}` : k, errs);
        else if (schema['x-kubernetes-preserve-unknown-fields'] !== true) fail(`unknown field "${k}"`);
      }
      break;
    }
    case 'array':
      if (!Array.isArray(value)) fail('expected an array');
      else {
        for (const [i, v] of value.entries()) validate(v, schema.items as Obj, `${path}[${i}]`, errs);
      }
      break;
    case 'string':
      if (typeof value !== 'string') fail('expected a string');
      else checkString(value);
      break;
    case 'integer':
      if (!Number.isInteger(value)) fail('expected an integer');
      else checkNumber(value as number);
      break;
    case 'boolean':
      if (typeof value !== 'boolean') fail('expected a boolean');
      break;
    default:
      fail(`schema type ${String(schema.type)} not handled by this validator`);
  }
  return errs;
}

function crdSchema(file: string): Obj {
  const crd = parse(readFileSync(join(REPO_ROOT, 'config/crd', file), 'utf8')) as K8sObject;
  return crd.spec.versions[0].schema.openAPIV3Schema as Obj;
}

/** The Deployment's environment, exactly as this project fixes it (docs/configuration.md#settings). */
const EXPECTED_ENV: Record<string, string> = {
  OCI_REGISTRY: '',
  TEMPORAL_ADDRESS: 'temporal-frontend.temporal:7233',
  TEMPORAL_NAMESPACE: 'default',
  TEMPORAL_TASK_QUEUE: 'cocoon-operator',
  COCOONSET_CONCURRENCY: '4',
  HIBERNATION_CONCURRENCY: '4',
  METRICS_ADDR: ':8080',
  PROBE_ADDR: ':8081',
  LEADER_ELECT: 'true',
  OPERATOR_LOG_LEVEL: 'info',
};
/** Filled from the downward API; config.ts reads it as the leader-election namespace fallback. */
const DOWNWARD_ENV = { POD_NAMESPACE: 'metadata.namespace' };

/** The ClusterRole file; least privilege against the code is proven by test/unit/rbac-coverage.test.ts. */
const ROLE_FILE = new URL('../../config/rbac/role.yaml', import.meta.url);

function permissions(role: K8sObject): string[] {
  const out: string[] = [];
  for (const rule of role.rules ?? []) {
    for (const g of rule.apiGroups ?? [])
      for (const r of rule.resources ?? [])
        for (const v of rule.verbs ?? []) out.push(`${g === '' ? 'core' : g}/${r} ${v}`);
  }
  return out.sort();
}

function portOf(addr: string): number {
  const m = /:(\d+)$/.exec(addr);
  if (!m) throw new Error(`no port in ${addr}`);
  return Number(m[1]);
}

describe('config/default renders and is complete', () => {
  let objects: K8sObject[] = [];
  const byKind = (kind: string): K8sObject[] => objects.filter((o) => o.kind === kind);
  const one = (kind: string): K8sObject => {
    const found = byKind(kind);
    expect(found, `exactly one ${kind}`).toHaveLength(1);
    return found[0];
  };

  beforeAll(() => {
    const k = findKubectl();
    if (!('path' in k)) {
      throw new Error(
        `kubectl not found (tried ${k.tried.join(', ')}); build it with \`bash scripts/tools.sh kube\` or set KUBECTL`,
      );
    }
    objects = kustomize(k.path, 'config/default');
  });

  it('renders exactly the expected objects', () => {
    const ids = objects.map((o) => `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`).sort();
    expect(ids).toEqual(
      [
        'ClusterRole//cocoon-operator',
        'ClusterRoleBinding//cocoon-operator',
        'CustomResourceDefinition//cocoonhibernations.cocoonset.cocoonstack.io',
        'CustomResourceDefinition//cocoonsets.cocoonset.cocoonstack.io',
        'Deployment/cocoon-system/cocoon-operator',
        'Namespace//cocoon-system',
        'ServiceAccount/cocoon-system/cocoon-operator',
      ].sort(),
    );
    for (const o of objects) {
      expect(o.metadata.labels?.['app.kubernetes.io/name'], `${o.kind} label`).toMatch(/^cocoon-/);
    }
  });

  it('ships the CRD files unchanged', () => {
    for (const crd of byKind('CustomResourceDefinition')) {
      const file = `config/crd/cocoonset.cocoonstack.io_${crd.spec.names.plural}.yaml`;
      expect(crd).toEqual(parse(readFileSync(join(REPO_ROOT, file), 'utf8')));
    }
  });

  it('binds the cocoon-operator service account to the ClusterRole', () => {
    const sa = one('ServiceAccount');
    const binding = one('ClusterRoleBinding');
    const role = one('ClusterRole');
    expect(binding.roleRef).toEqual({
      apiGroup: 'rbac.authorization.k8s.io',
      kind: 'ClusterRole',
      name: role.metadata.name,
    });
    expect(binding.subjects).toEqual([
      { kind: 'ServiceAccount', name: sa.metadata.name, namespace: sa.metadata.namespace },
    ]);
    // cocoon-webhook admits VM pods created by exactly this identity by default.
    expect(`${sa.metadata.namespace}:${sa.metadata.name}`).toBe('cocoon-system:cocoon-operator');
  });

  it('renders the ClusterRole of config/rbac/role.yaml unchanged, without wildcards', () => {
    const perms = permissions(one('ClusterRole'));
    const file = parse(readFileSync(ROLE_FILE, 'utf8')) as K8sObject;
    expect(perms).toEqual(permissions(file));
    expect(perms.length).toBeGreaterThan(0);
    expect(perms.filter((p) => p.includes('*'))).toEqual([]);
  });

  it('runs the operator as the service account with the agreed container settings', () => {
    const dep = one('Deployment');
    const pod = dep.spec.template.spec;
    expect(dep.metadata.namespace).toBe(one('Namespace').metadata.name);
    expect(pod.serviceAccountName).toBe(one('ServiceAccount').metadata.name);
    for (const [k, v] of Object.entries(dep.spec.selector.matchLabels)) {
      expect(dep.spec.template.metadata.labels[k]).toBe(v);
    }
    expect(pod.containers).toHaveLength(1);
    const c = pod.containers[0];
    expect(c.image).toBe('ghcr.io/cocoonstack/cocoon-operator-ts:latest');
    expect(c.args).toBeUndefined();
    expect(c.command).toBeUndefined();
    expect(c.resources).toEqual({
      requests: { cpu: '100m', memory: '128Mi' },
      limits: { cpu: '1000m', memory: '512Mi' },
    });
    expect(c.securityContext).toMatchObject({
      runAsNonRoot: true,
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(pod.securityContext.runAsNonRoot).toBe(true);
    // The image's USER is 65532; kubelet can only verify runAsNonRoot against a numeric uid.
    expect(pod.securityContext.runAsUser).toBe(65532);
  });

  it('sets only environment that src/config.ts knows, and every required setting', () => {
    const c = one('Deployment').spec.template.spec.containers[0];
    const env = c.env as Array<{ name: string; value?: string; valueFrom?: K8sObject }>;
    const names = env.map((e) => e.name);
    expect(new Set(names).size, 'no duplicate env names').toBe(names.length);
    expect([...names].sort()).toEqual([...Object.keys(EXPECTED_ENV), ...Object.keys(DOWNWARD_ENV)].sort());

    const known = new Set(ENV_SETTINGS.map((s) => s.env));
    const unknown = names.filter((n) => !known.has(n) && !(n in DOWNWARD_ENV));
    expect(unknown, 'env names not in ENV_SETTINGS').toEqual([]);
    const required = ENV_SETTINGS.filter((s) => s.required).map((s) => s.env);
    expect(required.length).toBeGreaterThan(0);
    expect(
      required.filter((r) => !names.includes(r)),
      'required settings missing',
    ).toEqual([]);

    for (const e of env) {
      if (e.name in DOWNWARD_ENV) {
        expect(e.valueFrom?.fieldRef?.fieldPath).toBe(DOWNWARD_ENV[e.name as keyof typeof DOWNWARD_ENV]);
      } else {
        expect(e.value ?? '', e.name).toBe(EXPECTED_ENV[e.name]);
      }
    }
  });

  it('exposes the metrics and probe listeners the environment configures', () => {
    const c = one('Deployment').spec.template.spec.containers[0];
    const env = Object.fromEntries(
      (c.env as Array<{ name: string; value?: string }>).map((e) => [e.name, e.value]),
    );
    const ports = Object.fromEntries(
      (c.ports as Array<{ name: string; containerPort: number }>).map((p) => [p.name, p.containerPort]),
    );
    expect(ports.metrics).toBe(portOf(env.METRICS_ADDR!));
    expect(ports.probe).toBe(portOf(env.PROBE_ADDR!));
    expect(c.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'probe' });
    expect(c.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'probe' });
  });
});

describe('config/samples', () => {
  const load = (file: string): K8sObject =>
    parse(readFileSync(join(REPO_ROOT, 'config/samples', file), 'utf8'));
  const cs = load('cocoonset.yaml');
  const ch = load('cocoonhibernation.yaml');
  const csSchema = crdSchema('cocoonset.cocoonstack.io_cocoonsets.yaml');
  const chSchema = crdSchema('cocoonset.cocoonstack.io_cocoonhibernations.yaml');

  it('validate against our CRD schemas', () => {
    expect(cs.apiVersion).toBe('cocoonset.cocoonstack.io/v1');
    expect(cs.kind).toBe('CocoonSet');
    expect(validate(cs, csSchema, '')).toEqual([]);
    expect(ch.kind).toBe('CocoonHibernation');
    expect(validate(ch, chSchema, '')).toEqual([]);
  });

  it('the validator rejects unknown fields, bad enums, bad patterns and missing required fields', () => {
    const bad = structuredClone(cs);
    bad.spec.agent.imag = 'typo';
    bad.spec.snapshotPolicy = 'sometimes';
    bad.spec.toolboxes[0].name = 'Browser';
    bad.spec.agent.storage = '40 GB';
    delete bad.spec.toolboxes[1].name;
    const errs = validate(bad, csSchema, '');
    expect(errs).toEqual(
      expect.arrayContaining([
        'spec.agent: unknown field "imag"',
        expect.stringMatching(/^spec\.snapshotPolicy: "sometimes" not in enum/),
        expect.stringMatching(/^spec\.toolboxes\[0\]\.name: "Browser" does not match/),
        expect.stringMatching(/^spec\.agent\.storage: "40 GB" does not match/),
        'spec.toolboxes[1]: missing required "name"',
      ]),
    );
    expect(errs).toHaveLength(5);
  });

  it('show the documented shape: main + 2 sub-agents, a run and a static toolbox, main-only snapshots', () => {
    expect(cs.spec.agent.replicas).toBe(2);
    expect(cs.spec.snapshotPolicy).toBe('main-only');
    expect(cs.spec.nodePool).toBeTruthy();
    expect(cs.spec.agent.resources.requests).toBeTruthy();
    const modes = (cs.spec.toolboxes as K8sObject[]).map((t) => t.mode ?? 'run').sort();
    expect(modes).toEqual(['run', 'static']);
    for (const t of cs.spec.toolboxes as K8sObject[]) {
      // cocoon-webhook: static needs staticIP + staticVMID; run/clone need an image.
      if (t.mode === 'static') expect([t.staticIP, t.staticVMID].every(Boolean)).toBe(true);
      else expect(t.image).toBeTruthy();
    }
  });

  it('apply the set alone, so it comes up Running; the CocoonHibernation is a separate file to apply', () => {
    const k = parse(readFileSync(join(REPO_ROOT, 'config/samples/kustomization.yaml'), 'utf8'));
    expect(k.resources).toEqual(['cocoonset.yaml']);
  });

  it('hibernate the main pod of the sample set, named after it', () => {
    expect(ch.metadata.namespace).toBe(cs.metadata.namespace);
    expect(ch.spec.podRef.name).toBe(`${cs.metadata.name}-0`);
    expect(ch.metadata.name).toBe(ch.spec.podRef.name);
  });
});
