/**
 * The production watch sources (src/watcher/kube-source.ts) deliver objects without
 * `metadata.managedFields`: the informers cache what they return. The list path is driven here by a fake page
 * fetcher; the watch path is covered end to end by the e2e suites.
 */
import { KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import type { KubeClients } from '../../src/kube/client.js';
import { kubeWatchSource } from '../../src/watcher/kube-source.js';

const managed = [{ manager: 'vk-cocoon', operation: 'Update', fieldsV1: { 'f:metadata': {} } }];

function pod(name: string): V1Pod {
  return { metadata: { name, namespace: 'ns', resourceVersion: '1', managedFields: managed } };
}

describe('kubeWatchSource', () => {
  it('lists every page and drops managedFields from each item (the cache keeps the rest of the object)', async () => {
    const pages = [
      { items: [pod('a'), pod('b')], metadata: { resourceVersion: '7', _continue: 'next' } },
      { items: [pod('c')], metadata: { resourceVersion: '9' } },
    ];
    const kube = { kc: new KubeConfig() } as KubeClients;
    const source = kubeWatchSource<V1Pod>(kube, '/api/v1/pods', async (cont) => pages[cont ? 1 : 0]!);
    const { items, resourceVersion } = await source.list();
    expect(resourceVersion).toBe('9');
    expect(items.map((p) => p.metadata?.name)).toEqual(['a', 'b', 'c']);
    for (const p of items) {
      expect(p.metadata?.managedFields).toBeUndefined();
      expect(p.metadata).toMatchObject({ namespace: 'ns', resourceVersion: '1' });
    }
    // JSON (and so Temporal payloads and the watcher's fingerprints) carries no trace of the field.
    expect(JSON.stringify(items[0])).not.toContain('managedFields');
  });
});
