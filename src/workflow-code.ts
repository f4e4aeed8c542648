/**
 * Where the worker gets its workflow code, so it never runs the bundler on a normal start:
 *
 * - compiled (`node dist/worker.js`, or the image's bundled `dist/operator.js`): `dist/workflow-bundle.js`, written by `npm run build`
 *   from the same sources as the rest of `dist/`;
 * - from source (`npm start`, `npm run dev`, tests: tsx runs `src/worker.ts`): a bundle cached under
 *   `~/.cache/cocoon-operator/workflow-bundles/<hash>.js`, keyed by a SHA-256 of every `.ts` file under
 *   `src/` (path and content) and the Temporal SDK version, built on the first start after a change.
 *   A content key cannot go stale, and the cache is safe to share between checkouts.
 *
 * The bundler's own report goes to debug level.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from './log.js';

const HERE = dirname(fileURLToPath(import.meta.url));
/** The prebuilt bundle's file name next to the compiled worker (dist/). */
export const PREBUILT_BUNDLE_NAME = 'workflow-bundle.js';

/** Where a worker's workflow code comes from and how it got there (for the start-up log line). */
export interface WorkflowBundleChoice {
  codePath: string;
  /** `prebuilt` = dist/ of a build; `cached` = content-hash cache hit; `built` = bundled now and cached. */
  origin: 'prebuilt' | 'cached' | 'built';
}

/** The cache directory: `$XDG_CACHE_HOME` or `~/.cache`, then `cocoon-operator/workflow-bundles`. */
export function bundleCacheDir(env = process.env): string {
  const base = env.XDG_CACHE_HOME || join(homedir(), '.cache');
  return join(base, 'cocoon-operator', 'workflow-bundles');
}

function sdkVersion(): string {
  try {
    const req = join(HERE, '..', 'node_modules', '@temporalio', 'workflow', 'package.json');
    return (JSON.parse(readFileSync(req, 'utf8')) as { version?: string }).version ?? '?';
  } catch {
    return '?';
  }
}

function tsFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...tsFiles(p));
    else if (e.name.endsWith('.ts')) out.push(p);
  }
  return out.sort();
}

/**
 * Hex SHA-256 over every `.ts` file under `srcDir` (relative path and bytes, in sorted order) and the
 * Temporal SDK version: the cache key of the workflow bundle built from that tree.
 */
export function workflowSourceHash(srcDir: string, sdk = sdkVersion()): string {
  const h = createHash('sha256');
  h.update(`temporal-sdk ${sdk}\0`);
  for (const f of tsFiles(srcDir)) {
    h.update(`${relative(srcDir, f)}\0`);
    h.update(readFileSync(f));
    h.update('\0');
  }
  return h.digest('hex');
}

/** Temporal's logger interface with `info` demoted to debug (the bundler reports its webpack run at info). */
function quietBundlerLogger(log: Logger | undefined) {
  const at =
    (level: 'debug' | 'warn' | 'error') =>
    (message: string, meta?: Record<string, unknown>): void =>
      log?.[level]({ component: 'bundler', ...meta }, message);
  return {
    log: (_level: string, message: string, meta?: Record<string, unknown>) => at('debug')(message, meta),
    trace: at('debug'),
    debug: at('debug'),
    info: at('debug'),
    warn: at('warn'),
    error: at('error'),
  };
}

/** Bundles `<srcDir>/workflows/index.ts` and writes it to `outFile` atomically (tmp file + rename). */
export async function buildWorkflowBundle(srcDir: string, outFile: string, log?: Logger): Promise<void> {
  const { bundleWorkflowCode } = await import('@temporalio/worker');
  const { code } = await bundleWorkflowCode({
    workflowsPath: join(srcDir, 'workflows', 'index.ts'),
    // Evaluated once per workflow thread and shared by its workflows instead of once per workflow (no
    // bundled module keeps state of its own: test/unit/workflow-shared-modules.test.ts checks it).
    preloadModules: [join(srcDir, 'workflows', 'index.ts')],
    // The SDK needs an inline source map (it maps workflow stack traces with it); positions are enough,
    // without a copy of every source file in each thread that loads the bundle.
    webpackConfigHook: (config) => ({ ...config, devtool: 'inline-nosources-source-map' }),
    logger: quietBundlerLogger(log),
  });
  mkdirSync(dirname(outFile), { recursive: true });
  const tmp = `${outFile}.${process.pid}.tmp`;
  writeFileSync(tmp, code);
  renameSync(tmp, outFile);
}

/**
 * The content-hash cached bundle of the workflow sources under `srcDir` (default: this checkout's src/),
 * built and stored on a miss.
 * @throws what the bundler throws (a workflow source that does not compile), or a file-system error when
 *   the cache directory cannot be written.
 */
export async function cachedWorkflowBundle(
  opts: { srcDir?: string; cacheDir?: string; log?: Logger } = {},
): Promise<WorkflowBundleChoice> {
  const srcDir = opts.srcDir ?? join(HERE, '..', 'src');
  const codePath = join(opts.cacheDir ?? bundleCacheDir(), `${workflowSourceHash(srcDir)}.js`);
  if (existsSync(codePath)) return { codePath, origin: 'cached' };
  await buildWorkflowBundle(srcDir, codePath, opts.log);
  return { codePath, origin: 'built' };
}

/**
 * Picks the workflow code for a worker running from `moduleDir` (the directory of the running
 * worker module): the content-hash cache when it runs from source, the prebuilt bundle next to compiled
 * code otherwise.
 * @throws when compiled code has no prebuilt bundle next to it, or as cachedWorkflowBundle.
 */
export async function workflowBundleFor(moduleDir: string, log?: Logger): Promise<WorkflowBundleChoice> {
  if (existsSync(join(moduleDir, 'workflows', 'index.ts')))
    return cachedWorkflowBundle({ srcDir: moduleDir, log });
  const prebuilt = join(moduleDir, PREBUILT_BUNDLE_NAME);
  if (existsSync(prebuilt)) return { codePath: prebuilt, origin: 'prebuilt' };
  throw new Error(`no workflow bundle at ${prebuilt}: build with \`npm run build\``);
}
