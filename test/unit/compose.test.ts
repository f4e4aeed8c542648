/**
 * docker-compose.yml (Temporal dev server + the operator,
 * docs/installation.md#next-to-a-temporal-server-docker-compose) and the image it builds
 * (Dockerfile, .dockerignore): services, ports, the Temporal search attributes the workflows upsert
 * (src/api/keys.ts SearchAttributes), and an operator environment drawn only from src/config.ts
 * ENV_SETTINGS with every required setting present. When a compose CLI is installed (`docker compose`
 * or `docker-compose`), it must also accept the file (`config -q`); without one that test is skipped,
 * never counted as passed.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { temporalDynamicConfig, temporalSqlitePragmas } from '../../scripts/stack/components.js';
import { SearchAttributes } from '../../src/api/keys.js';
import { ENV_SETTINGS } from '../../src/config.js';
import {
  finalStage,
  imageEnv,
  imageNodeArgs,
  stageCmd,
  stageEnv,
  stages as stagesOf,
} from '../support/dockerfile.js';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
// biome-ignore lint/suspicious/noExplicitAny: the compose document is navigated freely in assertions.
const compose: any = parse(readFileSync(join(REPO_ROOT, 'docker-compose.yml'), 'utf8'));
const dockerfile = readFileSync(join(REPO_ROOT, 'Dockerfile'), 'utf8');

/** `environment` as a name → raw value map (accepts both list and mapping form). */
function envOf(service: { environment?: string[] | Record<string, string> }): Record<string, string> {
  const env = service.environment ?? {};
  if (!Array.isArray(env)) return Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)]));
  return Object.fromEntries(
    env.map((line) => {
      const i = line.indexOf('=');
      return i < 0 ? [line, ''] : [line.slice(0, i), line.slice(i + 1)];
    }),
  );
}

/** Host ports of `ports` entries written as "host:container". */
function publishedPorts(service: { ports?: string[] }): Array<[number, number]> {
  return (service.ports ?? []).map((p) => {
    const [host, container] = String(p).split(':');
    return [Number(host), Number(container)];
  });
}

/** Pairs of `--flag value` in a command list. */
function flagValues(command: string[], flag: string): string[] {
  const out: string[] = [];
  command.forEach((arg, i) => {
    if (arg === flag && i + 1 < command.length) out.push(command[i + 1]!);
    else if (arg.startsWith(`${flag}=`)) out.push(arg.slice(flag.length + 1));
  });
  return out;
}

/** A compose CLI that can validate the file without a Docker daemon, if one is installed. */
function composeCli(): string[] | undefined {
  for (const cmd of [['docker', 'compose'], ['docker-compose']]) {
    try {
      execFileSync(cmd[0]!, [...cmd.slice(1), 'version'], { stdio: 'ignore' });
      return cmd;
    } catch {
      // not installed
    }
  }
  return undefined;
}

describe('docker-compose.yml', () => {
  it('defines the temporal and operator services', () => {
    expect(Object.keys(compose.services)).toEqual(expect.arrayContaining(['temporal', 'operator']));
  });

  it('runs the Temporal CLI dev server on all interfaces with a persistent database', () => {
    const t = compose.services.temporal;
    expect(t.image).toMatch(/^temporalio\/temporal(:|$)/);
    const cmd = t.command as string[];
    expect(cmd.slice(0, 2)).toEqual(['server', 'start-dev']);
    expect(flagValues(cmd, '--ip')).toEqual(['0.0.0.0']);
    expect(flagValues(cmd, '--ui-ip')).toEqual(['0.0.0.0']);
    const [db] = flagValues(cmd, '--db-filename');
    expect(db).toBeDefined();
    const dataDir = dirname(db!);
    const mounts = (t.volumes as string[]).map((v) => v.split(':'));
    const mount = mounts.find(([, target]) => target === dataDir);
    expect(mount, `a volume mounted at ${dataDir}`).toBeDefined();
    expect(Object.keys(compose.volumes ?? {})).toContain(mount![0]);
    expect(publishedPorts(t)).toEqual(
      expect.arrayContaining([
        [7233, 7233],
        [8233, 8233],
      ]),
    );
  });

  it("keeps its SQLite file in the local stack's mode (the same --sqlite-pragma settings)", () => {
    const pragmas = flagValues(compose.services.temporal.command, '--sqlite-pragma');
    expect([...pragmas].sort()).toEqual([...temporalSqlitePragmas].sort());
  });

  it("runs the dev server with the local stack's dynamic config (the same --dynamic-config-value settings)", () => {
    const values = flagValues(compose.services.temporal.command, '--dynamic-config-value');
    expect([...values].sort()).toEqual([...temporalDynamicConfig].sort());
    expect(values.length).toBeGreaterThan(0);
  });

  it('pins the Temporal image to the CLI version the local stack and the tests run (scripts/tools.sh)', () => {
    const tools = readFileSync(join(REPO_ROOT, 'scripts/tools.sh'), 'utf8');
    const version = /^TEMPORAL_CLI_VERSION=\$\{TEMPORAL_CLI_VERSION:-([0-9.]+)\}/m.exec(tools)?.[1];
    expect(version, 'TEMPORAL_CLI_VERSION in scripts/tools.sh').toMatch(/^\d+\.\d+\.\d+$/);
    expect(compose.services.temporal.image).toBe(`temporalio/temporal:${version}`);
  });

  it('registers every custom search attribute as Keyword, once', () => {
    const attrs = flagValues(compose.services.temporal.command, '--search-attribute');
    expect([...attrs].sort()).toEqual(
      Object.values(SearchAttributes)
        .map((name) => `${name}=Keyword`)
        .sort(),
    );
  });

  it('builds the operator from this repository and starts it after Temporal is healthy', () => {
    const op = compose.services.operator;
    const context = typeof op.build === 'string' ? op.build : op.build?.context;
    expect(context).toBe('.');
    expect(existsSync(join(REPO_ROOT, 'Dockerfile'))).toBe(true);
    expect(op.depends_on?.temporal?.condition).toBe('service_healthy');
    expect(compose.services.temporal.healthcheck?.test).toBeDefined();
  });

  it('sets only environment that src/config.ts knows, and every required setting', () => {
    const env = envOf(compose.services.operator);
    const known = new Set(ENV_SETTINGS.map((s) => s.env));
    expect(
      Object.keys(env).filter((n) => !known.has(n)),
      'env names not in ENV_SETTINGS',
    ).toEqual([]);
    const required = ENV_SETTINGS.filter((s) => s.required).map((s) => s.env);
    expect(required.length).toBeGreaterThan(0);
    expect(
      required.filter((r) => !(r in env)),
      'required settings missing',
    ).toEqual([]);
    // A required setting without a value must stop `docker compose up` with a message, not start empty.
    for (const r of required) expect(env[r]).toMatch(new RegExp(`^\\$\\{${r}:\\?.+\\}$`));
  });

  it('points the operator at the compose Temporal and publishes its listeners', () => {
    const op = compose.services.operator;
    const env = envOf(op);
    expect(env.TEMPORAL_ADDRESS).toBe('temporal:7233');
    const metrics = Number(/:(\d+)$/.exec(env.METRICS_ADDR ?? '')?.[1]);
    const probe = Number(/:(\d+)$/.exec(env.PROBE_ADDR ?? '')?.[1]);
    expect(publishedPorts(op)).toEqual(
      expect.arrayContaining([
        [8080, metrics],
        [8081, probe],
      ]),
    );
    expect([metrics, probe]).toEqual([8080, 8081]);
  });

  it('mounts the kubeconfig read-only where KUBECONFIG points', () => {
    const op = compose.services.operator;
    const env = envOf(op);
    // Host side: the user's KUBECONFIG, else ~/.kube/config; container side: where KUBECONFIG points.
    const kubeMount = /^\$\{KUBECONFIG:-~\/\.kube\/config\}:([^:]+):ro$/;
    const mounts = (op.volumes as string[]).map((v) => kubeMount.exec(v)).filter((m) => m !== null);
    expect(mounts).toHaveLength(1);
    expect(mounts[0]![1]).toBe(env.KUBECONFIG);
  });

  const cli = composeCli();
  it.skipIf(!cli)(`is accepted by ${cli?.join(' ') ?? 'a compose CLI (none installed)'}`, () => {
    const run = (extraEnv: Record<string, string>) =>
      execFileSync(
        cli![0]!,
        [...cli!.slice(1), '-f', join(REPO_ROOT, 'docker-compose.yml'), 'config', '-q'],
        {
          cwd: REPO_ROOT,
          env: { ...process.env, ...extraEnv },
          stdio: 'pipe',
        },
      );
    expect(() => run({ OCI_REGISTRY: '127.0.0.1:5000' })).not.toThrow();
    // Without OCI_REGISTRY the file must refuse to resolve.
    const env = { ...process.env };
    delete env.OCI_REGISTRY;
    expect(() =>
      execFileSync(
        cli![0]!,
        [...cli!.slice(1), '-f', join(REPO_ROOT, 'docker-compose.yml'), 'config', '-q'],
        {
          cwd: REPO_ROOT,
          env,
          stdio: 'pipe',
        },
      ),
    ).toThrow(/OCI_REGISTRY/);
  });
});

describe('Dockerfile', () => {
  const stages = stagesOf(dockerfile).map((lines) => lines.join('\n'));
  const final = finalStage(dockerfile).join('\n');
  const imageCmd = [
    'node',
    '--disable-warning=DEP0040',
    '--disable-warning=DEP0169',
    '--require',
    './dist/workflow-thread-preload.cjs',
    'dist/operator.js',
  ];
  const arg = /^ARG NODE_IMAGE=(\S+)$/m.exec(dockerfile)?.[1];

  it('is multi-stage on Node 24', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    expect(arg).toMatch(/^node:24-(bookworm-slim|alpine)/);
    for (const s of stages) expect(s).toMatch(/^FROM\s+(\$\{NODE_IMAGE\}|node:24-)/i);
  });

  it('installs with npm ci, compiles to dist/ and pre-bundles the workflows', () => {
    expect(dockerfile).toMatch(/npm ci/);
    expect(dockerfile).toMatch(/npm run build/);
    expect(dockerfile).toMatch(/scripts\/bundle-workflows\.ts/);
    expect(dockerfile).toMatch(/dist\/workflow-bundle\.js/);
    const pkg = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8'));
    expect(pkg.scripts.build).toMatch(/tsx scripts\/bundle-workflows\.ts/);
    // `npm run build` compiles src/ into dist/ (tsconfig.build.json), so src/worker.ts → dist/worker.js.
    const build = JSON.parse(readFileSync(join(REPO_ROOT, 'tsconfig.build.json'), 'utf8'));
    expect(build.compilerOptions).toMatchObject({ rootDir: 'src', outDir: 'dist' });
  });

  it('runs production dependencies only, as a numeric non-root user, starting the bundled dist/operator.js with the workflow-thread preload', () => {
    expect(final).toMatch(/--from=deps/);
    expect(dockerfile).toMatch(/npm ci --omit=dev/);
    const user = /^USER\s+(\d+)(?::(\d+))?\s*$/m.exec(final);
    expect(user, 'USER with a numeric uid in the final stage').not.toBeNull();
    expect(Number(user![1])).toBeGreaterThan(0);
    // The Deployment pins the same uid (config/manager/deployment.yaml runAsUser).
    const deployment = readFileSync(join(REPO_ROOT, 'config/manager/deployment.yaml'), 'utf8');
    expect(deployment).toMatch(new RegExp(`runAsUser: ${user![1]}\\b`));
    expect(stageCmd(finalStage(dockerfile))).toEqual(imageCmd);
    // `npm run build` puts the preload there, and `npm start` loads the same file from src/.
    const pkg = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8'));
    expect(pkg.scripts.build).toMatch(/cp src\/workflow-thread-preload\.cjs dist\//);
    // ... and bundles the compiled main thread into dist/operator.js (scripts/bundle-operator.ts).
    expect(pkg.scripts.build).toMatch(/tsx scripts\/bundle-operator\.ts/);
    expect(pkg.scripts.start).toBe('tsx --require ./src/workflow-thread-preload.cjs src/worker.ts');
  });

  it('gives the launchers and the bench what the runtime stage sets (imageEnv, imageNodeArgs)', () => {
    // The bench and test/e2e/image.test.ts run the operator with these; a parser that missed a line
    // would measure or test something other than the image.
    expect(imageEnv()).toEqual({
      NODE_ENV: 'production',
      NODE_OPTIONS: '--max-semi-space-size=2',
      MALLOC_ARENA_MAX: '2',
      MALLOC_MMAP_THRESHOLD_: '131072',
      MALLOC_TRIM_THRESHOLD_: '131072',
    });
    expect(imageNodeArgs()).toEqual(imageCmd.slice(1));
  });

  it('parses Dockerfiles as Docker does where this repository could write them differently (test/support/dockerfile.ts)', () => {
    const text = [
      'from node:24-bookworm-slim as build',
      'ENV BUILD_ONLY=1',
      'CMD ["node", "build.js"]',
      '# ENV COMMENTED=1',
      'FROM node:24-bookworm-slim',
      '  env A=1 \\',
      '      B="two words" \\',
      '# a comment inside a continuation is dropped, as Docker drops it',
      '      C=3',
      'ENV A=overridden',
      'CMD ["node", "first.js"]',
      'cmd ["node", "--require", "./p.cjs", "last.js"]',
    ].join('\n');
    expect(stagesOf(text)).toHaveLength(2);
    expect(stageEnv(finalStage(text))).toEqual({ A: 'overridden', B: 'two words', C: '3' });
    // The last CMD wins, whatever its case.
    expect(stageCmd(finalStage(text))).toEqual(['node', '--require', './p.cjs', 'last.js']);
    // What it does not read is an error, not a silent gap.
    expect(() => stageEnv(['ENV LEGACY value'])).toThrow(/ENV not read here/);
    expect(() => stageEnv(["ENV Q='single'"])).toThrow(/ENV not read here/);
    expect(() => stageEnv(['ENV P=$PATH:/x'])).toThrow(/ENV not read here/);
    expect(() => stageCmd(['CMD node dist/operator.js'])).toThrow(/shell-form CMD/);
    expect(stageCmd(['FROM x'])).toBeUndefined();
  });

  it('keeps build inputs in the context and everything else out (.dockerignore)', () => {
    const ignored = readFileSync(join(REPO_ROOT, '.dockerignore'), 'utf8')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    expect(ignored).toEqual(expect.arrayContaining(['node_modules', 'dist', '.git']));
    const copied = [...dockerfile.matchAll(/^COPY\s+(?!--from)(.+)\s+\S+$/gm)].flatMap((m) =>
      m[1]!.split(/\s+/),
    );
    expect(copied.length).toBeGreaterThan(0);
    for (const src of copied) {
      expect(ignored, `${src} is copied but ignored`).not.toContain(src.replace(/\/$/, ''));
      expect(existsSync(join(REPO_ROOT, src)), `${src} exists`).toBe(true);
    }
  });
});
