/**
 * Minimal OCI distribution client for the vk-cocoon simulator (docs/development.md#simulator):
 * blob HEAD/GET/upload (POST + monolithic PUT), manifest PUT/GET/HEAD/DELETE, and the snapshot artifact
 * push/pull that mimics cocoon-common snapshot.Push (v1 wire format). Plain HTTP for loopback registries
 * (`host:port`), HTTPS when the base carries an explicit `https://`.
 */
import { createHash, randomBytes } from 'node:crypto';
import { SnapshotArtifact } from '../../src/api/keys.js';
import { parseImageRef } from './rules.js';

/** Accept header for manifest reads: OCI manifest/index and Docker v2 manifest/list. */
export const MANIFEST_ACCEPT = [
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.oci.image.index.v1+json',
  'application/vnd.docker.distribution.manifest.v2+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
].join(', ');

/** Per-request timeout. */
const REQUEST_TIMEOUT_MS = 30_000;

/** A registry answer outside what the operation accepts. `status` is the HTTP status (0 = transport). */
export class OciError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
}

export interface OciManifest {
  schemaVersion: number;
  mediaType?: string;
  artifactType?: string;
  config: Descriptor;
  layers: Descriptor[];
  annotations?: Record<string, string>;
}

/** The config blob of a snapshot artifact (cocoon-common snapshot v1). */
export interface SnapshotConfig {
  schemaVersion: string;
  snapshotId: string;
  image: string;
  hypervisor: string;
  files: Record<string, { mode: number; size: number }>;
  createdAt: string;
}

export interface SnapshotMeta {
  snapshotId: string;
  /** The pod's `cocoonset.cocoonstack.io/image`, recorded as config.image and the baseimage annotation. */
  image: string;
  /** Node that pushed it (annotation cocoonstack.snapshot.from-node). */
  node: string;
  hypervisor?: string;
}

export interface FetchedManifest {
  manifest: OciManifest;
  digest: string;
  mediaType: string;
}

/** `sha256:<hex>` of the bytes. */
export function sha256Digest(data: Uint8Array): string {
  return `sha256:${createHash('sha256').update(data).digest('hex')}`;
}

/** RFC 3339 UTC, second precision. */
function rfc3339(d = new Date()): string {
  return `${d.toISOString().slice(0, 19)}Z`;
}

export class OciClient {
  readonly base: string;

  /** `registry`: `host:port` (plain HTTP) or a full `http(s)://host:port` URL. */
  constructor(registry: string) {
    this.base = /^https?:\/\//.test(registry) ? registry.replace(/\/+$/, '') : `http://${registry}`;
  }

  private async req(method: string, path: string, init: RequestInit = {}): Promise<Response> {
    const url = /^https?:\/\//.test(path) ? path : `${this.base}${path}`;
    try {
      return await fetch(url, { ...init, method, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
    } catch (err) {
      throw new OciError(`${method} ${url}: ${(err as Error).message}`, 0);
    }
  }

  private static async fail(res: Response, what: string): Promise<never> {
    const body = await res.text().catch(() => '');
    throw new OciError(`${what}: HTTP ${res.status} ${body.slice(0, 300)}`.trim(), res.status);
  }

  /** HEAD a blob: true on 200, false on 404; throws OciError otherwise. */
  async hasBlob(repo: string, digest: string): Promise<boolean> {
    const res = await this.req('HEAD', `/v2/${repo}/blobs/${digest}`);
    if (res.status === 200) return true;
    if (res.status === 404) return false;
    return OciClient.fail(res, `HEAD blob ${repo}@${digest}`);
  }

  /** GET a blob's bytes and verify the digest; throws OciError (404 included). */
  async getBlob(repo: string, digest: string): Promise<Buffer> {
    const res = await this.req('GET', `/v2/${repo}/blobs/${digest}`);
    if (res.status !== 200) return OciClient.fail(res, `GET blob ${repo}@${digest}`);
    const data = Buffer.from(await res.arrayBuffer());
    if (sha256Digest(data) !== digest) throw new OciError(`GET blob ${repo}@${digest}: digest mismatch`, 200);
    return data;
  }

  /** Uploads a blob unless present (HEAD → POST uploads/ → monolithic PUT ?digest=). Returns its descriptor. */
  async putBlob(repo: string, data: Uint8Array, mediaType: string): Promise<Descriptor> {
    const digest = sha256Digest(data);
    const desc = { mediaType, digest, size: data.byteLength };
    if (await this.hasBlob(repo, digest)) return desc;
    const start = await this.req('POST', `/v2/${repo}/blobs/uploads/`);
    if (start.status !== 202) return OciClient.fail(start, `POST upload ${repo}`);
    await start.arrayBuffer().catch(() => undefined);
    const location = start.headers.get('location');
    if (!location) throw new OciError(`POST upload ${repo}: no Location header`, start.status);
    const url = new URL(location, `${this.base}/`);
    url.searchParams.set('digest', digest);
    const put = await this.req('PUT', url.toString(), {
      headers: { 'content-type': 'application/octet-stream', 'content-length': String(data.byteLength) },
      body: data,
    });
    if (put.status !== 201) return OciClient.fail(put, `PUT blob ${repo}@${digest}`);
    await put.arrayBuffer().catch(() => undefined);
    return desc;
  }

  /** PUT a manifest under a tag or digest; the tag becomes visible with this request. Returns the digest. */
  async putManifest(repo: string, ref: string, body: string, mediaType: string): Promise<string> {
    const res = await this.req('PUT', `/v2/${repo}/manifests/${ref}`, {
      headers: { 'content-type': mediaType },
      body,
    });
    if (res.status !== 201) return OciClient.fail(res, `PUT manifest ${repo}:${ref}`);
    await res.arrayBuffer().catch(() => undefined);
    return res.headers.get('docker-content-digest') ?? sha256Digest(Buffer.from(body));
  }

  /** GET a manifest; null on 404 (tag or repo unknown); throws OciError on any other failure. */
  async getManifest(repo: string, ref: string): Promise<FetchedManifest | null> {
    const res = await this.req('GET', `/v2/${repo}/manifests/${ref}`, {
      headers: { accept: MANIFEST_ACCEPT },
    });
    if (res.status === 404) {
      await res.arrayBuffer().catch(() => undefined);
      return null;
    }
    if (res.status !== 200) return OciClient.fail(res, `GET manifest ${repo}:${ref}`);
    const raw = Buffer.from(await res.arrayBuffer());
    let manifest: OciManifest;
    try {
      manifest = JSON.parse(raw.toString('utf8')) as OciManifest;
    } catch {
      throw new OciError(`GET manifest ${repo}:${ref}: not JSON`, 200);
    }
    return {
      manifest,
      digest: res.headers.get('docker-content-digest') ?? sha256Digest(raw),
      mediaType: res.headers.get('content-type') ?? manifest.mediaType ?? '',
    };
  }

  /** HEAD a manifest: true on 200, false on 404; throws OciError otherwise. */
  async hasManifest(repo: string, ref: string): Promise<boolean> {
    const res = await this.req('HEAD', `/v2/${repo}/manifests/${ref}`, {
      headers: { accept: MANIFEST_ACCEPT },
    });
    if (res.status === 200) return true;
    if (res.status === 404) return false;
    return OciClient.fail(res, `HEAD manifest ${repo}:${ref}`);
  }

  /** DELETE a manifest by tag or digest: true on 202, false on 404; throws OciError otherwise. */
  async deleteManifest(repo: string, ref: string): Promise<boolean> {
    const res = await this.req('DELETE', `/v2/${repo}/manifests/${ref}`);
    await res.arrayBuffer().catch(() => undefined);
    if (res.status === 202) return true;
    if (res.status === 404) return false;
    throw new OciError(`DELETE manifest ${repo}:${ref}: HTTP ${res.status}`, res.status);
  }

  /**
   * Pushes a snapshot artifact (docs/wire-contract.md#snapshot-artifacts): two small layer blobs
   * (`config.json`, `state.json`), the snapshot config blob, then the manifest PUT under `tag`.
   * `beforeManifestPut` runs after the blobs and before the PUT (delay/failure injection), so the tag appears
   * only with the PUT. Returns the manifest digest.
   */
  async pushSnapshot(
    repo: string,
    tag: string,
    meta: SnapshotMeta,
    beforeManifestPut?: () => Promise<void>,
  ): Promise<string> {
    const files = [
      {
        title: 'config.json',
        mediaType: SnapshotArtifact.vmConfigMediaType,
        data: Buffer.from(JSON.stringify({ vm: repo, nonce: randomBytes(8).toString('hex') })),
      },
      {
        title: 'state.json',
        mediaType: SnapshotArtifact.vmStateMediaType,
        data: Buffer.from(
          JSON.stringify({ snapshotId: meta.snapshotId, nonce: randomBytes(8).toString('hex') }),
        ),
      },
    ];
    const layers: Descriptor[] = [];
    for (const f of files) {
      const desc = await this.putBlob(repo, f.data, f.mediaType);
      layers.push({ ...desc, annotations: { [SnapshotArtifact.annotationTitle]: f.title } });
    }
    const created = rfc3339();
    const config: SnapshotConfig = {
      schemaVersion: 'v1',
      snapshotId: meta.snapshotId,
      image: meta.image,
      hypervisor: meta.hypervisor ?? 'cloud-hypervisor',
      files: Object.fromEntries(files.map((f) => [f.title, { mode: 0o644, size: f.data.byteLength }])),
      createdAt: created,
    };
    const configDesc = await this.putBlob(
      repo,
      Buffer.from(JSON.stringify(config)),
      SnapshotArtifact.configMediaType,
    );
    const manifest: OciManifest = {
      schemaVersion: 2,
      mediaType: SnapshotArtifact.manifestMediaType,
      artifactType: SnapshotArtifact.artifactType,
      config: configDesc,
      layers,
      annotations: {
        [SnapshotArtifact.annotationCreated]: created,
        [SnapshotArtifact.annotationBaseImage]: meta.image,
        [SnapshotArtifact.annotationFromNode]: meta.node,
      },
    };
    if (beforeManifestPut) await beforeManifestPut();
    return this.putManifest(repo, tag, JSON.stringify(manifest), SnapshotArtifact.manifestMediaType);
  }

  /**
   * Reads a snapshot's manifest and config blob (no layers). Null when the tag is absent; throws OciError
   * on registry errors. `config` is null when the manifest's config is not a snapshot config.
   */
  async getSnapshotInfo(
    repo: string,
    ref: string,
  ): Promise<{ manifest: OciManifest; digest: string; config: SnapshotConfig | null } | null> {
    const got = await this.getManifest(repo, ref);
    if (!got) return null;
    const cfgDesc = got.manifest.config;
    if (!cfgDesc || cfgDesc.mediaType !== SnapshotArtifact.configMediaType) {
      return { manifest: got.manifest, digest: got.digest, config: null };
    }
    const raw = await this.getBlob(repo, cfgDesc.digest);
    let config: SnapshotConfig;
    try {
      config = JSON.parse(raw.toString('utf8')) as SnapshotConfig;
    } catch {
      throw new OciError(`config blob of ${repo}:${ref} is not JSON`, 200);
    }
    return { manifest: got.manifest, digest: got.digest, config };
  }

  /** Pulls a snapshot fully (manifest, config and every layer, digests verified). Null when absent. */
  async pullSnapshot(
    repo: string,
    ref: string,
  ): Promise<{ manifest: OciManifest; digest: string; config: SnapshotConfig | null; bytes: number } | null> {
    const info = await this.getSnapshotInfo(repo, ref);
    if (!info) return null;
    let bytes = 0;
    for (const layer of info.manifest.layers ?? [])
      bytes += (await this.getBlob(repo, layer.digest)).byteLength;
    return { ...info, bytes };
  }
}

/**
 * Seeds a clone-mode base image `repo[:tag]` in the registry, in the same artifact format, so a
 * CocoonSet in `clone` mode (the agent default) can be brought up by the simulator, which pulls the image
 * like vk-cocoon does for `cocoonset.cocoonstack.io/image`. Returns the digest.
 */
export async function pushBaseImage(
  registry: string,
  image: string,
  node = 'image-builder',
): Promise<string> {
  const client = new OciClient(registry);
  const { repo, tag } = parseImageRef(image, registry);
  return client.pushSnapshot(repo, tag, {
    snapshotId: `base-${randomBytes(4).toString('hex')}`,
    image,
    node,
  });
}
