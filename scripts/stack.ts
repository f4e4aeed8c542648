/**
 * The real local stack (docs/development.md#local-stack): etcd + kube-apiserver (RBAC on, project CRDs
 * applied), a distribution registry with deletes, a Temporal dev server with the project's search attributes,
 * and the vk-cocoon simulator, all on loopback, detached, with data/logs/pids in the stack dir.
 *
 *   npm run stack -- up [component...]     start what is not already healthy and wait until ready
 *   npm run stack -- down [component...]   stop (all by default; idempotent)
 *   npm run stack -- status                each component's health; exit 1 when a required one is down
 *   npm run stack -- env [--json]          shell `export` lines (eval "$(npm run -s stack -- env)")
 *   npm run stack -- sa-kubeconfig NS SA   kubeconfig for a ServiceAccount (TokenRequest); prints its path
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type Component, componentByName, components } from './stack/components.js';
import { writeServiceAccountKubeconfig } from './stack/kube.js';
import { HOST, repoRoot, stackEnvValues, stackPaths } from './stack/paths.js';
import { ensurePki, writeAdminKubeconfig } from './stack/pki.js';
import { componentPids, portOpen, say, sleep, stopProcess, waitUntil } from './stack/proc.js';
import { writeRegistryConfig } from './stack/registry.js';

/** Single-quotes a value for POSIX shells. */
const shq = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** Serialises `up` and `down` on one stack dir (a lock directory holding the owner's pid). */
async function withLock<T>(fn: () => Promise<T>): Promise<T> {
  const lock = stackPaths().lock;
  mkdirSync(stackPaths().dir, { recursive: true });
  let warned = false;
  for (;;) {
    try {
      mkdirSync(lock);
      writeFileSync(join(lock, 'pid'), String(process.pid));
      break;
    } catch {
      let owner = Number.NaN;
      try {
        owner = Number(readFileSync(join(lock, 'pid'), 'utf8'));
      } catch {
        // being created or removed
      }
      let ownerAlive = true;
      if (Number.isFinite(owner)) {
        try {
          process.kill(owner, 0);
        } catch {
          ownerAlive = false;
        }
      }
      if (!ownerAlive) rmSync(lock, { recursive: true, force: true });
      else {
        if (!warned) say(`waiting for another \`stack up\` or \`down\` (pid ${owner}) to finish`);
        warned = true;
        await sleep(500);
      }
    }
  }
  try {
    return await fn();
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

/** Brings one component up unless healthy; then runs its after-ready step. */
async function ensureUp(c: Component): Promise<void> {
  const t0 = Date.now();
  let fresh = false;
  if (await c.healthy()) {
    say(`${c.name}: already up`);
  } else {
    let pid = componentPids(c.name, c.signature())[0];
    if (pid === undefined) {
      if (await portOpen(HOST, c.port)) {
        throw new Error(`${c.name}: port ${c.port} is taken by something that is not a healthy ${c.name}`);
      }
      pid = await c.start();
      fresh = true;
      say(`${c.name}: started (pid ${pid})`);
    } else {
      say(`${c.name}: process ${pid} exists, waiting for it to become ready`);
    }
    await waitUntil(c.name, () => c.healthy(), { timeoutMs: c.readyTimeoutMs, pid });
    say(`${c.name}: ready in ${((Date.now() - t0) / 1000).toFixed(1)}s at ${c.endpoint}`);
  }
  await c.afterReady?.(fresh);
}

async function up(names: string[]): Promise<void> {
  const wanted = (c: Component) => names.length === 0 || names.includes(c.name);
  await withLock(async () => {
    const missing = components
      .filter(wanted)
      .flatMap((c) => c.binaries())
      .filter((b) => !existsSync(b.path));
    for (const tool of new Set(missing.map((b) => b.tool))) {
      const paths = missing.filter((b) => b.tool === tool).map((b) => b.path);
      say(`${tool}: missing ${paths.join(', ')}; running scripts/tools.sh ${tool}`);
      execFileSync('bash', [join(repoRoot, 'scripts', 'tools.sh'), tool], { stdio: ['ignore', 2, 2] });
    }
    await ensurePki();
    writeAdminKubeconfig();
    writeRegistryConfig();
    const byName = (n: string) => componentByName(n);
    // Registry and Temporal start alongside etcd → apiserver; the simulator needs all of them.
    const side = Promise.all([byName('registry'), byName('temporal')].filter(wanted).map((c) => ensureUp(c)));
    side.catch(() => {}); // awaited below; keeps an early failure from being reported as unhandled
    for (const c of [byName('etcd'), byName('kube-apiserver')].filter(wanted)) await ensureUp(c);
    await side;
    const sim = byName('vksim');
    if (wanted(sim)) {
      if (sim.present()) await ensureUp(sim);
      else say('vksim: WARNING test/vksim/main.ts does not exist yet; simulator not started');
    }
  });
  say(`stack is up (dir ${stackPaths().dir}); eval "$(npm run -s stack -- env)" to use it`);
}

async function down(names: string[]): Promise<void> {
  const list = names.length === 0 ? components : names.map(componentByName);
  // Under the same lock as `up`, so a concurrent `up` finishes first instead of racing the stop.
  await withLock(async () => {
    for (const c of [...list].reverse()) {
      const pids = await stopProcess(c.name, c.signature());
      say(`${c.name}: ${pids.length > 0 ? `stopped (pid ${pids.join(', ')})` : 'not running'}`);
    }
  });
}

async function status(): Promise<number> {
  let bad = 0;
  const rows = await Promise.all(
    components.map(async (c) => {
      const present = c.present();
      const healthy = present && (await c.healthy());
      const pid = componentPids(c.name, c.signature())[0];
      let state: string;
      if (!present) state = 'absent (no entry file)';
      else if (healthy) state = pid === undefined ? 'healthy (not a process of this stack dir)' : 'healthy';
      else state = pid === undefined ? 'stopped' : 'running, NOT ready';
      if (present && !healthy) bad++;
      return [c.name, state, pid === undefined ? '-' : String(pid), c.endpoint];
    }),
  );
  const widths = [0, 1, 2].map((i) => Math.max(...rows.map((r) => r[i]!.length)));
  for (const r of rows) {
    process.stdout.write(`${r.map((v, i) => (i < 3 ? v.padEnd(widths[i]!) : v)).join('  ')}\n`);
  }
  process.stdout.write(`stack dir ${stackPaths().dir}, logs in ${stackPaths().logs}\n`);
  return bad === 0 ? 0 : 1;
}

function env(json: boolean): void {
  const v = stackEnvValues();
  if (json) {
    process.stdout.write(`${JSON.stringify(v, null, 2)}\n`);
    return;
  }
  const { PATH_PREPEND, ...vars } = v;
  for (const [k, val] of Object.entries(vars)) process.stdout.write(`export ${k}=${shq(val)}\n`);
  process.stdout.write(`export PATH=${shq(PATH_PREPEND.join(':'))}:"$PATH"\n`);
}

async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  switch (cmd) {
    case 'up':
      await up(rest.map((n) => componentByName(n).name));
      return 0;
    case 'down':
      await down(rest);
      return 0;
    case 'status':
      return status();
    case 'env':
      env(rest.includes('--json'));
      return 0;
    case 'sa-kubeconfig': {
      const [ns, sa] = rest;
      if (!ns || !sa) throw new Error('usage: stack sa-kubeconfig NAMESPACE SERVICEACCOUNT');
      process.stdout.write(`${await writeServiceAccountKubeconfig(ns, sa)}\n`);
      return 0;
    }
    default:
      process.stderr.write(
        'usage: npm run stack -- up [component...] | down [component...] | status | env [--json] | sa-kubeconfig NS SA\n',
      );
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    say(`error: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
