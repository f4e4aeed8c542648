/**
 * The operator's main thread as one file: `tsx scripts/bundle-operator.ts [outFile]` bundles the compiled
 * dist/worker.js and everything it imports, except the Temporal SDK, into dist/operator.js (part of
 * `npm run build`; the image runs that file).
 *
 * Why: loaded as the ~1,000 separate ES modules npm installs, `@kubernetes/client-node` alone adds ~70 MiB
 * of resident memory to a bare Node process (module records, source text, compiled code); bundled, ~40.
 * With 1000 VMs the operator as shipped peaks ~12–22 MiB lower and settles at 256 instead of 273 MiB
 * (docs/performance.md#a-bundled-main-thread-session-36).
 * Whitespace and syntax are minified, names kept, so stack traces still name functions; a source map is
 * written next to the file (not loaded: `node --enable-source-maps` reads it when a trace needs lines; it
 * maps to the compiled dist/*.js files, which ship with it).
 *
 * The Temporal SDK stays in node_modules: its native core is a `.node` addon, and the worker starts its
 * workflow thread from a file it resolves next to its own modules.
 *
 * Node silences its deprecation warnings for code under node_modules; bundled, two of client-node's
 * dependencies (node-fetch's `url.parse`, tr46's `punycode`) are no longer there, so the image's command
 * turns those two warnings off (Dockerfile CMD).
 */
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const ROOT = join(fileURLToPath(import.meta.url), '..', '..');

/**
 * Bundles `entry` (compiled JavaScript) into `outFile` with a source map beside it. Throws on a build error
 * or any esbuild warning.
 */
export async function bundleOperator(
  entry = join(ROOT, 'dist', 'worker.js'),
  outFile = join(ROOT, 'dist', 'operator.js'),
): Promise<string> {
  const result = await build({
    entryPoints: [entry],
    outfile: outFile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    external: ['@temporalio/*'],
    minifyWhitespace: true,
    minifySyntax: true,
    keepNames: true,
    // Positions only: the map's sources are dist/'s compiled files, which ship beside it.
    sourcemap: true,
    sourcesContent: false,
    logLevel: 'warning',
    // CommonJS dependencies call require() (node builtins, each other): give the ES module bundle one.
    banner: {
      js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);",
    },
  });
  // A warning (e.g. a require.resolve or a computed require esbuild cannot follow) means a module that
  // would break at run time once bundled: stop the build rather than ship it.
  if (result.warnings.length)
    throw new Error(`bundling ${entry}: ${result.warnings.length} esbuild warning(s), printed above`);
  return outFile;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) {
  const out = await bundleOperator(undefined, process.argv[2] ? resolve(process.argv[2]) : undefined);
  console.log(`operator bundle written to ${out}`);
}
