/**
 * Static RBAC inventory (issue 4; docs/installation.md#in-a-cluster-kustomize): every Kubernetes API request
 * the operator's code (src/**\/*.ts) can make, classified as (apiGroup, resource, verb), against
 * config/rbac/role.yaml.
 *
 * How the inventory is taken (TypeScript syntax trees, no type checker):
 * - every import from `@kubernetes/client-node` must be a typed `*Api` client, `Watch`, or an inert helper
 *   (config, serializers, models); anything else (ListWatch, makeInformer, KubernetesObjectApi, Exec, …)
 *   fails the test until it is classified here;
 * - every property access whose name is a method of a client-node `*Api` class is a call site and must be
 *   in API_CALLS; CustomObjectsApi calls take their group and plural from the call's argument object,
 *   followed through spreads, local constants, imported constants and, for a function parameter, every
 *   call of that function;
 * - every `.watch(path, …)` on a `new Watch(…)` is a watch of the collection its path names (the path is
 *   resolved the same way; the namespace segment may stay unknown).
 * The role must grant every (group, resource, verb) found, and nothing else (least privilege).
 * test/e2e/rbac.test.ts proves the same role against the real apiserver.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

const ROOT = join(import.meta.dirname, '..', '..');
const CLIENT_NODE = '@kubernetes/client-node';

type Verb = 'get' | 'list' | 'watch' | 'create' | 'update' | 'patch' | 'delete' | 'deletecollection';

/** What one typed client method requests: a fixed resource, or the custom resource its arguments name. */
type Classification =
  | { group: string; resource: string; verb: Verb }
  | { custom: true; subresource?: 'status'; verb: Verb };

const coreRes = (resource: string, verb: Verb): Classification => ({ group: '', resource, verb });
const lease = (verb: Verb): Classification => ({ group: 'coordination.k8s.io', resource: 'leases', verb });
const cr = (verb: Verb, subresource?: 'status'): Classification => ({ custom: true, subresource, verb });

/**
 * client-node method → the request it makes (the `WithHttpInfo` twin of a method is the same request).
 * A new kind of call in src/ fails the inventory until it is added here.
 */
const API_CALLS: Record<string, Classification> = {
  readNamespacedPod: coreRes('pods', 'get'),
  listNamespacedPod: coreRes('pods', 'list'),
  listNode: coreRes('nodes', 'list'),
  listNamespacedLimitRange: coreRes('limitranges', 'list'),
  listNamespacedResourceQuota: coreRes('resourcequotas', 'list'),
  readNamespace: coreRes('namespaces', 'get'),
  listPodForAllNamespaces: coreRes('pods', 'list'),
  createNamespacedPod: coreRes('pods', 'create'),
  replaceNamespacedPod: coreRes('pods', 'update'),
  patchNamespacedPod: coreRes('pods', 'patch'),
  deleteNamespacedPod: coreRes('pods', 'delete'),
  readNamespacedPodStatus: coreRes('pods/status', 'get'),
  createNamespacedEvent: coreRes('events', 'create'),
  patchNamespacedEvent: coreRes('events', 'patch'),
  listNamespacedEvent: coreRes('events', 'list'),
  readNamespacedEvent: coreRes('events', 'get'),
  readNamespacedLease: lease('get'),
  createNamespacedLease: lease('create'),
  replaceNamespacedLease: lease('update'),
  patchNamespacedLease: lease('patch'),
  deleteNamespacedLease: lease('delete'),
  getNamespacedCustomObject: cr('get'),
  listNamespacedCustomObject: cr('list'),
  listClusterCustomObject: cr('list'),
  listCustomObjectForAllNamespaces: cr('list'),
  createNamespacedCustomObject: cr('create'),
  replaceNamespacedCustomObject: cr('update'),
  patchNamespacedCustomObject: cr('patch'),
  deleteNamespacedCustomObject: cr('delete'),
  getNamespacedCustomObjectStatus: cr('get', 'status'),
  replaceNamespacedCustomObjectStatus: cr('update', 'status'),
  patchNamespacedCustomObjectStatus: cr('patch', 'status'),
};

/** client-node value exports that never talk to the apiserver themselves. */
const INERT_IMPORTS = new Set([
  'KubeConfig',
  'PatchStrategy',
  'setHeaderOptions',
  'ObjectSerializer',
  'ApiException',
  'V1MicroTime',
  // Request plumbing of the keep-alive transport (src/kube/transport.ts): it only carries requests the
  // typed API methods above build.
  'createConfiguration',
  'ServerConfiguration',
  'IsomorphicFetchHttpLibrary',
  'wrapHttpLibrary',
  'ResponseContext',
  'SelfDecodingBody',
]);

/** The typed client classes of client-node (`KubernetesObjectApi` is generic: not auditable by name). */
const API_CLASSES = new Map<string, Set<string>>();
for (const [name, value] of Object.entries(k8s)) {
  if (!name.endsWith('Api') || name === 'KubernetesObjectApi' || typeof value !== 'function') continue;
  const methods = Object.getOwnPropertyNames((value as { prototype: object }).prototype ?? {}).filter(
    (m) => m !== 'constructor',
  );
  if (methods.length > 0) API_CLASSES.set(name, new Set(methods));
}
const API_METHODS = new Set([...API_CLASSES.values()].flatMap((s) => [...s]));

/** One request the code can make, with where it is made. */
interface CallSite {
  group: string;
  resource: string;
  verb: Verb;
  /** `file:line method` */
  where: string;
}

interface Inventory {
  calls: CallSite[];
  /** What the scanner could not classify or resolve; must be empty. */
  problems: string[];
}

/** `core/pods get`, `coordination.k8s.io/leases update`. */
function permKey(group: string, resource: string, verb: string): string {
  return `${group === '' ? 'core' : group}/${resource} ${verb}`;
}

const isFunctionLike = (n: ts.Node): n is ts.SignatureDeclaration & { name?: ts.Node } =>
  ts.isFunctionDeclaration(n) ||
  ts.isFunctionExpression(n) ||
  ts.isArrowFunction(n) ||
  ts.isMethodDeclaration(n);

/** Group and plural of a custom resource kind (from the CRDs in config/crd). */
type KindMap = Map<string, { group: string; plural: string }>;

/**
 * Scans TypeScript sources (repo-relative path → text) for Kubernetes API requests. Pure: the caller
 * passes the files, so the scanner itself is tested on synthetic sources below. `ownerKinds` maps the kinds
 * an owner reference may name to their resource (for the blockOwnerDeletion rule).
 */
function scanSources(files: Map<string, string>, ownerKinds: KindMap = new Map()): Inventory {
  const parsed = new Map<string, ts.SourceFile>();
  for (const [path, text] of files) {
    parsed.set(path, ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS));
  }
  const calls: CallSite[] = [];
  const problems: string[] = [];
  const where = (node: ts.Node, what: string) => {
    const sf = node.getSourceFile();
    return `${sf.fileName}:${sf.getLineAndCharacterOfPosition(node.getStart()).line + 1} ${what}`;
  };

  function visitAll(node: ts.Node, fn: (n: ts.Node) => void): void {
    fn(node);
    ts.forEachChild(node, (c) => visitAll(c, fn));
  }

  /** The exported `const name = …` of a repo-relative module, resolved; undefined when not found. */
  function resolveExport(
    fromFile: string,
    spec: string,
    name: string,
    wildcard: boolean,
    depth: number,
  ): string[] | undefined {
    if (!spec.startsWith('.')) return undefined;
    const target = join(dirname(fromFile), spec).replace(/\.js$/, '.ts');
    const sf = parsed.get(target);
    if (!sf) return undefined;
    for (const st of sf.statements) {
      if (!ts.isVariableStatement(st)) continue;
      if (!st.modifiers?.some((m) => m.kind === ts.SyntaxKind.ExportKeyword)) continue;
      for (const d of st.declarationList.declarations) {
        if (ts.isIdentifier(d.name) && d.name.text === name && d.initializer)
          return resolveStrings(d.initializer, wildcard, depth + 1);
      }
    }
    return undefined;
  }

  /** Every call `fnName(…)` in the sources; the argument at `index` of each (undefined when absent). */
  function callArguments(fnName: string, index: number): Array<ts.Expression | undefined> {
    const out: Array<ts.Expression | undefined> = [];
    for (const sf of parsed.values()) {
      visitAll(sf, (n) => {
        if (ts.isCallExpression(n) && ts.isIdentifier(n.expression) && n.expression.text === fnName) {
          out.push(n.arguments[index]);
        }
      });
    }
    return out;
  }

  /** Values of a parameter: the matching argument of every call of its (named) function. */
  function resolveParameter(
    fn: ts.SignatureDeclaration,
    index: number,
    wildcard: boolean,
    depth: number,
  ): string[] | undefined {
    let name: string | undefined;
    if (ts.isFunctionDeclaration(fn) && fn.name) name = fn.name.text;
    else if (ts.isVariableDeclaration(fn.parent) && ts.isIdentifier(fn.parent.name))
      name = fn.parent.name.text;
    if (!name) return undefined;
    const args = callArguments(name, index);
    if (args.length === 0) return undefined;
    const out: string[] = [];
    for (const arg of args) {
      const init = fn.parameters[index]?.initializer;
      const expr = arg ?? init;
      if (!expr || ts.isSpreadElement(expr)) return undefined;
      const v = resolveStrings(expr, wildcard, depth + 1);
      if (!v) return undefined;
      out.push(...v);
    }
    return out;
  }

  /** The string values an identifier can have at `id`'s position (parameters, local consts, imports). */
  function resolveIdentifier(id: ts.Identifier, wildcard: boolean, depth: number): string[] | undefined {
    const name = id.text;
    for (let n: ts.Node | undefined = id.parent; n; n = n.parent) {
      if (isFunctionLike(n)) {
        const i = n.parameters.findIndex((p) => ts.isIdentifier(p.name) && p.name.text === name);
        if (i >= 0) return resolveParameter(n, i, wildcard, depth);
      }
      if (ts.isBlock(n) || ts.isSourceFile(n)) {
        for (const st of n.statements) {
          if (ts.isVariableStatement(st)) {
            for (const d of st.declarationList.declarations) {
              if (ts.isIdentifier(d.name) && d.name.text === name && d.initializer)
                return resolveStrings(d.initializer, wildcard, depth + 1);
            }
          }
          if (ts.isSourceFile(n) && ts.isImportDeclaration(st) && ts.isStringLiteral(st.moduleSpecifier)) {
            const named = st.importClause?.namedBindings;
            if (named && ts.isNamedImports(named)) {
              for (const el of named.elements) {
                if (el.name.text === name) {
                  return resolveExport(
                    n.fileName,
                    st.moduleSpecifier.text,
                    (el.propertyName ?? el.name).text,
                    wildcard,
                    depth,
                  );
                }
              }
            }
          }
        }
      }
    }
    return undefined;
  }

  /**
   * Every string an expression can evaluate to, or undefined when that cannot be known statically. With
   * `wildcard`, an unknown part of a template literal becomes `*` (for the namespace segment of a path).
   */
  function resolveStrings(expr: ts.Expression, wildcard: boolean, depth = 0): string[] | undefined {
    if (depth > 12) return undefined;
    if (ts.isStringLiteral(expr) || ts.isNoSubstitutionTemplateLiteral(expr)) return [expr.text];
    if (ts.isParenthesizedExpression(expr) || ts.isAsExpression(expr) || ts.isNonNullExpression(expr))
      return resolveStrings(expr.expression, wildcard, depth + 1);
    if (ts.isConditionalExpression(expr)) {
      const a = resolveStrings(expr.whenTrue, wildcard, depth + 1);
      const b = resolveStrings(expr.whenFalse, wildcard, depth + 1);
      return a && b ? [...a, ...b] : undefined;
    }
    if (ts.isIdentifier(expr)) return resolveIdentifier(expr, wildcard, depth + 1);
    if (ts.isTemplateExpression(expr)) {
      let acc = [expr.head.text];
      for (const span of expr.templateSpans) {
        const part = resolveStrings(span.expression, wildcard, depth + 1) ?? (wildcard ? ['*'] : undefined);
        if (!part) return undefined;
        acc = acc.flatMap((a) => part.map((p) => `${a}${p}${span.literal.text}`));
      }
      return acc;
    }
    return undefined;
  }

  /** The properties of an object argument, through spreads of local object constants. */
  function objectProps(expr: ts.Expression | undefined, depth = 0): Map<string, ts.Expression> | undefined {
    if (!expr || depth > 6) return undefined;
    if (ts.isIdentifier(expr)) {
      for (let n: ts.Node | undefined = expr.parent; n; n = n.parent) {
        if (!ts.isBlock(n) && !ts.isSourceFile(n)) continue;
        for (const st of n.statements) {
          if (!ts.isVariableStatement(st)) continue;
          for (const d of st.declarationList.declarations) {
            if (ts.isIdentifier(d.name) && d.name.text === expr.text)
              return objectProps(d.initializer, depth + 1);
          }
        }
      }
      return undefined;
    }
    if (!ts.isObjectLiteralExpression(expr)) return undefined;
    const props = new Map<string, ts.Expression>();
    for (const p of expr.properties) {
      if (ts.isPropertyAssignment(p) && (ts.isIdentifier(p.name) || ts.isStringLiteral(p.name)))
        props.set(p.name.text, p.initializer);
      else if (ts.isShorthandPropertyAssignment(p)) props.set(p.name.text, p.name);
      else if (ts.isSpreadAssignment(p)) {
        const inner = objectProps(p.expression, depth + 1);
        if (!inner) return undefined;
        for (const [k, v] of inner) props.set(k, v);
      }
    }
    return props;
  }

  function addCall(node: ts.Node, method: string, group: string, resource: string, verb: Verb): void {
    calls.push({ group, resource, verb, where: where(node, method) });
  }

  /** A typed client method accessed at `node` (a call or a reference). */
  function classifyMethod(
    node: ts.PropertyAccessExpression | ts.ElementAccessExpression,
    name: string,
  ): void {
    const method = name.replace(/WithHttpInfo$/, '');
    const c = API_CALLS[method];
    if (!c) {
      problems.push(`unclassified client-node method: ${where(node, name)} (add it to API_CALLS)`);
      return;
    }
    const call =
      ts.isCallExpression(node.parent) && node.parent.expression === node ? node.parent : undefined;
    const props = objectProps(call?.arguments[0]);
    const verbs: Verb[] = [c.verb];
    if (c.verb === 'list' && props?.has('watch')) verbs.push('watch');
    if (!('custom' in c)) {
      for (const v of verbs) addCall(node, name, c.group, c.resource, v);
      return;
    }
    const groupExpr = props?.get('group');
    const pluralExpr = props?.get('plural');
    const groups = groupExpr && resolveStrings(groupExpr, false);
    const plurals = pluralExpr && resolveStrings(pluralExpr, false);
    if (!groups || !plurals) {
      problems.push(`cannot resolve the group/plural of ${where(node, name)}`);
      return;
    }
    for (const g of new Set(groups))
      for (const p of new Set(plurals))
        for (const v of verbs) addCall(node, name, g, c.subresource ? `${p}/${c.subresource}` : p, v);
  }

  /**
   * An owner reference with `blockOwnerDeletion` (any value but a literal false): the
   * OwnerReferencesPermissionEnforcement admission plugin lets the creator set it only with `update` on the
   * owner's `finalizers` subresource. The owner is the literal's `kind`.
   */
  function classifyOwnerReference(prop: ts.PropertyAssignment): void {
    if (prop.initializer.kind === ts.SyntaxKind.FalseKeyword) return;
    const kindExpr = objectProps(prop.parent as ts.ObjectLiteralExpression)?.get('kind');
    const kinds = kindExpr && resolveStrings(kindExpr, false);
    if (!kinds) {
      problems.push(`cannot resolve the owner kind of ${where(prop, 'blockOwnerDeletion')}`);
      return;
    }
    for (const kind of new Set(kinds)) {
      const owner = ownerKinds.get(kind);
      if (!owner)
        problems.push(`owner kind ${kind} has no known resource: ${where(prop, 'blockOwnerDeletion')}`);
      else
        addCall(prop, `blockOwnerDeletion on a ${kind}`, owner.group, `${owner.plural}/finalizers`, 'update');
    }
  }

  /** A `.watch(path, …)` on a client-node Watch: a watch of the collection the path names. */
  function classifyWatch(call: ts.CallExpression): void {
    const arg = call.arguments[0];
    const paths = arg && resolveStrings(arg, true);
    if (!paths) {
      problems.push(`cannot resolve the path of ${where(call, 'Watch.watch')}`);
      return;
    }
    for (const path of new Set(paths)) {
      const target = parseCollectionPath(path);
      if (!target)
        problems.push(`watch path ${path} is not a resource collection: ${where(call, 'Watch.watch')}`);
      else addCall(call, `Watch.watch ${path}`, target.group, target.resource, 'watch');
    }
  }

  for (const [path, sf] of parsed) {
    const watchNames = new Set<string>();
    // Imports (and any other mention) of client-node.
    visitAll(sf, (n) => {
      if (!ts.isStringLiteral(n) || !n.text.startsWith(CLIENT_NODE)) return;
      const decl = n.parent;
      if (!ts.isImportDeclaration(decl) || decl.moduleSpecifier !== n) {
        problems.push(`unaudited reference to ${n.text}: ${where(n, '')}`);
        return;
      }
      const clause = decl.importClause;
      if (!clause || clause.isTypeOnly) return;
      if (clause.name) problems.push(`default import of ${n.text}: ${where(n, clause.name.text)}`);
      const named = clause.namedBindings;
      if (named && ts.isNamespaceImport(named)) {
        problems.push(`namespace import of ${n.text} cannot be audited: ${where(n, named.name.text)}`);
        return;
      }
      for (const el of named?.elements ?? []) {
        if (el.isTypeOnly) continue;
        const imported = (el.propertyName ?? el.name).text;
        const value = (k8s as Record<string, unknown>)[imported];
        const isModel = typeof value === 'function' && 'getAttributeTypeMap' in value;
        if (imported === 'Watch') watchNames.add(el.name.text);
        else if (!API_CLASSES.has(imported) && !INERT_IMPORTS.has(imported) && !isModel) {
          problems.push(`unclassified client-node import ${imported}: ${where(el, '')} (classify it here)`);
        }
      }
    });
    // Typed client calls, raw watches and owner references that block deletion.
    visitAll(sf, (n) => {
      if (
        ts.isPropertyAssignment(n) &&
        ts.isIdentifier(n.name) &&
        n.name.text === 'blockOwnerDeletion' &&
        ts.isObjectLiteralExpression(n.parent)
      ) {
        classifyOwnerReference(n);
      }
      if (ts.isPropertyAccessExpression(n) && API_METHODS.has(n.name.text)) classifyMethod(n, n.name.text);
      if (
        ts.isElementAccessExpression(n) &&
        ts.isStringLiteral(n.argumentExpression) &&
        API_METHODS.has(n.argumentExpression.text)
      ) {
        classifyMethod(n, n.argumentExpression.text);
      }
      if (ts.isNewExpression(n) && ts.isIdentifier(n.expression) && watchNames.has(n.expression.text)) {
        const parent = n.parent;
        if (ts.isVariableDeclaration(parent) && ts.isIdentifier(parent.name)) {
          const varName = parent.name.text;
          visitAll(sf, (m) => {
            if (
              ts.isCallExpression(m) &&
              ts.isPropertyAccessExpression(m.expression) &&
              ts.isIdentifier(m.expression.expression) &&
              m.expression.expression.text === varName
            ) {
              if (m.expression.name.text === 'watch') classifyWatch(m);
              else problems.push(`unknown Watch method: ${where(m, m.expression.name.text)}`);
            }
          });
        } else if (
          ts.isPropertyAccessExpression(parent) &&
          parent.name.text === 'watch' &&
          ts.isCallExpression(parent.parent)
        ) {
          classifyWatch(parent.parent);
        } else {
          problems.push(`Watch used in a way the scanner cannot follow: ${where(n, 'new Watch')}`);
        }
      }
    });
    if (!path.endsWith('.ts')) problems.push(`not a TypeScript file: ${path}`);
  }
  return { calls, problems };
}

/** `{group, resource}` of an apiserver collection path (`/api/v1/[namespaces/NS/]R`, `/apis/G/V/…`). */
function parseCollectionPath(path: string): { group: string; resource: string } | undefined {
  // An empty namespace segment is a branch the code guards with a condition the scanner does not evaluate.
  const core = /^\/api\/v1\/(?:namespaces\/[^/]*\/)?([a-z0-9.-]+)$/.exec(path);
  if (core) return { group: '', resource: core[1]! };
  const named = /^\/apis\/([a-z0-9.-]+)\/[a-z0-9]+\/(?:namespaces\/[^/]*\/)?([a-z0-9.-]+)$/.exec(path);
  if (named) return { group: named[1]!, resource: named[2]! };
  return undefined;
}

interface PolicyRule {
  apiGroups?: string[];
  resources?: string[];
  verbs?: string[];
  resourceNames?: string[];
  nonResourceURLs?: string[];
}

/** The permissions a ClusterRole grants, as permKey strings, plus rule shapes this check does not allow. */
function grantsOf(role: { rules?: PolicyRule[] }): { grants: Set<string>; problems: string[] } {
  const grants = new Set<string>();
  const problems: string[] = [];
  for (const [i, rule] of (role.rules ?? []).entries()) {
    if (rule.resourceNames?.length) problems.push(`rule ${i}: resourceNames (not modelled here)`);
    if (rule.nonResourceURLs?.length) problems.push(`rule ${i}: nonResourceURLs (the operator needs none)`);
    for (const g of rule.apiGroups ?? [])
      for (const r of rule.resources ?? [])
        for (const v of rule.verbs ?? []) {
          if ([g, r, v].some((s) => s.includes('*')))
            problems.push(`rule ${i}: wildcard in ${permKey(g, r, v)}`);
          grants.add(permKey(g, r, v));
        }
  }
  return { grants, problems };
}

/** Needed permissions (permKey → call sites) versus granted ones. */
function compare(
  needed: Map<string, string[]>,
  granted: Set<string>,
): { missing: string[]; superfluous: string[] } {
  return {
    missing: [...needed]
      .filter(([k]) => !granted.has(k))
      .map(([k, sites]) => `${k} (needed by ${sites.join(', ')})`)
      .sort(),
    superfluous: [...granted].filter((k) => !needed.has(k)).sort(),
  };
}

function neededOf(inv: Inventory): Map<string, string[]> {
  const needed = new Map<string, string[]>();
  for (const c of inv.calls) {
    const k = permKey(c.group, c.resource, c.verb);
    needed.set(k, [...(needed.get(k) ?? []), c.where]);
  }
  return needed;
}

/** Kind → group and plural of every CRD in config/crd. */
function crdKinds(): KindMap {
  const kinds: KindMap = new Map();
  const dir = join(ROOT, 'config/crd');
  for (const f of readdirSync(dir)) {
    if (!f.endsWith('.yaml') || f === 'kustomization.yaml') continue;
    const crd = parse(readFileSync(join(dir, f), 'utf8'));
    if (crd?.kind !== 'CustomResourceDefinition') continue;
    kinds.set(crd.spec.names.kind, { group: crd.spec.group, plural: crd.spec.names.plural });
  }
  return kinds;
}

function sourceFiles(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const e of readdirSync(join(ROOT, dir), { recursive: true, withFileTypes: true })) {
    if (!e.isFile() || !e.name.endsWith('.ts') || e.name.endsWith('.d.ts')) continue;
    const abs = join(e.parentPath, e.name);
    out.set(relative(ROOT, abs), readFileSync(abs, 'utf8'));
  }
  return out;
}

describe('the scanner (synthetic sources)', () => {
  const keys = "export const G = 'example.io';\nexport const P = 'widgets';\nexport const Q = 'gadgets';\n";

  it('follows spreads, local constants, imported constants and function parameters to every caller', () => {
    const a = [
      "import { CustomObjectsApi, CoreV1Api, Watch, type V1Pod } from '@kubernetes/client-node';",
      "import { G, P, Q } from './keys.js';",
      'export function source(api: CustomObjectsApi, kc: unknown, plural: string, ns = "") {',
      "  const req = { group: G, version: 'v1', plural };",
      // biome-ignore lint/suspicious/noTemplateCurlyInString: source text of a synthetic module
      '  const base = `/apis/${G}/v1`;',
      // biome-ignore lint/suspicious/noTemplateCurlyInString: source text of a synthetic module
      '  const path = ns ? `${base}/namespaces/${ns}/${plural}` : `${base}/${plural}`;',
      '  const w = new Watch(kc);',
      '  w.watch(path, {}, () => {}, () => {});',
      '  return api.listNamespacedCustomObject({ ...req, namespace: ns });',
      '}',
      'export const widgets = (api: CustomObjectsApi) => source(api, null, P, "x");',
      'export const gadgets = (api: CustomObjectsApi) => source(api, null, Q);',
      'export async function status(api: CustomObjectsApi) {',
      '  await api.patchNamespacedCustomObjectStatusWithHttpInfo({ group: G, version: "v1", plural: P, name: "n", namespace: "x", body: {} });',
      '}',
      'export async function pods(core: CoreV1Api) {',
      "  await core.readNamespacedPod({ name: 'a', namespace: 'b' });",
      "  await core.listNamespacedPod({ namespace: 'b', watch: true });",
      "  await new Watch(null).watch('/api/v1/namespaces', {}, () => {}, () => {});",
      '}',
    ].join('\n');
    const inv = scanSources(
      new Map([
        ['src/keys.ts', keys],
        ['src/a.ts', a],
      ]),
    );
    expect(inv.problems).toEqual([]);
    expect([...neededOf(inv).keys()].sort()).toEqual(
      [
        'example.io/widgets list',
        'example.io/gadgets list',
        'example.io/widgets watch',
        'example.io/gadgets watch',
        'example.io/widgets/status patch',
        'core/pods get',
        'core/pods list',
        'core/pods watch',
        'core/namespaces watch',
      ].sort(),
    );
  });

  it('asks for update on the owner finalizers when an owner reference blocks deletion', () => {
    const kinds: KindMap = new Map([['Widget', { group: 'example.io', plural: 'widgets' }]]);
    const a = [
      "import { W } from './kinds.js';",
      'export function ref(name: string, block: boolean) {',
      "  return { apiVersion: 'example.io/v1', kind: W, name, controller: true, blockOwnerDeletion: block };",
      '}',
      "export const loose = { kind: 'Gadget', blockOwnerDeletion: false };",
      "export const unknown = { kind: 'Gadget', blockOwnerDeletion: true };",
    ].join('\n');
    const inv = scanSources(
      new Map([
        ['src/kinds.ts', "export const W = 'Widget';"],
        ['src/a.ts', a],
      ]),
      kinds,
    );
    expect([...neededOf(inv).keys()]).toEqual(['example.io/widgets/finalizers update']);
    expect(inv.problems).toEqual(['owner kind Gadget has no known resource: src/a.ts:6 blockOwnerDeletion']);
  });

  it('reports what it cannot classify or resolve', () => {
    const a = [
      "import { CoreV1Api, CustomObjectsApi, makeInformer } from '@kubernetes/client-node';",
      "import * as k from '@kubernetes/client-node';",
      'export async function f(core: CoreV1Api, api: CustomObjectsApi, plural: string) {',
      "  await core.deleteCollectionNamespacedPod({ namespace: 'x' });",
      "  await api.getNamespacedCustomObject({ group: 'g', version: 'v1', namespace: 'x', plural: plural + 's', name: 'n' });",
      '}',
      "const m = await import('@kubernetes/client-node');",
    ].join('\n');
    const inv = scanSources(new Map([['src/a.ts', a]]));
    const text = inv.problems.join('\n');
    expect(text).toMatch(/unclassified client-node import makeInformer/);
    expect(text).toMatch(/namespace import/);
    expect(text).toMatch(/unclassified client-node method: src\/a\.ts:4 deleteCollectionNamespacedPod/);
    expect(text).toMatch(/cannot resolve the group\/plural of src\/a\.ts:5 getNamespacedCustomObject/);
    expect(text).toMatch(/unaudited reference/);
    expect(inv.problems).toHaveLength(5);
  });

  it('compares needed and granted permissions both ways', () => {
    const needed = new Map([
      ['core/pods get', ['src/a.ts:1 readNamespacedPod']],
      ['core/pods patch', ['src/a.ts:2 patchNamespacedPod']],
    ]);
    const { grants, problems } = grantsOf({
      rules: [
        { apiGroups: [''], resources: ['pods'], verbs: ['get', 'delete'] },
        { apiGroups: ['x.io'], resources: ['*'], verbs: ['get'], resourceNames: ['a'] },
      ],
    });
    expect(problems).toEqual(['rule 1: resourceNames (not modelled here)', 'rule 1: wildcard in x.io/* get']);
    expect(compare(needed, grants)).toEqual({
      missing: ['core/pods patch (needed by src/a.ts:2 patchNamespacedPod)'],
      superfluous: ['core/pods delete', 'x.io/* get'],
    });
  });
});

describe('config/rbac/role.yaml against the operator code (src/)', () => {
  const inventory = scanSources(sourceFiles('src'), crdKinds());
  const needed = neededOf(inventory);
  const role = parse(readFileSync(join(ROOT, 'config/rbac/role.yaml'), 'utf8'));

  it('API_CALLS names real client-node methods, with the verb their name says', () => {
    const verbOfPrefix: Record<string, Verb> = {
      read: 'get',
      get: 'get',
      list: 'list',
      create: 'create',
      replace: 'update',
      patch: 'patch',
      delete: 'delete',
    };
    for (const [method, c] of Object.entries(API_CALLS)) {
      expect(API_METHODS.has(method), `${method} is a client-node method`).toBe(true);
      const prefix = /^[a-z]+/.exec(method)![0];
      expect(c.verb, method).toBe(verbOfPrefix[prefix]);
      const isStatus = /Status$/.test(method);
      expect('custom' in c ? c.subresource === 'status' : c.resource.endsWith('/status'), method).toBe(
        isStatus,
      );
    }
  });

  it('classifies every Kubernetes API call the code can make', () => {
    expect(inventory.problems).toEqual([]);
    expect(inventory.calls.length).toBeGreaterThan(0);
    // Cross-check with a plain text search: every file that calls a client-node method by name is seen.
    const byText = new Set<string>();
    for (const [path, text] of sourceFiles('src')) {
      for (const m of text.matchAll(/\.\s*([A-Za-z]+)\s*\(/g)) if (API_METHODS.has(m[1]!)) byText.add(path);
    }
    const seen = new Set(inventory.calls.map((c) => c.where.split(':')[0]));
    expect([...byText].filter((f) => !seen.has(f))).toEqual([]);
    console.info(
      `RBAC inventory:\n${[...needed]
        .sort()
        .map(([k, sites]) => `  ${k.padEnd(48)} ${sites.join(', ')}`)
        .join('\n')}`,
    );
  });

  it('the role is the one ClusterRole, with plain rules (no wildcards, names or non-resource URLs)', () => {
    expect(role.kind).toBe('ClusterRole');
    expect(grantsOf(role).problems).toEqual([]);
  });

  it('grants every permission the code needs (sufficient)', () => {
    expect(compare(needed, grantsOf(role).grants).missing).toEqual([]);
  });

  it('grants nothing the code does not need (least privilege)', () => {
    expect(compare(needed, grantsOf(role).grants).superfluous).toEqual([]);
  });
});
