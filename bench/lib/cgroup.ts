/**
 * A memory cgroup for one child process, so the shipped scenario runs the operator under the memory limit
 * its Deployment gives it (config/manager/deployment.yaml), as the kubelet would: a container runs in a
 * cgroup whose limit is the container's `resources.limits.memory`. That changes more than the OOM killer's
 * threshold: Node reads the limit at start (`process.constrainedMemory()`) and sizes every V8 heap, the
 * main thread's and each worker thread's, from it instead of from the machine's memory. On this machine
 * (24 GiB) an unconstrained Node allows each isolate about 4.2 GiB of heap; under 512 MiB, about 259 MiB.
 *
 * Works as root with the memory controller mounted: cgroup v1 (`/sys/fs/cgroup/memory`) or v2 with
 * `memory` enabled in the parent's `cgroup.subtree_control` (`ip netns exec` hides both: it mounts a fresh
 * /sys; `nsenter --net=/run/netns/<name>` enters only the network namespace). The cgroup is made under this process's own
 * (so it nests inside whatever limit this process already has). Otherwise {@link createMemoryCgroup}
 * returns the reason, and the caller runs the child unconstrained and says so.
 */
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { parseQuantity } from '../../src/cocoonset/quantity.js';

/** What the cgroup saw of its processes (bytes; counts since it was made). */
export interface MemoryCgroupUsage {
  /** Highest memory charged to the cgroup (RSS, page cache and kernel memory of its processes). */
  peakBytes: number;
  /** Times the charge reached the limit (the kernel then reclaimed, or failed to). */
  limitHits: number;
  /** Processes the OOM killer ended in it. */
  oomKills: number;
}

/** A cgroup with a memory limit; a child joins it by writing its pid to `procsFile` before it execs. */
export interface MemoryCgroup {
  dir: string;
  procsFile: string;
  /** Reads the counters now (NaN for one the kernel does not offer, e.g. v2's memory.peak before 5.19). */
  usage(): MemoryCgroupUsage;
  /** Removes the cgroup (once its processes have exited; a failure is ignored). */
  remove(): void;
}

const V1_ROOT = '/sys/fs/cgroup/memory';

function readNumber(file: string): number {
  try {
    return Number(readFileSync(file, 'utf8').trim());
  } catch {
    return Number.NaN;
  }
}

/** `key value` lines (memory.events, memory.oom_control) → the value of `key`, NaN when absent. */
function keyed(file: string, key: string): number {
  try {
    const m = new RegExp(`^${key} (\\d+)$`, 'm').exec(readFileSync(file, 'utf8'));
    return m ? Number(m[1]) : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

/** The mount point of the cgroup v2 hierarchy, from /proc/self/mountinfo. */
function v2MountPoint(): string | undefined {
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const [pre, post] = line.split(' - ');
    if (post?.startsWith('cgroup2 ')) return pre?.split(' ')[4];
  }
  return undefined;
}

/**
 * Makes cgroup `name` under this process's own memory cgroup with a limit of `limitBytes`. Returns the
 * cgroup, or `{ reason }` saying why it could not (not root, no memory controller, a read-only hierarchy).
 */
export function createMemoryCgroup(name: string, limitBytes: number): MemoryCgroup | { reason: string } {
  if (process.getuid?.() !== 0) return { reason: 'not root' };
  let own: string;
  try {
    own = readFileSync('/proc/self/cgroup', 'utf8');
  } catch (err) {
    return { reason: `cannot read /proc/self/cgroup: ${(err as Error).message}` };
  }
  const v1 = /^\d+:(?:[^:]*,)?memory(?:,[^:]*)?:(.*)$/m.exec(own);
  try {
    if (v1)
      return limited(join(V1_ROOT, v1[1]!), name, limitBytes, {
        limit: 'memory.limit_in_bytes',
        usage: (dir) => ({
          peakBytes: readNumber(join(dir, 'memory.max_usage_in_bytes')),
          limitHits: readNumber(join(dir, 'memory.failcnt')),
          oomKills: keyed(join(dir, 'memory.oom_control'), 'oom_kill'),
        }),
      });
    const v2 = /^0::(.*)$/m.exec(own);
    const mount = v2MountPoint();
    if (!v2 || !mount)
      return { reason: 'no memory cgroup controller (neither cgroup v1 memory nor cgroup v2)' };
    const parent = join(mount, v2[1]!);
    const enabled = readFileSync(join(parent, 'cgroup.subtree_control'), 'utf8').split(/\s+/);
    if (!enabled.includes('memory'))
      return { reason: `cgroup v2 ${parent} does not delegate the memory controller` };
    return limited(parent, name, limitBytes, {
      limit: 'memory.max',
      usage: (dir) => ({
        peakBytes: readNumber(join(dir, 'memory.peak')),
        limitHits: keyed(join(dir, 'memory.events'), 'max'),
        oomKills: keyed(join(dir, 'memory.events'), 'oom_kill'),
      }),
    });
  } catch (err) {
    return { reason: `cannot make a memory cgroup: ${(err as Error).message}` };
  }
}

/**
 * Makes `parent/name` with `limitBytes` written to its `files.limit`. Not recursively: the parent is this
 * process's own cgroup, which must be visible; under `ip netns exec`, which mounts a fresh /sys, it is not
 * (enter the namespace with `nsenter --net`).
 */
function limited(
  parent: string,
  name: string,
  limitBytes: number,
  files: { limit: string; usage: (dir: string) => MemoryCgroupUsage },
): MemoryCgroup | { reason: string } {
  if (!existsSync(parent)) return { reason: `${parent} is not mounted here` };
  const dir = join(parent, name);
  if (!existsSync(dir)) mkdirSync(dir);
  writeFileSync(join(dir, files.limit), String(limitBytes));
  return {
    dir,
    procsFile: join(dir, 'cgroup.procs'),
    usage: () => files.usage(dir),
    remove: () => removeDir(dir),
  };
}

function removeDir(dir: string): void {
  try {
    rmdirSync(dir);
  } catch {
    // still in use or already gone: the kernel frees it with its last process
  }
}

/**
 * The memory limit of the operator's container in a Deployment manifest (default: the repo's
 * config/manager/deployment.yaml), in bytes, with the quantity as written. Throws when the manifest names
 * none.
 */
export function deploymentMemoryLimit(file: string): { bytes: number; quantity: string } {
  const doc = parseYaml(readFileSync(file, 'utf8')) as {
    spec?: { template?: { spec?: { containers?: { resources?: { limits?: { memory?: string } } }[] } } };
  };
  const quantity = doc.spec?.template?.spec?.containers?.[0]?.resources?.limits?.memory;
  if (!quantity) throw new Error(`${file}: the first container has no resources.limits.memory`);
  return { bytes: quantityBytes(String(quantity)), quantity: String(quantity) };
}

/** A Kubernetes quantity (`512Mi`, `1.5Gi`, `500M`) in bytes; throws on a malformed one (Go's message). */
export function quantityBytes(quantity: string): number {
  const q = parseQuantity(quantity);
  return Number(q.unscaled) * 10 ** q.exp;
}
