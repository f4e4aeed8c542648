/**
 * OCIRegistryClient against the real distribution registry of the local stack (OCI_REGISTRY, plain
 * HTTP on loopback, deletes enabled): a manifest pushed here is seen, deleted by tag, not seen, and a
 * second delete is tolerated (docs/wire-contract.md#oci-registry).
 */
import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Tags } from '../../src/api/keys.js';
import { OCIRegistryClient } from '../../src/registry/client.js';
import { hasHibernateSnapshot } from '../../src/registry/types.js';

const base = process.env.OCI_REGISTRY;
if (!base) {
  throw new Error(
    'OCI_REGISTRY is not set: run this suite through `npm test` (which brings the stack up and exports it), ' +
      'or `npm run stack -- up` and `eval "$(npx tsx scripts/stack.ts env)"` (the stack registry is 127.0.0.1:5000)',
  );
}

const registryBase = base;
const slash = registryBase.indexOf('/');
const host = slash < 0 ? registryBase : registryBase.slice(0, slash);
const prefix = slash < 0 ? '' : `${registryBase.slice(slash + 1)}/`;
/** The stack's registry is plain HTTP on loopback. */
const origin = `http://${host}`;

function sha256(data: Buffer | string): string {
  return `sha256:${createHash('sha256').update(data).digest('hex')}`;
}

async function pushBlob(repo: string, data: Buffer): Promise<string> {
  const digest = sha256(data);
  const start = await fetch(`${origin}/v2/${repo}/blobs/uploads/`, { method: 'POST' });
  expect(start.status).toBe(202);
  const location = new URL(start.headers.get('location')!, origin);
  location.searchParams.set('digest', digest);
  const put = await fetch(location, {
    method: 'PUT',
    headers: { 'content-type': 'application/octet-stream' },
    body: data,
  });
  expect(put.status).toBe(201);
  return digest;
}

/** Pushes a one-layer OCI image manifest under `tag`; returns its digest. */
async function pushManifest(vm: string, tag: string, annotations?: Record<string, string>): Promise<string> {
  const repo = `${prefix}${vm}`;
  const config = Buffer.from('{}');
  const layer = randomBytes(64);
  const manifest = JSON.stringify({
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    config: {
      mediaType: 'application/vnd.oci.image.config.v1+json',
      digest: await pushBlob(repo, config),
      size: config.length,
    },
    layers: [
      {
        mediaType: 'application/vnd.oci.image.layer.v1.tar',
        digest: await pushBlob(repo, layer),
        size: layer.length,
      },
    ],
    ...(annotations ? { annotations } : {}),
  });
  const res = await fetch(`${origin}/v2/${repo}/manifests/${tag}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/vnd.oci.image.manifest.v1+json' },
    body: manifest,
  });
  expect(res.status).toBe(201);
  return sha256(manifest);
}

describe(`OCIRegistryClient against the stack registry (${registryBase})`, () => {
  let client: OCIRegistryClient;
  const vm = `vk-e2e-registry-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;

  beforeAll(() => {
    client = new OCIRegistryClient(registryBase, { timeoutMs: 10_000 });
  });
  afterAll(() => client.close());

  it("reads a manifest's annotations (the image a snapshot was taken under); undefined for an absent tag", async () => {
    const snap = `${vm}-annotated`;
    await pushManifest(snap, Tags.hibernate, { 'cocoonstack.snapshot.baseimage': 'cocoon/ubuntu:24.04' });
    await expect(client.manifestAnnotations(snap, Tags.hibernate)).resolves.toEqual({
      'cocoonstack.snapshot.baseimage': 'cocoon/ubuntu:24.04',
    });
    await expect(client.manifestAnnotations(snap, Tags.latest)).resolves.toBeUndefined();
    await client.deleteManifest(snap, Tags.hibernate);
  });

  it('sees a pushed tag, deletes it by tag, then reports it absent; a second delete is tolerated', async () => {
    const digest = await pushManifest(vm, Tags.hibernate);

    await expect(client.hasManifest(vm, Tags.hibernate)).resolves.toBe(true);
    await expect(hasHibernateSnapshot(client, vm)).resolves.toBe(true);
    await expect(client.hasManifest(vm, Tags.latest)).resolves.toBe(false);

    await client.deleteManifest(vm, Tags.hibernate);
    await expect(client.hasManifest(vm, Tags.hibernate)).resolves.toBe(false);
    await expect(hasHibernateSnapshot(client, vm)).resolves.toBe(false);
    // A tag delete: the manifest itself is still there by digest.
    await expect(client.hasManifest(vm, digest)).resolves.toBe(true);

    await expect(client.deleteManifest(vm, Tags.hibernate)).resolves.toBeUndefined();
  });

  it('keeps other tags of the same repository when one is deleted', async () => {
    const other = `${vm}-b`;
    await pushManifest(other, Tags.hibernate);
    await pushManifest(other, Tags.latest);
    await client.deleteManifest(other, Tags.hibernate);
    await expect(client.hasManifest(other, Tags.hibernate)).resolves.toBe(false);
    await expect(client.hasManifest(other, Tags.latest)).resolves.toBe(true);
    await client.deleteManifest(other, Tags.latest);
    await expect(client.hasManifest(other, Tags.latest)).resolves.toBe(false);
  });

  it('treats a repository that never existed as absent, for HEAD and DELETE alike', async () => {
    const ghost = `${vm}-never-pushed`;
    await expect(client.hasManifest(ghost, Tags.hibernate)).resolves.toBe(false);
    await expect(client.deleteManifest(ghost, Tags.latest)).resolves.toBeUndefined();
  });
});
