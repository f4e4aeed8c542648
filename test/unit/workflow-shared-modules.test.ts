/**
 * The workflow bundle's modules are evaluated once per workflow thread and shared by every workflow the
 * thread runs (the SDK's `preloadModules`, set in src/workflow-code.ts `buildWorkflowBundle`), instead of
 * once per workflow: less memory per cached workflow and less CPU per workflow start. Sharing is only
 * sound while no bundled module keeps state of its own (the SDK's warning on `preloadModules`): module-scope
 * state would then leak between workflows and break their determinism. The first test proves the sharing
 * through the SDK's own reusable V8 context; the second is the guard on our modules.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import ts from 'typescript';
import { beforeAll, describe, expect, it } from 'vitest';
import { cachedWorkflowBundle } from '../../src/workflow-code.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Module-scope bindings that a bundled module does mutate, each with why it cannot leak between
 * workflows. Keep this list empty where possible: state belongs in the workflow's own state.
 */
const ALLOWED_MUTABLE: Record<string, string> = {
  'src/workflows/cocoonset.ts phaseWritten':
    "a WeakMap keyed by each run's own state object: an entry is only ever read back by the run that wrote it",
};

/** Methods that change a Map, Set, WeakMap, WeakSet or array in place. */
const MUTATORS = new Set([
  'set',
  'add',
  'delete',
  'clear',
  'push',
  'pop',
  'shift',
  'unshift',
  'splice',
  'sort',
  'reverse',
  'fill',
  'copyWithin',
]);

/** The identifier an expression like `a`, `a.b`, `a[b].c` is rooted at, if any. */
function rootName(e: ts.Expression): string | undefined {
  let x: ts.Expression = e;
  while (
    ts.isPropertyAccessExpression(x) ||
    ts.isElementAccessExpression(x) ||
    ts.isParenthesizedExpression(x)
  )
    x = x.expression;
  return ts.isIdentifier(x) ? x.text : undefined;
}

/**
 * What in one source file would be module-scope state: `let`/`var` at the top level, and any write
 * through a top-level `const` (a mutating method call on it, or an assignment or `++`/`--` to a
 * property under it). Aliases (`const m = MODULE_MAP; m.set(…)`) escape this check.
 * @returns one line per finding, `<file> <binding>: <what>`.
 */
function moduleStateIn(file: string): string[] {
  const sf = ts.createSourceFile(file, readFileSync(join(ROOT, file), 'utf8'), ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const consts = new Set<string>();
  for (const st of sf.statements) {
    if (!ts.isVariableStatement(st)) continue;
    const isConst = (st.declarationList.flags & ts.NodeFlags.Const) !== 0;
    for (const d of st.declarationList.declarations) {
      if (!ts.isIdentifier(d.name)) continue;
      if (isConst) consts.add(d.name.text);
      else found.push(`${file} ${d.name.text}: module-scope let/var`);
    }
  }
  const visit = (n: ts.Node): void => {
    if (ts.isCallExpression(n) && ts.isPropertyAccessExpression(n.expression)) {
      const name = rootName(n.expression.expression);
      if (name && consts.has(name) && MUTATORS.has(n.expression.name.text))
        found.push(`${file} ${name}: .${n.expression.name.text}() on a module-scope binding`);
    }
    const assigned =
      ts.isBinaryExpression(n) &&
      n.operatorToken.kind >= ts.SyntaxKind.FirstAssignment &&
      n.operatorToken.kind <= ts.SyntaxKind.LastAssignment
        ? n.left
        : (ts.isPrefixUnaryExpression(n) || ts.isPostfixUnaryExpression(n)) &&
            (n.operator === ts.SyntaxKind.PlusPlusToken || n.operator === ts.SyntaxKind.MinusMinusToken)
          ? n.operand
          : undefined;
    if (assigned && (ts.isPropertyAccessExpression(assigned) || ts.isElementAccessExpression(assigned))) {
      const name = rootName(assigned);
      if (name && consts.has(name)) found.push(`${file} ${name}: assignment under a module-scope binding`);
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return found;
}

describe('shared workflow modules', () => {
  let code = '';
  beforeAll(async () => {
    code = readFileSync((await cachedWorkflowBundle()).codePath, 'utf8');
  }, 180_000);

  it("the SDK's reusable V8 context evaluates the workflow modules once, before any workflow, and freezes them", async () => {
    // In a worker thread: the SDK's VM set-up replaces the thread's stack-trace and promise handlers.
    const probe = `
      const { parentPort, workerData } = require('node:worker_threads');
      const { ReusableVMWorkflowCreator } = require('@temporalio/worker/lib/workflow/reusable-vm.js');
      const bundle = { code: workerData, filename: '/workflow-bundle.js',
        sourceMap: { version: 3, sources: [], names: [], mappings: '' } };
      ReusableVMWorkflowCreator.create(bundle, 5000, new Set()).then((creator) => {
        // No workflow exists yet, so the module cache answers from the shared modules only.
        const cache = creator.context.__webpack_module_cache__;
        const out = {};
        for (const id of ['./src/workflows/vm.ts', './src/workflows/cocoonset.ts', './src/workflows/entity.ts']) {
          const m = cache[id];
          out[id] = m === undefined ? 'not shared' : Object.isFrozen(m.exports) ? 'shared, frozen' : 'shared';
        }
        parentPort.postMessage(out);
      }, (e) => parentPort.postMessage({ error: String(e) }));
    `;
    const worker = new Worker(probe, { eval: true, workerData: code });
    const out = await new Promise<Record<string, string>>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    await worker.terminate();
    expect(out).toEqual({
      './src/workflows/vm.ts': 'shared, frozen',
      './src/workflows/cocoonset.ts': 'shared, frozen',
      './src/workflows/entity.ts': 'shared, frozen',
    });
  });

  it('no bundled module of ours keeps module-scope state that workflows could share', () => {
    const files = [...new Set([...code.matchAll(/"\.\/(src\/[^"]+\.ts)"/g)].map((m) => m[1]!))].sort();
    expect(files).toContain('src/workflows/vm.ts');
    const found = files.flatMap(moduleStateIn);
    const unexplained = found.filter((f) => !(f.split(':')[0]! in ALLOWED_MUTABLE));
    expect(unexplained).toEqual([]);
    // An allowance nobody needs any more goes.
    const used = new Set(found.map((f) => f.split(':')[0]!));
    expect(Object.keys(ALLOWED_MUTABLE).filter((k) => !used.has(k))).toEqual([]);
  });
});
