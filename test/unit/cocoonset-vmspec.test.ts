/**
 * VMSpec / VMRuntime annotation codec, defaults and connection type (cocoon-common meta/vmspec.go,
 * vmruntime.go, hibernate.go; docs/wire-contract.md#defaults, docs/cocoonset.md#pods).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { Annotations } from '../../src/api/keys.js';
import {
  applyVMRuntime,
  applyVMSpec,
  connectionType,
  parseVMRuntime,
  parseVMSpec,
  type VMSpec,
  vmSpecFromAgent,
  vmSpecFromToolbox,
  vmSpecsEqual,
} from '../../src/cocoonset/vmspec.js';

const empty: VMSpec = {
  vmName: '',
  image: '',
  mode: '',
  os: '',
  storage: '',
  network: '',
  snapshotPolicy: '',
  forkFrom: '',
  managed: false,
  forcePull: false,
  noDirectIO: false,
  connType: '',
  backend: '',
  probePort: '',
};

describe('VMSpec apply / parse', () => {
  it('writes only non-empty strings and true flags, merging into the existing map', () => {
    const pod: V1Pod = { metadata: { annotations: { keep: 'me', [Annotations.image]: 'old' } } };
    applyVMSpec(pod, { ...empty, vmName: 'vm', image: '', forcePull: true, noDirectIO: false });
    expect(pod.metadata!.annotations).toEqual({
      keep: 'me',
      [Annotations.image]: 'old',
      [Annotations.vmName]: 'vm',
      [Annotations.forcePull]: 'true',
    });
  });

  it('creates the annotation map when missing and round-trips all 14 fields', () => {
    const full: VMSpec = {
      vmName: 'vk-ns-demo-1',
      image: 'img',
      mode: 'run',
      os: 'windows',
      storage: '10Gi',
      network: 'net',
      snapshotPolicy: 'never',
      forkFrom: 'vk-ns-demo-0',
      managed: true,
      forcePull: true,
      noDirectIO: true,
      connType: 'rdp',
      backend: 'firecracker',
      probePort: '8080',
    };
    const pod: V1Pod = {};
    applyVMSpec(pod, full);
    expect(Object.keys(pod.metadata!.annotations!)).toHaveLength(14);
    expect(parseVMSpec(pod)).toEqual(full);
    expect(vmSpecsEqual(parseVMSpec(pod), full)).toBe(true);
    expect(vmSpecsEqual(parseVMSpec(pod), { ...full, probePort: '' })).toBe(false);
  });

  it('reads a flag as true only for the exact string "true"', () => {
    const pod: V1Pod = {
      metadata: { annotations: { [Annotations.managed]: 'True', [Annotations.forcePull]: 'true' } },
    };
    expect([parseVMSpec(pod).managed, parseVMSpec(pod).forcePull]).toEqual([false, true]);
    expect(parseVMSpec(undefined)).toEqual(empty);
  });
});

describe('VMSpec from the CocoonSet spec', () => {
  it('applies agent defaults and the set-level snapshot policy; always managed', () => {
    expect(vmSpecFromAgent({ image: 'img' }, 'vm', undefined, '')).toEqual({
      ...empty,
      vmName: 'vm',
      image: 'img',
      mode: 'clone',
      os: 'linux',
      snapshotPolicy: 'always',
      managed: true,
      backend: 'cloud-hypervisor',
    });
  });

  it('writes the probe port only when > 0 and storage in canonical form', () => {
    expect(vmSpecFromAgent({ image: 'i', probePort: 0 }, 'vm', 'main-only', 'f').probePort).toBe('');
    const s = vmSpecFromAgent({ image: 'i', probePort: 22, storage: '2048Mi' }, 'vm', 'main-only', 'f');
    expect([s.probePort, s.storage, s.snapshotPolicy, s.forkFrom]).toEqual(['22', '2Gi', 'main-only', 'f']);
  });

  it('toolboxes default to run mode and are managed unless the raw mode is static', () => {
    expect(vmSpecFromToolbox({ name: 'tb' }, 'vm', undefined)).toMatchObject({
      mode: 'run',
      managed: true,
      forkFrom: '',
    });
    expect(vmSpecFromToolbox({ name: 'tb', mode: 'clone' }, 'vm', undefined).managed).toBe(true);
    expect(vmSpecFromToolbox({ name: 'tb', mode: 'static' }, 'vm', undefined).managed).toBe(false);
  });
});

describe('VMRuntime', () => {
  it('writes id / ip / vnc-port only when set, and reads a bad port as 0', () => {
    const pod: V1Pod = { metadata: { annotations: { [Annotations.cocoonSetGeneration]: '3' } } };
    applyVMRuntime(pod, { vmID: '', ip: '10.0.0.1', vncPort: 0 });
    expect(pod.metadata!.annotations).toEqual({
      [Annotations.cocoonSetGeneration]: '3',
      [Annotations.ip]: '10.0.0.1',
    });
    expect(parseVMRuntime(pod)).toEqual({ vmID: '', ip: '10.0.0.1', vncPort: 0 });
    for (const [raw, want] of [
      ['5901', 5901],
      ['+5901', 5901],
      ['x', 0],
      ['2147483648', 0],
      ['59.1', 0],
    ] as const) {
      expect(parseVMRuntime({ metadata: { annotations: { [Annotations.vncPort]: raw } } }).vncPort, raw).toBe(
        want,
      );
    }
  });
});

describe('connectionType', () => {
  it.each([
    ['linux', false, '', 'ssh'],
    ['macos', false, '', 'ssh'],
    ['windows', false, '', 'rdp'],
    ['android', false, '', 'adb'],
    ['windows', true, '', 'vnc'],
    ['android', true, 'ssh', 'ssh'],
  ] as const)('os=%s hasVNC=%s override=%s → %s', (os, hasVNC, override, want) => {
    expect(connectionType(os, hasVNC, override)).toBe(want);
  });
});
