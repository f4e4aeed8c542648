/**
 * `npm run dev`: the whole thing on this machine. Brings up the local stack (`npm run stack -- up`), reads
 * its environment (`npm run -s stack -- env`), starts the operator (`npm start`) with it, readable logs
 * (`LOG_FORMAT=pretty`) and Temporal UI links on its CRs (`TEMPORAL_UI_URL`), applies config/samples/ with
 * the stack's kubectl, waits for the sample CocoonSet to report Running, prints the commands to watch and
 * drive it, and runs until Ctrl-C (which stops the operator gracefully; the stack keeps running,
 * `npm run stack -- down` stops it). `npm run dev` installs the npm dependencies first (scripts/deps.sh).
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
/** The local stack's Temporal UI (scripts/stack.ts starts the dev server's UI there). */
const TEMPORAL_UI = 'http://127.0.0.1:8233';
/** How long to wait for the sample CocoonSet to report Running before printing the guide anyway. */
const SAMPLE_READY_TIMEOUT_MS = 180_000;

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

function kubectlBin(): string {
  const dir = execFileSync('bash', [join(ROOT, 'scripts', 'tools.sh'), 'path', 'kube'], {
    encoding: 'utf8',
  }).trim();
  const bin = join(dir, 'bin', 'kubectl');
  return existsSync(bin) ? bin : 'kubectl';
}

function kubectl(env: NodeJS.ProcessEnv, args: string[]): void {
  const r = spawnSync(kubectlBin(), args, { env, stdio: 'inherit' });
  if (r.status !== 0) throw new Error(`kubectl ${args.join(' ')} failed (exit ${r.status})`);
}

/** True when the sample CocoonSet default/demo exists. */
function sampleSetExists(env: NodeJS.ProcessEnv): boolean {
  const r = spawnSync(kubectlBin(), ['get', 'cocoonset', 'demo', '-n', 'default', '-o', 'name'], {
    env,
    encoding: 'utf8',
  });
  return r.status === 0 && r.stdout.trim() !== '';
}

/** The sample CocoonSet's `status.phase`, `readyAgents/desiredAgents` and toolbox counts ('' when unread). */
function sampleSetStatus(env: NodeJS.ProcessEnv): { phase: string; summary: string } {
  const r = spawnSync(
    kubectlBin(),
    [
      'get',
      'cocoonset',
      'demo',
      '-n',
      'default',
      '-o',
      'jsonpath={.status.phase} {.status.readyAgents}/{.status.desiredAgents} agents, {.status.readyToolboxes}/{.status.desiredToolboxes} toolboxes',
    ],
    { env, encoding: 'utf8' },
  );
  const out = r.status === 0 ? r.stdout.trim() : '';
  return { phase: out.split(' ')[0] ?? '', summary: out };
}

/** Polls the sample set until it reports Running (or the timeout passes); returns its last status line. */
async function waitForSampleSet(env: NodeJS.ProcessEnv, isStopping: () => boolean): Promise<string> {
  const deadline = Date.now() + SAMPLE_READY_TIMEOUT_MS;
  let last = sampleSetStatus(env);
  while (last.phase !== 'Running' && Date.now() < deadline && !isStopping()) {
    await new Promise((r) => setTimeout(r, 2000));
    last = sampleSetStatus(env);
  }
  return last.summary || '(no status yet)';
}

async function main(): Promise<void> {
  step('starting the local stack (npm run stack -- up)');
  const up = spawnSync('npm', ['run', 'stack', '--', 'up'], { cwd: ROOT, stdio: 'inherit' });
  if (up.status !== 0) throw new Error(`npm run stack -- up failed (exit ${up.status})`);
  const env: NodeJS.ProcessEnv = { ...process.env, ...stackEnv() };

  // Readable logs and UI links unless the caller chose otherwise.
  env.LOG_FORMAT ||= 'pretty';
  env.TEMPORAL_UI_URL ||= TEMPORAL_UI;
  // Out of a cluster the Lease namespace cannot be discovered; say it, instead of a warning at every start.
  env.LEADER_ELECTION_NAMESPACE ||= 'default';

  step('starting the operator (npm start)');
  const operator = spawn('npm', ['start', '--silent'], { cwd: ROOT, env, stdio: 'inherit', detached: true });
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
      // Applied once: a later start must not undo the user's edits to the sample set.
      if (!sampleSetExists(env)) kubectl(env, ['apply', '-k', samples]);
      else
        console.log('    default/demo exists: not re-applied (kubectl apply -k config/samples to reset it)');
      step('waiting for the sample CocoonSet default/demo to report Running');
      console.log(`    demo: ${await waitForSampleSet(env, () => stopping)}`);
    }
    console.log(`
cocoon-operator is running against the local stack (logs below; Ctrl-C stops it, the stack keeps running:
npm run stack -- down stops that).
  Temporal UI   ${TEMPORAL_UI}   (search: CocoonKind = "CocoonSet")
  metrics       ${metrics}
  readiness     ${probe}/readyz?verbose

In another terminal:
  eval "$(npm run -s stack -- env)"          # kubectl, temporal and KUBECONFIG of the local stack
  kubectl get cocoonsets,cocoonhibernations,pods -n default
  temporal workflow list --query 'CocoonNamespace = "default"'
  temporal workflow query --workflow-id cocoonset/default/demo --type state

Hibernate the main agent, watch it happen, wake it again:
  kubectl apply -f config/samples/cocoonhibernation.yaml
  kubectl get cocoonhibernations -n default -w
  temporal workflow show --workflow-id vm/default/demo-0
  kubectl patch cocoonhibernation demo-0 -n default --type merge -p '{"spec":{"desire":"Wake"}}'
  kubectl describe cocoonhibernation demo-0 -n default   # annotations link the workflow; Events at the end
`);
  }

  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) => {
    if (operator.exitCode !== null || operator.signalCode !== null)
      resolve([operator.exitCode, operator.signalCode]);
    else operator.on('exit', (c, s) => resolve([c, s]));
  });
  if (stopping) process.exit(0);
  // Killed or crashed: say so (the stack keeps running), rather than end without a word.
  console.error(
    `\n==> the operator exited (${signal ? `signal ${signal}` : `exit code ${code}`}); the stack keeps running: npm run dev starts the operator again`,
  );
  process.exit(code || 1);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) {
  main().catch((err) => {
    console.error(`dev: ${(err as Error).message}`);
    process.exit(1);
  });
}
