/**
 * Reads what the image runs from the Dockerfile, one parser for the unit test that pins the Dockerfile
 * (test/unit/compose.test.ts), the `dist` launcher (test/e2e/operator-process.ts) and the shipped bench.
 * It reads the subset of Dockerfile syntax this repository uses and throws on anything in the runtime
 * stage's `ENV` and `CMD` it cannot read, so a launcher never runs something other than the image silently.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The repository's Dockerfile. */
export const DOCKERFILE = join(import.meta.dirname, '..', '..', 'Dockerfile');

/**
 * A Dockerfile's instructions as logical lines: comment lines dropped, lines ending in `\` joined with the
 * next (Docker's default escape character), leading whitespace trimmed.
 */
function logicalLines(text: string): string[] {
  const out: string[] = [];
  let pending = '';
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line.startsWith('#')) continue;
    if (line.endsWith('\\')) {
      pending += `${line.slice(0, -1)} `;
      continue;
    }
    out.push(pending + line);
    pending = '';
  }
  if (pending) out.push(pending);
  return out;
}

/**
 * The stages of a Dockerfile's text, each as its logical lines from its `FROM` to the next (instruction
 * keywords are case-insensitive, as Docker reads them). The last one is what the image runs.
 */
export function stages(text: string): string[][] {
  const all: string[][] = [];
  for (const line of logicalLines(text)) {
    if (/^FROM\s/i.test(line)) all.push([line]);
    else all.at(-1)?.push(line);
  }
  return all;
}

/** The logical lines of a Dockerfile's last stage (the runtime image); [] when it has no `FROM`. */
export function finalStage(text: string): string[] {
  return stages(text).at(-1) ?? [];
}

/**
 * The JSON-form `CMD` of a stage, e.g. `['node', 'dist/operator.js']`: the last `CMD` wins, as in Docker.
 * Undefined when the stage has none; throws on a shell-form `CMD` (not JSON).
 */
export function stageCmd(stage: string[]): string[] | undefined {
  const cmd = stage.findLast((l) => /^CMD\s/i.test(l));
  if (cmd === undefined) return undefined;
  const json = cmd.replace(/^CMD\s+/i, '');
  if (!json.startsWith('[')) throw new Error(`shell-form CMD is not read here: ${cmd}`);
  return JSON.parse(json) as string[];
}

/**
 * The `ENV KEY=value …` settings of a stage, later lines overriding earlier ones. Values may be bare or
 * double-quoted (backslash escapes). Throws on what this does not read: the legacy `ENV KEY value` form,
 * single quotes, `$` expansion.
 */
export function stageEnv(stage: string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of stage) {
    const m = /^ENV\s+(.*)$/i.exec(line);
    if (!m) continue;
    const rest = m[1]!.trim();
    const token = /([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\$]|\\.)*"|[^\s"'$\\]*)(\s+|$)/y;
    let at = 0;
    while (at < rest.length) {
      token.lastIndex = at;
      const kv = token.exec(rest);
      if (!kv) throw new Error(`ENV not read here (only KEY=value or KEY="value", no $): ${line}`);
      const v = kv[2]!;
      env[kv[1]!] = v.startsWith('"') ? v.slice(1, -1).replace(/\\(.)/g, '$1') : v;
      at = token.lastIndex;
    }
  }
  return env;
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

/** The `ENV` settings of the Dockerfile's last stage (see stageEnv): what the image sets for the process. */
export function imageEnv(dockerfile = DOCKERFILE): Record<string, string> {
  return stageEnv(finalStage(readFileSync(dockerfile, 'utf8')));
}
