/**
 * The production watch sources (src/watcher/kube-source.ts) deliver objects without
 * `metadata.managedFields`: the informers cache what they return. The list path is driven by a fake page
 * fetcher, the watch path by a local HTTP server that answers the watch request with a stream of events (the
 * apiserver's side of the boundary; client-node's own `Watch` does the client side).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { afterEach, describe, expect, it } from 'vitest';
import type { KubeClients } from '../../src/kube/client.js';
import { kubeWatchSource } from '../../src/watcher/kube-source.js';
import { kubeConfigFor } from '../support/kubeconfig.js';

const managed = [{ manager: 'vk-cocoon', operation: 'Update', fieldsV1: { 'f:metadata': {} } }];

function pod(name: string): V1Pod {
  return { metadata: { name, namespace: 'ns', resourceVersion: '1', managedFields: managed } };
}

describe('kubeWatchSource', () => {
  let server: Server | undefined;
  afterEach(() => new Promise<void>((done) => (server ? server.close(() => done()) : done())));

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

  it('watches and drops managedFields from ADDED/MODIFIED/DELETED objects, passing BOOKMARK and ERROR through as sent', async () => {
    const requested: string[] = [];
    const lines = [
      { type: 'ADDED', object: pod('a') },
      { type: 'MODIFIED', object: pod('a') },
      {
        type: 'BOOKMARK',
        object: { kind: 'Pod', metadata: { resourceVersion: '12', managedFields: managed } },
      },
      { type: 'DELETED', object: pod('a') },
      { type: 'ERROR', object: { kind: 'Status', code: 410, metadata: { managedFields: managed } } },
    ];
    server = createServer((req, res) => {
      requested.push(req.url ?? '');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
    });
    await new Promise<void>((ready) => server!.listen(0, '127.0.0.1', ready));
    const { port } = server.address() as AddressInfo;
    const kube = { kc: kubeConfigFor(`http://127.0.0.1:${port}`) } as KubeClients;
    // A decode that marks what it saw: only objects of the watched kind go through it.
    const decode = (raw: unknown): V1Pod => ({ ...(raw as V1Pod), kind: 'Decoded' });
    const source = kubeWatchSource<V1Pod>(kube, '/api/v1/pods', async () => ({ items: [] }), decode);
    const events: { type: string; obj: unknown }[] = [];
    const done = new Promise<unknown>((resolve) => {
      void source.watch('5', (type, obj) => events.push({ type, obj }), resolve);
    });
    expect(await done).toBeFalsy();
    expect(requested[0]).toMatch(/^\/api\/v1\/pods\?.*resourceVersion=5/);
    expect(events.map((e) => e.type)).toEqual(['ADDED', 'MODIFIED', 'BOOKMARK', 'DELETED', 'ERROR']);
    for (const { type, obj } of events) {
      if (type === 'BOOKMARK' || type === 'ERROR') continue;
      const p = obj as V1Pod;
      expect(p.metadata?.managedFields, type).toBeUndefined();
      expect(p.metadata).toMatchObject({ name: 'a', resourceVersion: '1' });
      expect(p.kind, type).toBe('Decoded');
      expect(JSON.stringify(p)).not.toContain('managedFields');
    }
    // Not objects of the watched kind: handed over as sent, neither decoded nor stripped.
    for (const i of [2, 4]) expect(events[i]!.obj, events[i]!.type).toEqual(lines[i]!.object);
  });
});
