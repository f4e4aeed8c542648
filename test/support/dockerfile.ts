/**
 * Reads what the image runs from the Dockerfile, one parser for the unit test that pins the Dockerfile
 * (test/unit/compose.test.ts), the `dist` launcher (test/e2e/operator-process.ts) and the shipped bench.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The repository's Dockerfile. */
export const DOCKERFILE = join(import.meta.dirname, '..', '..', 'Dockerfile');

/**
 * The stages of a Dockerfile's text, each from just after its `FROM ` to the next `FROM` line (so each
 * starts with its base image, e.g. `${NODE_IMAGE} AS runtime\n…`). The last one is what the image runs.
 */
export function stages(text: string): string[] {
  return text.split(/^FROM\s+/im).slice(1);
}

/** The text of a Dockerfile's last stage (the runtime image); '' when it has no `FROM`. */
export function finalStage(text: string): string {
  return stages(text).at(-1) ?? '';
}

/** The JSON-form `CMD` of a stage's text, e.g. `['node', 'dist/operator.js']`; undefined when it has none. */
export function stageCmd(stage: string): string[] | undefined {
  const cmd = /^CMD\s+(\[.*\])\s*$/m.exec(stage);
  return cmd ? (JSON.parse(cmd[1]!) as string[]) : undefined;
}

/**
 * The arguments the image gives `node`: the last stage's `CMD` without its first word (e.g.
 * `['--require', './dist/workflow-thread-preload.cjs', 'dist/operator.js']`), so a launcher runs exactly
 * what the image runs. Throws when the last stage has no `CMD ["node", …]`.
 */
export function imageNodeArgs(dockerfile = DOCKERFILE): string[] {
  const argv = stageCmd(finalStage(readFileSync(dockerfile, 'utf8'))) ?? [];
  if (argv[0] !== 'node') throw new Error(`${dockerfile}: the last stage has no CMD ["node", ...]`);
  return argv.slice(1);
}

/**
 * The `ENV KEY=value` lines of the Dockerfile's last stage: what the image sets for the process besides the
 * deployment's settings. Values may be double-quoted (backslash escapes); the legacy `ENV KEY value` form is
 * not read.
 */
export function imageEnv(dockerfile = DOCKERFILE): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of finalStage(readFileSync(dockerfile, 'utf8')).split('\n')) {
    const m = /^ENV\s+(.*)$/i.exec(line.trim());
    if (!m) continue;
    for (const kv of m[1]!.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|\S*)/g)) {
      const v = kv[2]!;
      env[kv[1]!] = v.startsWith('"') ? v.slice(1, -1).replace(/\\(.)/g, '$1') : v;
    }
  }
  return env;
}
