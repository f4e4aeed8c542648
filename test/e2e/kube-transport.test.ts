/**
 * The keep-alive transport of the typed Kubernetes clients (src/kube/transport.ts) against the stack's real
 * kube-apiserver, reached through a counting TCP forwarder (test/support/tcp-proxy.ts): requests share one
 * connection, a connection the server closed is replaced without an error (also when it closes in the
 * very moment the client reuses it), and every request still carries the kubeconfig's own credentials —
 * CA verification, the client certificate and a bearer token.
 */
import { randomBytes } from 'node:crypto';
import { rootCertificates } from 'node:tls';
import { AuthenticationV1Api, CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { loadKubeConfig, makeKubeClients, statusCodeOf } from '../../src/kube/client.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { waitFor } from '../support/wait.js';
import { type StackEnv, serviceAccountKubeconfig, stackEnv } from './stack-harness.js';

const NS = 'default';
const SA_NS = 'kube-transport-check';
const SA = `transport-${randomBytes(3).toString('hex')}`;

let env: StackEnv;
let upstream: { host: string; port: number };
let proxy: TcpProxy;
let port: number;

/**
 * `kubeconfigPath` with its cluster's server moved to the proxy (same CA, same credentials); `edit` may
 * change the cluster entry further (kubeconfig keys: `certificate-authority-data`, …).
 */
function viaProxy(
  kubeconfigPath: string,
  edit: (cluster: Record<string, unknown>) => void = () => undefined,
) {
  const kc = loadKubeConfig(kubeconfigPath);
  const cfg = JSON.parse(kc.exportConfig()) as { clusters: { cluster: Record<string, unknown> }[] };
  for (const c of cfg.clusters) {
    c.cluster.server = `https://127.0.0.1:${port}`;
    edit(c.cluster);
  }
  const out = new KubeConfig();
  out.loadFromString(JSON.stringify(cfg));
  return out;
}

beforeAll(async () => {
  env = await stackEnv();
  const server = new URL(loadKubeConfig(env.kubeconfig).getCurrentCluster()!.server);
  upstream = { host: server.hostname, port: Number(server.port || 443) };
  proxy = new TcpProxy(upstream);
  port = await proxy.start();
});

afterAll(async () => {
  await proxy?.stop();
});

beforeEach(() => {
  proxy.connections = 0;
  proxy.resets = 0;
});

afterEach(() => {
  proxy.closeAll();
});

describe('keep-alive transport of the typed clients', () => {
  it('sends sequential requests over one connection (client-node 1.4 alone opens one per request)', async () => {
    const kc = viaProxy(env.kubeconfig);
    const kube = makeKubeClients(kc);
    for (let i = 0; i < 10; i++) await kube.core.readNamespace({ name: NS });
    expect(proxy.connections).toBe(1);

    // Why the transport exists: the library's own client makes a new agent, so a new connection, each time.
    proxy.connections = 0;
    const plain = kc.makeApiClient(CoreV1Api);
    for (let i = 0; i < 5; i++) await plain.readNamespace({ name: NS });
    expect(proxy.connections).toBe(5);
  });

  it('replaces a kept-alive connection the server closed while idle, without an error', async () => {
    const kube = makeKubeClients(viaProxy(env.kubeconfig));
    await kube.core.readNamespace({ name: NS });
    expect(proxy.connections).toBe(1);
    await waitFor('the connection back in the agent', () => kube.transport.stats().idleSockets === 1, 10_000);
    proxy.closeAll();
    await waitFor('the proxy to drop its connections', () => proxy.openConnections() === 0, 10_000);
    // The client has seen the close: the agent dropped the idle socket, so the next request opens a new one
    // (a request that raced the close would take the stale-retry path, tested below).
    await waitFor(
      'the agent to drop the closed socket',
      () => kube.transport.stats().idleSockets === 0,
      10_000,
    );
    await expect(kube.core.readNamespace({ name: NS })).resolves.toBeDefined();
    expect(proxy.connections).toBe(2);
    expect(kube.transport.stats().staleRetries).toBe(0);
  });

  it('retries, once and on a fresh connection, a create the server never read because it closed the reused connection at that moment', async () => {
    const kube = makeKubeClients(viaProxy(env.kubeconfig));
    await kube.core.readNamespace({ name: NS });
    proxy.resetOnNextUse();
    const name = `transport-retry-${randomBytes(3).toString('hex')}`;
    try {
      // A create is not idempotent: it succeeding (no AlreadyExists) shows it reached the server once.
      const cm = await kube.core.createNamespacedConfigMap({
        namespace: NS,
        body: { metadata: { name }, data: { k: 'v' } },
      });
      expect(cm.metadata?.name).toBe(name);
      expect(proxy.resets).toBe(1);
      expect(proxy.connections).toBe(2);
      expect(kube.transport.stats().staleRetries).toBe(1);
    } finally {
      await kube.core.deleteNamespacedConfigMap({ name, namespace: NS }).catch(() => undefined);
    }
  });

  it('does not retry a failure on a fresh connection (only a reused one can be stale)', async () => {
    const kube = makeKubeClients(viaProxy(env.kubeconfig));
    await proxy.stop();
    try {
      await expect(kube.core.readNamespace({ name: NS })).rejects.toMatchObject({ code: 'ECONNREFUSED' });
      expect(kube.transport.stats()).toMatchObject({ requests: 1, staleRetries: 0 });
    } finally {
      proxy = new TcpProxy(upstream);
      port = await proxy.start();
    }
  });

  describe('credentials', () => {
    let saKubeconfig: string;
    beforeAll(async () => {
      saKubeconfig = await serviceAccountKubeconfig(SA_NS, SA);
    });
    afterAll(async () => {
      await makeKubeClients(loadKubeConfig(env.kubeconfig))
        .core.deleteNamespacedServiceAccount({ name: SA, namespace: SA_NS })
        .catch(() => undefined);
    });

    it('authenticates each request as its kubeconfig says: client certificate and bearer token, interleaved', async () => {
      const adminKc = viaProxy(env.kubeconfig);
      const saKc = viaProxy(saKubeconfig);
      const admin = makeKubeClients(adminKc);
      const sa = makeKubeClients(saKc);
      const adminWho = admin.transport.makeApiClient(AuthenticationV1Api);
      const saWho = sa.transport.makeApiClient(AuthenticationV1Api);
      for (let i = 0; i < 3; i++) {
        const a = await adminWho.createSelfSubjectReview({ body: {} });
        expect(a.status?.userInfo?.groups).toContain('system:masters');
        const s = await saWho.createSelfSubjectReview({ body: {} });
        expect(s.status?.userInfo?.username).toBe(`system:serviceaccount:${SA_NS}:${SA}`);
        // The token's identity is authorized as itself: no binding lets it list pods.
        const denied = await sa.core.listNamespacedPod({ namespace: SA_NS }).then(
          () => 200,
          (err: unknown) => statusCodeOf(err),
        );
        expect(denied).toBe(403);
        await expect(admin.core.listNamespacedPod({ namespace: SA_NS })).resolves.toBeDefined();
      }
      // One connection per identity, reused: 4 requests each.
      expect(proxy.connections).toBe(2);
      expect(admin.transport.stats().agents).toBe(1);
      expect(sa.transport.stats().agents).toBe(1);
    });

    it("verifies the server against the kubeconfig's CA, and skips verification only when the kubeconfig says so", async () => {
      const good = makeKubeClients(viaProxy(env.kubeconfig));
      await expect(good.core.readNamespace({ name: NS })).resolves.toBeDefined();

      const foreignCA = Buffer.from(rootCertificates[0]!).toString('base64');
      const wrong = makeKubeClients(
        viaProxy(env.kubeconfig, (c) => {
          c['certificate-authority-data'] = foreignCA;
          delete c['certificate-authority'];
        }),
      );
      await expect(wrong.core.readNamespace({ name: NS })).rejects.toThrow(/certificate/i);

      const insecure = makeKubeClients(
        viaProxy(env.kubeconfig, (c) => {
          delete c['certificate-authority-data'];
          delete c['certificate-authority'];
          c['insecure-skip-tls-verify'] = true;
        }),
      );
      await expect(insecure.core.readNamespace({ name: NS })).resolves.toBeDefined();
    });
  });
});
