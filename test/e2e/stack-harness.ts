/**
 * What integration and e2e tests use to reach the real local stack (`npm run stack -- up`; `npm test`
 * brings it up and exports its environment). The values come from process.env when scripts/test.sh or
 * `eval "$(npm run -s stack -- env)"` set them, else from the same computation `stack env` prints.
 */
import { existsSync } from 'node:fs';
import { request } from 'node:https';
import type { KubeConfig } from '@kubernetes/client-node';
import { componentByName } from '../../scripts/stack/components.js';
import { writeServiceAccountKubeconfig } from '../../scripts/stack/kube.js';
import { stackEnvValues } from '../../scripts/stack/paths.js';
import { type KubeClients, loadKubeConfig, makeKubeClients } from '../../src/kube/client.js';

/** The stack's endpoints and paths, as tests need them. */
export interface StackEnv {
  /** Admin kubeconfig (client certificate in group system:masters). */
  kubeconfig: string;
  /** Temporal frontend `host:port`, e.g. `127.0.0.1:7233`. */
  temporalAddress: string;
  temporalNamespace: string;
  /** Registry `host:port` (plain HTTP), e.g. `127.0.0.1:5000`. */
  ociRegistry: string;
  /** vk-cocoon simulator control API base URL, e.g. `http://127.0.0.1:18089`. */
  vksimUrl: string;
  /** The time-skipping test server binary, for TestWorkflowEnvironment (`existing-path`). */
  temporalTestServerPath: string;
}

const VAR_NAMES = [
  'STACK_DIR',
  'KUBECONFIG',
  'TEMPORAL_ADDRESS',
  'TEMPORAL_NAMESPACE',
  'OCI_REGISTRY',
  'VKSIM_URL',
  'TEMPORAL_CLI',
  'TEMPORAL_TEST_SERVER_PATH',
] as const;

/**
 * The stack's variables by their exported names (KUBECONFIG, TEMPORAL_ADDRESS, …): from process.env when
 * `stack env` was evaluated there (STACK_DIR set along with the rest), else computed. No health check.
 */
export function stackEnvVars(): Record<(typeof VAR_NAMES)[number], string> {
  if (VAR_NAMES.every((k) => process.env[k])) {
    return Object.fromEntries(VAR_NAMES.map((k) => [k, process.env[k]!])) as Record<
      (typeof VAR_NAMES)[number],
      string
    >;
  }
  const { PATH_PREPEND: _path, ...v } = stackEnvValues();
  return v;
}

let ready: Promise<void> | undefined;

async function assertUp(kubeconfig: string): Promise<void> {
  const down: string[] = [];
  if (!existsSync(kubeconfig)) down.push(`kube-apiserver (no kubeconfig at ${kubeconfig})`);
  else if (!(await componentByName('kube-apiserver').healthy())) down.push('kube-apiserver');
  for (const name of ['registry', 'temporal']) {
    if (!(await componentByName(name).healthy())) down.push(name);
  }
  if (down.length > 0) {
    throw new Error(
      `the local stack is not up (${down.join(', ')} not ready): run \`npm run stack -- up\`, or run tests ` +
        'with `npm test`, which brings it up',
    );
  }
}

/**
 * The stack's environment, after checking the apiserver (/readyz), the registry (/v2/) and Temporal
 * (cluster health) answer. The check runs once per test process. Throws an Error naming the components
 * that are down when the stack is not up.
 */
export async function stackEnv(): Promise<StackEnv> {
  const v = stackEnvVars();
  ready ??= assertUp(v.KUBECONFIG);
  try {
    await ready;
  } catch (err) {
    ready = undefined;
    throw err;
  }
  return {
    kubeconfig: v.KUBECONFIG,
    temporalAddress: v.TEMPORAL_ADDRESS,
    temporalNamespace: v.TEMPORAL_NAMESPACE,
    ociRegistry: v.OCI_REGISTRY,
    vksimUrl: v.VKSIM_URL,
    temporalTestServerPath: v.TEMPORAL_TEST_SERVER_PATH,
  };
}

/**
 * Typed Kubernetes clients for the stack's admin kubeconfig (src/kube/client.ts). Synchronous: call after
 * `await stackEnv()` to get a clear error when the stack is down. Throws when the kubeconfig is missing.
 */
export function kubeClients(kubeconfig = stackEnvVars().KUBECONFIG): KubeClients {
  if (!existsSync(kubeconfig)) {
    throw new Error(`no kubeconfig at ${kubeconfig}: the local stack is not up (npm run stack -- up)`);
  }
  return makeKubeClients(loadKubeConfig(kubeconfig));
}

/**
 * A kubeconfig authenticating as ServiceAccount `sa` in namespace `ns` (both created when missing; token
 * from the TokenRequest API, 24 h), for running code under a Role/ClusterRole. Returns the file path; the
 * same as `npm run stack -- sa-kubeconfig NS SA`.
 */
export function serviceAccountKubeconfig(ns: string, sa: string): Promise<string> {
  return writeServiceAccountKubeconfig(ns, sa);
}

/**
 * GET a raw apiserver path (like `kubectl get --raw`) with the credentials of `kc`. Resolves with the HTTP
 * status and body; rejects on transport errors.
 */
export async function kubeGetRaw(kc: KubeConfig, path: string): Promise<{ status: number; body: string }> {
  const server = kc.getCurrentCluster()?.server;
  if (!server) throw new Error('kubeconfig has no current cluster');
  const opts: Parameters<typeof request>[1] = { method: 'GET', timeout: 10_000 };
  await kc.applyToHTTPSOptions(opts);
  return new Promise((resolve, reject) => {
    const req = request(new URL(path, server), opts, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${path} timed out`)));
    req.on('error', reject);
    req.end();
  });
}
