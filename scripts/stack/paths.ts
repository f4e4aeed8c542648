/**
 * Where the local stack lives: the stack dir, fixed loopback ports, tool binaries and the environment it
 * exports (docs/development.md#local-stack). Everything else in scripts/stack/ reads from here.
 */
import { execFileSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Absolute path of the repository root (two levels above this file). */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Fixed loopback ports of the stack's components. */
export const Ports = {
  etcdClient: 23790,
  etcdPeer: 23800,
  apiserver: 6443,
  temporal: 7233,
  temporalUi: 8233,
  registry: 5000,
  vksim: 18089,
} as const;

export const HOST = '127.0.0.1';
export const TEMPORAL_NAMESPACE = 'default';

/** The stack dir: STACK_DIR, else `<repo>/.stack`. Holds data, certificates, logs and pid files. */
export function stackDir(): string {
  return resolve(process.env.STACK_DIR || join(repoRoot, '.stack'));
}

/** File layout inside the stack dir. */
export function stackPaths(dir = stackDir()) {
  return {
    dir,
    logs: join(dir, 'logs'),
    run: join(dir, 'run'),
    pki: join(dir, 'pki'),
    etcdData: join(dir, 'etcd'),
    registryData: join(dir, 'registry'),
    registryConfig: join(dir, 'registry.yml'),
    temporalDb: join(dir, 'temporal.db'),
    adminKubeconfig: join(dir, 'admin.kubeconfig'),
    lock: join(dir, 'up.lock'),
  };
}

/** Names accepted by `scripts/tools.sh path NAME`. */
export type ToolName = 'kube' | 'etcd' | 'registry' | 'temporal';

const toolDirCache = new Map<ToolName, string>();

/** The versioned cache dir of a tool, as scripts/tools.sh (the only place versions are pinned) prints it. */
export function toolDir(name: ToolName): string {
  let dir = toolDirCache.get(name);
  if (!dir) {
    dir = execFileSync('bash', [join(repoRoot, 'scripts', 'tools.sh'), 'path', name], {
      encoding: 'utf8',
    }).trim();
    toolDirCache.set(name, dir);
  }
  return dir;
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function onPath(cmd: string): string | undefined {
  for (const d of (process.env.PATH ?? '').split(delimiter)) {
    if (d && isExecutable(join(d, cmd))) return join(d, cmd);
  }
  return undefined;
}

/** Binaries of the stack. The Temporal CLI is TEMPORAL_CLI, else `temporal` on PATH, else the tool cache. */
export function binaries() {
  const temporalBin = join(toolDir('temporal'), 'bin');
  return {
    etcd: join(toolDir('etcd'), 'bin', 'etcd'),
    apiserver: join(toolDir('kube'), 'bin', 'kube-apiserver'),
    kubectl: join(toolDir('kube'), 'bin', 'kubectl'),
    registry: join(toolDir('registry'), 'bin', 'registry'),
    temporal: process.env.TEMPORAL_CLI || onPath('temporal') || join(temporalBin, 'temporal'),
    temporalTestServer: process.env.TEMPORAL_TEST_SERVER_PATH || join(temporalBin, 'temporal-test-server'),
  };
}

/** Entry point of the vk-cocoon simulator (written elsewhere; optional for `up`). */
export const vksimEntry = join(repoRoot, 'test', 'vksim', 'main.ts');

/** What `stack env` exports and test/e2e/stack-harness.ts reads. */
export interface StackEnvValues {
  STACK_DIR: string;
  KUBECONFIG: string;
  TEMPORAL_ADDRESS: string;
  TEMPORAL_NAMESPACE: string;
  OCI_REGISTRY: string;
  VKSIM_URL: string;
  TEMPORAL_CLI: string;
  TEMPORAL_TEST_SERVER_PATH: string;
  /** Directories to prepend to PATH so `kubectl` and `temporal` resolve to the stack's binaries. */
  PATH_PREPEND: string[];
}

/** Computes the stack's environment (no I/O beyond resolving the tool dirs; does not check health). */
export function stackEnvValues(): StackEnvValues {
  const p = stackPaths();
  const b = binaries();
  const pathDirs = [dirname(b.kubectl), dirname(b.temporal)].filter((d, i, all) => all.indexOf(d) === i);
  return {
    STACK_DIR: p.dir,
    KUBECONFIG: p.adminKubeconfig,
    TEMPORAL_ADDRESS: `${HOST}:${Ports.temporal}`,
    TEMPORAL_NAMESPACE,
    OCI_REGISTRY: `${HOST}:${Ports.registry}`,
    VKSIM_URL: `http://${HOST}:${Ports.vksim}`,
    TEMPORAL_CLI: b.temporal,
    TEMPORAL_TEST_SERVER_PATH: b.temporalTestServer,
    PATH_PREPEND: pathDirs,
  };
}
