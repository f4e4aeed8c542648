/**
 * The VM description the operator writes into pod annotations for vk-cocoon (cocoon-common meta/vmspec.go,
 * meta/vmruntime.go, apis/v1 enums; docs/wire-contract.md#defaults, docs/cocoonset.md#pods). Pure functions;
 * the pod passed to an `apply*` function is mutated in place (its annotation map is merged into, never
 * replaced).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { Annotations } from '../api/keys.js';
import type { PodLike } from '../api/pod.js';
import type { AgentSpec, CocoonSet, ToolboxSpec, VMOptions } from '../api/types.js';
import { canonicalQuantity } from './quantity.js';

/**
 * Code-side defaults applied whenever a field is read (apis/v1 enums `.Default()`,
 * docs/wire-contract.md#defaults).
 */
export const Defaults = {
  agentMode: 'clone',
  toolboxMode: 'run',
  os: 'linux',
  snapshotPolicy: 'always',
  hibernatePolicy: 'retain',
  backend: 'cloud-hypervisor',
} as const;

/** `v` or `fallback` when `v` is empty/undefined (Go `Enum.Default()`). */
function orDefault(v: string | undefined, fallback: string): string {
  return v ? v : fallback;
}

/** Agent mode with its default `clone`. */
export function agentModeOf(agent: AgentSpec): string {
  return orDefault(agent.mode, Defaults.agentMode);
}

/** Toolbox mode with its default `run`. */
export function toolboxModeOf(tb: ToolboxSpec): string {
  return orDefault(tb.mode, Defaults.toolboxMode);
}

/** The CocoonSet's snapshot policy with its default `always`. */
export function snapshotPolicyOf(cs: CocoonSet): string {
  return orDefault(cs.spec.snapshotPolicy, Defaults.snapshotPolicy);
}

/** The CocoonSet's hibernate policy with its default `retain`. */
export function hibernatePolicyOf(cs: CocoonSet): string {
  return orDefault(cs.spec.hibernatePolicy, Defaults.hibernatePolicy);
}

/** Number of sub-agents (`spec.agent.replicas`, default 0). */
export function replicasOf(cs: CocoonSet): number {
  return cs.spec.agent.replicas ?? 0;
}

/**
 * The 14-field VM description (cocoon-common `meta.VMSpec`). Strings are '' when unset; booleans are
 * written as the literal "true" only when true. `probePort` is the decimal string or ''.
 */
export interface VMSpec {
  vmName: string;
  image: string;
  mode: string;
  os: string;
  storage: string;
  network: string;
  snapshotPolicy: string;
  forkFrom: string;
  managed: boolean;
  forcePull: boolean;
  noDirectIO: boolean;
  connType: string;
  backend: string;
  probePort: string;
}

const STRING_KEYS = {
  vmName: Annotations.vmName,
  image: Annotations.image,
  mode: Annotations.mode,
  os: Annotations.os,
  storage: Annotations.storage,
  network: Annotations.network,
  snapshotPolicy: Annotations.snapshotPolicy,
  forkFrom: Annotations.forkFrom,
  connType: Annotations.connType,
  backend: Annotations.backend,
  probePort: Annotations.probePort,
} as const satisfies Partial<Record<keyof VMSpec, string>>;

const BOOL_KEYS = {
  managed: Annotations.managed,
  forcePull: Annotations.forcePull,
  noDirectIO: Annotations.noDirectIO,
} as const satisfies Partial<Record<keyof VMSpec, string>>;

function annotationsOf(pod: V1Pod): Record<string, string> {
  pod.metadata ??= {};
  pod.metadata.annotations ??= {};
  return pod.metadata.annotations;
}

/**
 * Merges the spec into the pod's annotations (`VMSpec.Apply`): each non-empty string and each true
 * boolean is written; nothing is ever deleted, and the existing map is kept (so the generation stamp
 * survives).
 */
export function applyVMSpec(pod: V1Pod, spec: VMSpec): void {
  const ann = annotationsOf(pod);
  for (const [field, key] of Object.entries(STRING_KEYS) as [keyof typeof STRING_KEYS, string][]) {
    if (spec[field] !== '') ann[key] = spec[field];
  }
  for (const [field, key] of Object.entries(BOOL_KEYS) as [keyof typeof BOOL_KEYS, string][]) {
    if (spec[field]) ann[key] = 'true';
  }
}

/** Reads the spec back from annotations (`ParseVMSpec`): a missing key is ''; a bool is true only for "true". */
export function parseVMSpec(pod: PodLike | undefined): VMSpec {
  const ann = pod?.metadata?.annotations ?? {};
  const s = (key: string) => ann[key] ?? '';
  const b = (key: string) => ann[key] === 'true';
  return {
    vmName: s(Annotations.vmName),
    image: s(Annotations.image),
    mode: s(Annotations.mode),
    os: s(Annotations.os),
    storage: s(Annotations.storage),
    network: s(Annotations.network),
    snapshotPolicy: s(Annotations.snapshotPolicy),
    forkFrom: s(Annotations.forkFrom),
    managed: b(Annotations.managed),
    forcePull: b(Annotations.forcePull),
    noDirectIO: b(Annotations.noDirectIO),
    connType: s(Annotations.connType),
    backend: s(Annotations.backend),
    probePort: s(Annotations.probePort),
  };
}

/** Field-by-field equality of all 14 fields (drift check, docs/cocoonset.md#drift). */
export function vmSpecsEqual(a: VMSpec, b: VMSpec): boolean {
  return (Object.keys(a) as (keyof VMSpec)[]).every((k) => a[k] === b[k]);
}

/** Canonical Quantity string of `storage`, or '' when unset. Throws QuantityParseError on a bad value. */
export function storageString(storage: VMOptions['storage']): string {
  return storage === undefined || storage === null ? '' : canonicalQuantity(storage);
}

function fromOptions(
  opts: VMOptions,
): Omit<VMSpec, 'vmName' | 'image' | 'mode' | 'snapshotPolicy' | 'forkFrom' | 'managed'> {
  const probe = opts.probePort ?? 0;
  return {
    os: orDefault(opts.os, Defaults.os),
    storage: storageString(opts.storage),
    network: opts.network ?? '',
    forcePull: opts.forcePull === true,
    noDirectIO: opts.noDirectIO === true,
    connType: opts.connType ?? '',
    backend: orDefault(opts.backend, Defaults.backend),
    probePort: probe > 0 ? String(probe) : '',
  };
}

/**
 * `VMSpecFromAgentSpec`: image, mode (default clone), os (default linux), canonical storage, network,
 * the CocoonSet-level snapshot policy (default always), force-pull, no-direct-io, conn-type as given,
 * backend (default cloud-hypervisor), probe-port when > 0, the given fork-from; always managed.
 */
export function vmSpecFromAgent(
  agent: AgentSpec,
  vmName: string,
  policy: string | undefined,
  forkFrom: string,
): VMSpec {
  return {
    ...fromOptions(agent),
    vmName,
    image: agent.image ?? '',
    mode: agentModeOf(agent),
    snapshotPolicy: orDefault(policy, Defaults.snapshotPolicy),
    forkFrom,
    managed: true,
  };
}

/**
 * `VMSpecFromToolboxSpec`: as for agents from the toolbox's own options, mode default `run`, never a
 * fork-from; managed unless the raw mode is `static` (an empty mode counts as managed).
 */
export function vmSpecFromToolbox(tb: ToolboxSpec, vmName: string, policy: string | undefined): VMSpec {
  return {
    ...fromOptions(tb),
    vmName,
    image: tb.image ?? '',
    mode: toolboxModeOf(tb),
    snapshotPolicy: orDefault(policy, Defaults.snapshotPolicy),
    forkFrom: '',
    managed: tb.mode !== 'static',
  };
}

/** Runtime facts vk-cocoon reports (pre-written by the operator for static toolboxes), `meta.VMRuntime`. */
export interface VMRuntime {
  vmID: string;
  ip: string;
  /** 0 when absent. */
  vncPort: number;
}

/** Writes id / ip / vnc-port, each only when non-empty or > 0 (`VMRuntime.Apply`); merges, never deletes. */
export function applyVMRuntime(pod: V1Pod, rt: VMRuntime): void {
  const ann = annotationsOf(pod);
  if (rt.vmID !== '') ann[Annotations.vmID] = rt.vmID;
  if (rt.ip !== '') ann[Annotations.ip] = rt.ip;
  if (rt.vncPort > 0) ann[Annotations.vncPort] = String(rt.vncPort);
}

/** Parses a decimal int32 as Go `strconv.ParseInt(s, 10, 32)`; anything else is 0. */
export function parseInt32(raw: string | undefined): number {
  if (!raw || !/^[+-]?[0-9]+$/.test(raw)) return 0;
  const n = Number(raw);
  return n >= -2147483648 && n <= 2147483647 ? n : 0;
}

/** Reads the runtime annotations (`ParseVMRuntime`); a vnc-port that is not an int32 reads as 0. */
export function parseVMRuntime(pod: PodLike | undefined): VMRuntime {
  const ann = pod?.metadata?.annotations ?? {};
  return {
    vmID: ann[Annotations.vmID] ?? '',
    ip: ann[Annotations.ip] ?? '',
    vncPort: parseInt32(ann[Annotations.vncPort]),
  };
}

/**
 * `meta.ConnectionType(os, hasVNC, override)`: a non-empty override wins; else vnc when a VNC port is
 * known, adb for android, rdp for windows, ssh for everything else (macos included).
 */
export function connectionType(os: string, hasVNC: boolean, override: string): string {
  if (override !== '') return override;
  if (hasVNC) return 'vnc';
  if (os === 'android') return 'adb';
  if (os === 'windows') return 'rdp';
  return 'ssh';
}
