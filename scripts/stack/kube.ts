/**
 * Kubernetes-side setup of the stack: applying the project's CRDs and minting ServiceAccount kubeconfigs
 * (TokenRequest API) so tests can run the operator under its own RBAC.
 */
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadKubeConfig, makeKubeClients, statusCodeOf } from '../../src/kube/client.js';
import { binaries, repoRoot, stackPaths } from './paths.js';
import { renderKubeconfig } from './pki.js';
import { run } from './proc.js';

/** CRD manifests applied by `up`: every `config/crd/*.yaml` except a kustomization file. */
export function crdManifests(): string[] {
  const dir = join(repoRoot, 'config', 'crd');
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => /\.ya?ml$/.test(f) && !/^kustomization\.ya?ml$/.test(f))
    .sort()
    .map((f) => join(dir, f));
}

/**
 * Applies the CRD manifests with the stack's kubectl (server-side apply, so re-running is harmless) and
 * waits until each is Established. Returns the files applied. Throws with kubectl's stderr.
 */
export async function applyCrds(): Promise<string[]> {
  const files = crdManifests();
  if (files.length === 0) return files;
  const kubectl = binaries().kubectl;
  const kc = ['--kubeconfig', stackPaths().adminKubeconfig];
  const fileArgs = files.flatMap((f) => ['-f', f]);
  await run(kubectl, [
    ...kc,
    'apply',
    '--server-side',
    '--force-conflicts',
    '--field-manager=cocoon-stack',
    ...fileArgs,
  ]);
  await run(kubectl, [...kc, 'wait', '--for=condition=Established', '--timeout=60s', ...fileArgs], {
    timeoutMs: 90_000,
  });
  return files;
}

/** Lifetime of the tokens in ServiceAccount kubeconfigs. */
const TOKEN_SECONDS = 24 * 3600;

/**
 * Ensures namespace `ns` and ServiceAccount `sa` exist, requests a token for it (TokenRequest API,
 * 24 h) and writes `<stack>/sa-<ns>-<sa>.kubeconfig` with that bearer token. Returns the file's path.
 * Needs the stack's apiserver up; throws the API error otherwise.
 */
export async function writeServiceAccountKubeconfig(ns: string, sa: string): Promise<string> {
  const { core } = makeKubeClients(loadKubeConfig(stackPaths().adminKubeconfig));
  const ignoreConflict = (err: unknown) => {
    if (statusCodeOf(err) !== 409) throw err;
  };
  await core.createNamespace({ body: { metadata: { name: ns } } }).catch(ignoreConflict);
  await core
    .createNamespacedServiceAccount({ namespace: ns, body: { metadata: { name: sa, namespace: ns } } })
    .catch(ignoreConflict);
  const tr = await core.createNamespacedServiceAccountToken({
    name: sa,
    namespace: ns,
    body: { spec: { audiences: [], expirationSeconds: TOKEN_SECONDS } },
  });
  const token = tr.status?.token;
  if (!token) throw new Error(`TokenRequest for ${ns}/${sa} returned no token`);
  const path = join(stackPaths().dir, `sa-${ns}-${sa}.kubeconfig`);
  writeFileSync(path, renderKubeconfig(`system:serviceaccount:${ns}:${sa}`, { token }, ns), { mode: 0o600 });
  return path;
}
