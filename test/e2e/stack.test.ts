/**
 * The local stack's components are real and configured as the project needs (docs/development.md#local-stack,
 * issue "The real local stack"): kube-apiserver ready with RBAC enforced and the project's CRDs established;
 * Temporal serving with the custom search attributes; the registry deleting by tag.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ApiextensionsV1Api, AuthenticationV1Api, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { Connection } from '@temporalio/client';
import { encodeSearchAttributeIndexedValueType } from '@temporalio/common/lib/search-attributes.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { crdManifests } from '../../scripts/stack/kube.js';
import { repoRoot } from '../../scripts/stack/paths.js';
import { checkDeleteByTag } from '../../scripts/stack/registry.js';
import { GROUP, PLURAL_COCOONHIBERNATIONS, PLURAL_COCOONSETS, SearchAttributes } from '../../src/api/keys.js';
import { loadKubeConfig, makeKubeClients, statusCodeOf } from '../../src/kube/client.js';
import { waitFor } from '../support/wait.js';
import { kubeClients, kubeGetRaw, type StackEnv, stackEnv } from './stack-harness.js';

const run = promisify(execFile);
const suffix = randomBytes(3).toString('hex');

let env: StackEnv;
beforeAll(async () => {
  env = await stackEnv();
});

describe('kube-apiserver', () => {
  it('answers /readyz with ok to the admin kubeconfig', async () => {
    const { kc } = kubeClients();
    expect(await kubeGetRaw(kc, '/readyz')).toEqual({ status: 200, body: 'ok' });
  });

  describe('RBAC', () => {
    const ns = 'stack-rbac-check';
    const sa = `no-bindings-${suffix}`;
    const admin = () => kubeClients();

    afterAll(async () => {
      const rbac = admin().kc.makeApiClient(RbacAuthorizationV1Api);
      await rbac.deleteNamespacedRoleBinding({ name: sa, namespace: ns }).catch(() => undefined);
      await rbac.deleteNamespacedRole({ name: sa, namespace: ns }).catch(() => undefined);
      await admin()
        .core.deleteNamespacedServiceAccount({ name: sa, namespace: ns })
        .catch(() => undefined);
    });

    it('authenticates a ServiceAccount token from `stack sa-kubeconfig` and forbids it what no binding grants', async () => {
      const { stdout } = await run(join(repoRoot, 'node_modules', '.bin', 'tsx'), [
        join(repoRoot, 'scripts', 'stack.ts'),
        'sa-kubeconfig',
        ns,
        sa,
      ]);
      const path = stdout.trim();
      const kc = loadKubeConfig(path);
      const who = await kc.makeApiClient(AuthenticationV1Api).createSelfSubjectReview({ body: {} });
      expect(who.status?.userInfo?.username).toBe(`system:serviceaccount:${ns}:${sa}`);

      const asSa = makeKubeClients(kc);
      const denied = await asSa.core.listNamespacedPod({ namespace: ns }).then(
        () => 'allowed',
        (err: unknown) => statusCodeOf(err),
      );
      expect(denied).toBe(403);
      // The admin (system:masters) may, so the 403 is authorization, not a broken apiserver.
      await expect(admin().core.listNamespacedPod({ namespace: ns })).resolves.toBeDefined();

      // A Role granting exactly that, bound to the ServiceAccount, turns the same request into a 200.
      // (Not the bootstrap `view` ClusterRole: it is aggregated, and no controller-manager fills it here.)
      const rbac = admin().kc.makeApiClient(RbacAuthorizationV1Api);
      await rbac.createNamespacedRole({
        namespace: ns,
        body: {
          metadata: { name: sa, namespace: ns },
          rules: [{ apiGroups: [''], resources: ['pods'], verbs: ['list'] }],
        },
      });
      await rbac.createNamespacedRoleBinding({
        namespace: ns,
        body: {
          metadata: { name: sa, namespace: ns },
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: sa },
          subjects: [{ kind: 'ServiceAccount', name: sa, namespace: ns }],
        },
      });
      // RBAC changes reach the authorizer's cache asynchronously.
      const allowed = await waitFor(
        'the RoleBinding to take effect',
        () => asSa.core.listNamespacedPod({ namespace: ns }),
        10_000,
        { intervalMs: 200 },
      );
      expect(allowed).toBeDefined();
    });
  });

  it("has the project's CRDs (config/crd/*.yaml) Established", async () => {
    const ext = kubeClients().kc.makeApiClient(ApiextensionsV1Api);
    const names = crdManifests().flatMap((f) =>
      parseAllDocuments(readFileSync(f, 'utf8'))
        .map((d) => d.toJS() as { kind?: string; metadata?: { name?: string } } | null)
        .filter((d) => d?.kind === 'CustomResourceDefinition')
        .map((d) => d!.metadata!.name!),
    );
    expect(names).toEqual(
      expect.arrayContaining([`${PLURAL_COCOONSETS}.${GROUP}`, `${PLURAL_COCOONHIBERNATIONS}.${GROUP}`]),
    );
    for (const name of names) {
      const crd = await ext.readCustomResourceDefinition({ name });
      const established = crd.status?.conditions?.find((c) => c.type === 'Established');
      expect(established?.status, name).toBe('True');
    }
  });
});

describe('Temporal dev server', () => {
  let connection: Connection;
  beforeAll(async () => {
    connection = await Connection.connect({ address: env.temporalAddress });
  });
  afterAll(async () => {
    await connection?.close();
  });

  it('reports SERVING on the gRPC health service', async () => {
    const res = await connection.healthService.check({});
    // grpc.health.v1.HealthCheckResponse.ServingStatus: 1 = SERVING.
    expect(res.status).toBe(1);
  });

  it('has the custom search attributes registered as Keyword', async () => {
    const res = await connection.operatorService.listSearchAttributes({ namespace: env.temporalNamespace });
    const keyword = encodeSearchAttributeIndexedValueType('KEYWORD');
    for (const name of Object.values(SearchAttributes)) {
      expect(res.customAttributes?.[name], name).toBe(keyword);
    }
  });
});

describe('OCI registry', () => {
  const base = () => `http://${env.ociRegistry}`;

  it('answers GET /v2/ with 200', async () => {
    const res = await fetch(`${base()}/v2/`);
    expect(res.status).toBe(200);
  });

  it('deletes a manifest by tag: 202, then the tag is gone while the digest stays', async () => {
    const r = await checkDeleteByTag(base(), `stack-test/r${suffix}`, 'hibernate');
    expect(r).toEqual({
      blobPut: 201,
      manifestPut: 201,
      headBefore: 200,
      deleteTag: 202,
      headAfter: 404,
      digestAfter: 200,
    });
  });
});
