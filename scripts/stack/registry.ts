/**
 * The stack's OCI registry (distribution v3): its config file, and a probe that DELETE by tag works the way
 * the operator relies on (docs/development.md#local-stack: deletes enabled, tags deleted directly).
 */
import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { stringify } from 'yaml';
import { HOST, Ports, stackPaths } from './paths.js';

/** Writes `<stack>/registry.yml`: filesystem storage in the stack dir, deletes on, HTTP on loopback. */
export function writeRegistryConfig(): string {
  const p = stackPaths();
  mkdirSync(p.registryData, { recursive: true });
  writeFileSync(
    p.registryConfig,
    stringify({
      version: 0.1,
      log: { level: 'info', accesslog: { disabled: true } },
      storage: {
        filesystem: { rootdirectory: p.registryData },
        delete: { enabled: true },
        maintenance: { uploadpurging: { enabled: false } },
      },
      http: { addr: `${HOST}:${Ports.registry}` },
    }),
  );
  return p.registryConfig;
}

const sha256 = (b: Buffer | string) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

/** HTTP statuses seen by {@link checkDeleteByTag}, in request order. */
export interface DeleteByTagResult {
  blobPut: number;
  manifestPut: number;
  headBefore: number;
  deleteTag: number;
  headAfter: number;
  /** The digest still resolves after the tag is gone (a tag delete, not a manifest delete). */
  digestAfter: number;
}

/**
 * Pushes a one-layer OCI manifest to `<base>/v2/<repo>/manifests/<tag>`, deletes it by tag and checks the
 * tag is gone. `base` is like `http://127.0.0.1:5000`. Returns every status; a registry that supports
 * DELETE by tag gives 201, 201, 200, 202, 404. Rejects only on transport errors.
 */
export async function checkDeleteByTag(base: string, repo: string, tag: string): Promise<DeleteByTagResult> {
  const blob = Buffer.from('{}');
  const blobDigest = sha256(blob);
  // Two-step upload (POST for a session, PUT with the digest): distribution ignores a monolithic POST body.
  const session = await fetch(`${base}/v2/${repo}/blobs/uploads/`, { method: 'POST' });
  const location = new URL(session.headers.get('location') ?? '', `${base}/`);
  location.searchParams.set('digest', blobDigest);
  const blobPut = await fetch(location, {
    method: 'PUT',
    headers: { 'Content-Type': 'application/octet-stream' },
    body: blob,
  });
  const empty = { mediaType: 'application/vnd.oci.empty.v1+json', digest: blobDigest, size: blob.length };
  const manifest = JSON.stringify({
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    artifactType: 'application/vnd.cocoonstack.stack-check.v1',
    config: empty,
    layers: [empty],
    annotations: { 'org.opencontainers.image.created': new Date().toISOString() },
  });
  const manifestDigest = sha256(manifest);
  const mt = 'application/vnd.oci.image.manifest.v1+json';
  const manifestPut = await fetch(`${base}/v2/${repo}/manifests/${tag}`, {
    method: 'PUT',
    headers: { 'Content-Type': mt },
    body: manifest,
  });
  const head = (ref: string) =>
    fetch(`${base}/v2/${repo}/manifests/${ref}`, { method: 'HEAD', headers: { Accept: mt } }).then(
      (r) => r.status,
    );
  const headBefore = await head(tag);
  const deleteTag = (await fetch(`${base}/v2/${repo}/manifests/${tag}`, { method: 'DELETE' })).status;
  const headAfter = await head(tag);
  const digestAfter = await head(manifestDigest);
  return {
    blobPut: blobPut.status,
    manifestPut: manifestPut.status,
    headBefore,
    deleteTag,
    headAfter,
    digestAfter,
  };
}
