/**
 * `npm run dev`: the whole thing on this machine. Brings up the local stack (`npm run stack -- up`), reads
 * its environment (`npm run -s stack -- env`), starts the operator (`npm start`) with it, applies
 * config/samples/ with the stack's kubectl, prints where to look, and runs until Ctrl-C (which stops
 * the operator gracefully; the stack keeps running, `npm run stack -- down` stops it).
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Pushes every `image:` named in the sample manifests to the stack's registry as a simulator base image. */
async function seedSampleImages(dir: string, registry: string): Promise<void> {
  if (!registry) return;
  const { pushBaseImage } = await import('../test/vksim/oci.js');
  const images = new Set<string>();
  for (const f of readdirSync(dir).filter((n) => n.endsWith('.yaml'))) {
    for (const m of readFileSync(join(dir, f), 'utf8').matchAll(/^\s*image:\s*(\S+)\s*$/gm))
      images.add(m[1]!);
  }
  for (const image of images) await pushBaseImage(registry, image);
}

/**
 * The environment after evaluating `npm run -s stack -- env` in bash (its lines are shell `export`s,
 * some referring to $PATH), as a plain object.
 */
export function stackEnv(): Record<string, string> {
  const out = execFileSync('bash', ['-c', 'eval "$(npm run -s stack -- env)" && env -0'], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  const env: Record<string, string> = {};
  for (const entry of out.split('\0')) {
    const i = entry.indexOf('=');
    if (i > 0) env[entry.slice(0, i)] = entry.slice(i + 1);
  }
  return env;
}

function step(msg: string): void {
  console.log(`\n==> ${msg}`);
}

function kubectl(env: NodeJS.ProcessEnv, args: string[]): void {
  const dir = execFileSync('bash', [join(ROOT, 'scripts', 'tools.sh'), 'path', 'kube'], {
    encoding: 'utf8',
  }).trim();
  const bin = join(dir, 'bin', 'kubectl');
  const r = spawnSync(existsSync(bin) ? bin : 'kubectl', args, { env, stdio: 'inherit' });
  if (r.status !== 0) throw new Error(`kubectl ${args.join(' ')} failed (exit ${r.status})`);
}

async function main(): Promise<void> {
  step('starting the local stack (npm run stack -- up)');
  const up = spawnSync('npm', ['run', 'stack', '--', 'up'], { cwd: ROOT, stdio: 'inherit' });
  if (up.status !== 0) throw new Error(`npm run stack -- up failed (exit ${up.status})`);
  const env: NodeJS.ProcessEnv = { ...process.env, ...stackEnv() };

  step('starting the operator (npm start)');
  const operator = spawn('npm', ['start'], { cwd: ROOT, env, stdio: 'inherit', detached: true });
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    console.log('\n==> stopping the operator (SIGTERM)');
    // npm and tsx sit between us and node: signal the whole process group.
    if (operator.pid) process.kill(-operator.pid, 'SIGTERM');
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);

  const probe = `http://127.0.0.1:${(env.PROBE_ADDR ?? ':8081').split(':').pop()}`;
  const metrics = `http://127.0.0.1:${(env.METRICS_ADDR ?? ':8080').split(':').pop()}/metrics`;
  for (let i = 0; i < 120 && !stopping && operator.exitCode === null; i++) {
    const ok = await fetch(`${probe}/readyz`)
      .then((r) => r.ok)
      .catch(() => false);
    if (ok) break;
    await new Promise((r) => setTimeout(r, 1000));
  }

  if (!stopping && operator.exitCode === null) {
    // The stack has applied the CRDs already.
    step('applying config/samples/');
    const samples = join(ROOT, 'config', 'samples');
    if (existsSync(samples)) {
      // Clone-mode VMs clone from a base image in the registry, as with the real vk-cocoon: seed the images
      // the samples name (idempotent), or the sample CocoonSet's pods fail with "image … not found".
      await seedSampleImages(samples, env.OCI_REGISTRY ?? '');
      kubectl(env, ['apply', '-k', samples]);
    }
    console.log(`
cocoon-operator is running against the local stack.
  Temporal UI   http://127.0.0.1:8233
  metrics       ${metrics}
  readiness     ${probe}/readyz
  kubectl       KUBECONFIG=${env.KUBECONFIG ?? '(see npm run -s stack -- env)'} kubectl get cocoonsets,cocoonhibernations -A
Ctrl-C stops the operator; npm run stack -- down stops the stack.`);
  }

  const code = await new Promise<number>((resolve) => operator.on('exit', (c) => resolve(c ?? 0)));
  process.exit(stopping ? 0 : code);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) {
  main().catch((err) => {
    console.error(`dev: ${(err as Error).message}`);
    process.exit(1);
  });
}
