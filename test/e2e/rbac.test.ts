/**
 * The shipped ClusterRole, proven on the real local stack (issue 4; the local stack runs with RBAC on,
 * docs/development.md#local-stack, so the shipped ClusterRole is proven sufficient):
 * - sufficient: config/crd and config/rbac are applied with kubectl, the real operator process
 *   (src/worker.ts) runs as system:serviceaccount:cocoon-system:cocoon-operator (a TokenRequest
 *   kubeconfig) with leader election in cocoon-system, and drives a CocoonHibernation hibernate →
 *   Hibernated and wake → Active through the vk-cocoon simulator, with no 403 in its output;
 * - least privilege: SelfSubjectAccessReviews as that identity allow exactly the role's grants on its
 *   resources and deny every other verb on them, and sensitive requests (secrets, nodes, RBAC, exec …).
 * test/unit/rbac-coverage.test.ts derives the role from the code; this file checks it against the apiserver.
 *
 * Scope: own namespace (WATCH_NAMESPACE) and task queue; the Lease lives in cocoon-system (a stale one
 * left by a killed run is deleted first).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  AuthenticationV1Api,
  AuthorizationV1Api,
  RbacAuthorizationV1Api,
  type V1ResourceAttributes,
} from '@kubernetes/client-node';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { bundleWorkflows } from '../../scripts/bundle-workflows.js';
import { vmWorkflowId } from '../../src/api/ids.js';
import {
  Annotations,
  EVENT_SOURCE,
  EventReasons,
  Finalizers,
  GROUP,
  KIND_COCOONHIBERNATION,
  LEADER_ELECTION_ID,
  LifecycleStates,
  PLURAL_COCOONHIBERNATIONS,
  Tags,
  VERSION,
} from '../../src/api/keys.js';
import { containerRunning, lifecycleOf, vmIDOf, vmNameForPod } from '../../src/api/pod.js';
import type { CocoonHibernation } from '../../src/api/types.js';
import {
  type KubeClients,
  loadKubeConfig,
  makeKubeClients,
  mergePatch,
  statusCodeOf,
} from '../../src/kube/client.js';
import { simPod } from '../support/builders.js';
import { freePort } from '../support/ports.js';
import { waitFor } from '../support/wait.js';
import { VkSimClient } from '../vksim/client.js';
import { MANIFEST_ACCEPT } from '../vksim/oci.js';
import {
  cleanEnv,
  kubectl,
  type OperatorProcess,
  ROOT,
  startOperator,
  waitFor200,
} from './operator-process.js';
import { kubeClients, type StackEnv, serviceAccountKubeconfig, stackEnv } from './stack-harness.js';

const SA_NAMESPACE = 'cocoon-system';
const SA_NAME = 'cocoon-operator';
const ns = `rbac-e2e-${randomBytes(3).toString('hex')}`;
const taskQueue = `rbac-e2e-${randomUUID()}`;
const POD = 'vm0';
const CR = 'hib0';
/** The simulator hibernates and wakes in well under a second without faults. */
const PHASE_MS = 45_000;
/** What a refused request looks like in the operator's output (client-node ApiException, Status body). */
const FORBIDDEN = /\b403\b|forbidden/i;

const VERBS = ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete', 'deletecollection'] as const;

/** Requests outside the operator's business that must stay refused. */
const SENSITIVE: V1ResourceAttributes[] = [
  { verb: 'get', resource: 'secrets' },
  { verb: 'list', resource: 'secrets' },
  { verb: 'get', resource: 'configmaps' },
  { verb: 'create', resource: 'pods', subresource: 'exec' },
  { verb: 'create', resource: 'serviceaccounts', subresource: 'token' },
  { verb: 'update', resource: 'pods', subresource: 'status' },
  { verb: 'create', resource: 'pods', subresource: 'binding' },
  { verb: 'delete', resource: 'nodes' },
  { verb: 'delete', resource: 'namespaces' },
  { verb: 'update', group: 'apiextensions.k8s.io', resource: 'customresourcedefinitions' },
  { verb: 'bind', group: 'rbac.authorization.k8s.io', resource: 'clusterroles' },
  { verb: 'escalate', group: 'rbac.authorization.k8s.io', resource: 'clusterroles' },
  { verb: 'create', group: 'rbac.authorization.k8s.io', resource: 'clusterrolebindings' },
  { verb: 'impersonate', resource: 'serviceaccounts' },
];
const CLUSTER_SCOPED = new Set([
  'nodes',
  'namespaces',
  'customresourcedefinitions',
  'clusterroles',
  'clusterrolebindings',
]);

interface Rule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

describe('the shipped ClusterRole on a real apiserver with RBAC on', () => {
  let admin: KubeClients;
  let adminKubeconfig: string;
  let sa: KubeClients;
  let saKubeconfig: string;
  let rules: Rule[];
  let op: OperatorProcess | undefined;
  let temporal: Client | undefined;
  let connection: Connection | undefined;
  let stack: StackEnv;
  let pool: string;
  const crBase = { group: GROUP, version: VERSION, namespace: ns, plural: PLURAL_COCOONHIBERNATIONS };

  /** Lines of the operator's output that report a refused request (truncated). */
  const refusals = (): string[] =>
    `${op?.stdout() ?? ''}\n${op?.stderr() ?? ''}`
      .split('\n')
      .filter((l) => FORBIDDEN.test(l))
      .map((l) => {
        const at = l.search(FORBIDDEN);
        const activity = /"activityType":"([^"]+)"/.exec(l)?.[1];
        return `${activity ? `[${activity}] ` : ''}…${l.slice(Math.max(0, at - 300), at + 200)}…`;
      });

  const getCR = async (): Promise<CocoonHibernation | undefined> => {
    try {
      return (await admin.custom.getNamespacedCustomObject({ ...crBase, name: CR })) as CocoonHibernation;
    } catch (err) {
      if (statusCodeOf(err) === 404) return undefined;
      throw err;
    }
  };

  const waitPhase = async (phase: string): Promise<CocoonHibernation> => {
    let last: CocoonHibernation | undefined;
    return waitFor(
      `${ns}/${CR} in phase ${phase}`,
      async () => {
        last = await getCR();
        return last?.status?.phase === phase ? last : undefined;
      },
      PHASE_MS,
      { describe: () => ({ status: last?.status, refusals: refusals().slice(0, 3) }) },
    );
  };

  /** SelfSubjectAccessReview as the operator's ServiceAccount. */
  const can = async (attrs: V1ResourceAttributes): Promise<boolean> => {
    const review = await sa.kc.makeApiClient(AuthorizationV1Api).createSelfSubjectAccessReview({
      body: { spec: { resourceAttributes: attrs } },
    });
    return review.status?.allowed === true;
  };

  beforeAll(async () => {
    stack = await stackEnv();
    adminKubeconfig = stack.kubeconfig;
    admin = kubeClients(adminKubeconfig);

    // Install what a cluster admin installs: CRDs, then the ServiceAccount, ClusterRole and binding.
    await admin.core.createNamespace({ body: { metadata: { name: SA_NAMESPACE } } }).catch((err) => {
      if (statusCodeOf(err) !== 409) throw err;
    });
    kubectl(adminKubeconfig, ['apply', '-k', 'config/crd']);
    kubectl(adminKubeconfig, ['apply', '-k', 'config/rbac']);
    rules = parse(readFileSync(join(ROOT, 'config/rbac/role.yaml'), 'utf8')).rules;

    saKubeconfig = await serviceAccountKubeconfig(SA_NAMESPACE, SA_NAME);
    sa = makeKubeClients(loadKubeConfig(saKubeconfig));
    await admin.core.createNamespace({ body: { metadata: { name: ns } } });

    const sim = new VkSimClient(stack.vksimUrl);
    await waitFor('simulator /healthz', async () => ((await sim.healthy()) ? true : undefined), 30_000);
    ({ pool } = await sim.state());
    connection = await Connection.connect({ address: stack.temporalAddress });
    temporal = new Client({ connection, namespace: stack.temporalNamespace });
    await bundleWorkflows();
  });

  afterAll(async () => {
    if (op && op.child.exitCode === null && op.child.signalCode === null) {
      op.child.kill('SIGTERM');
      const timer = setTimeout(() => op?.child.kill('SIGKILL'), 15_000);
      await op.exited;
      clearTimeout(timer);
    }
    await temporal?.workflow
      .getHandle(vmWorkflowId(ns, POD))
      .terminate('rbac e2e teardown')
      .catch(() => undefined);
    await admin?.custom
      .patchNamespacedCustomObject(
        { ...crBase, name: CR, body: { metadata: { finalizers: null } } },
        mergePatch,
      )
      .catch(() => undefined);
    await admin?.custom.deleteNamespacedCustomObject({ ...crBase, name: CR }).catch(() => undefined);
    await admin?.core
      .deleteNamespacedPod({ name: POD, namespace: ns, gracePeriodSeconds: 0 })
      .catch(() => undefined);
    // The stack runs no namespace controller: delete the Lease itself; the namespace stays Terminating.
    await admin?.coordination
      .deleteNamespacedLease({ name: LEADER_ELECTION_ID, namespace: SA_NAMESPACE })
      .catch(() => undefined);
    await admin?.core.deleteNamespace({ name: ns }).catch(() => undefined);
    await connection?.close();
  });

  it('the applied ClusterRole is config/rbac/role.yaml, bound to the ServiceAccount the token names', async () => {
    const applied = await admin.kc
      .makeApiClient(RbacAuthorizationV1Api)
      .readClusterRole({ name: 'cocoon-operator' });
    expect(
      applied.rules?.map((r) => ({ apiGroups: r.apiGroups, resources: r.resources, verbs: r.verbs })),
    ).toEqual(rules);
    const who = await sa.kc.makeApiClient(AuthenticationV1Api).createSelfSubjectReview({ body: {} });
    expect(who.status?.userInfo?.username).toBe(`system:serviceaccount:${SA_NAMESPACE}:${SA_NAME}`);
  });

  it('is least privilege: exactly the granted verbs on its resources, and nothing sensitive', async () => {
    const allowed: string[] = [];
    const refused: string[] = [];
    const checks: Array<Promise<void>> = [];
    const check = (attrs: V1ResourceAttributes, expectAllowed: boolean) => {
      const key = `${attrs.group || 'core'}/${attrs.resource}${attrs.subresource ? `/${attrs.subresource}` : ''} ${attrs.verb}`;
      checks.push(
        can({ ...attrs, namespace: CLUSTER_SCOPED.has(attrs.resource ?? '') ? undefined : ns }).then((ok) => {
          if (ok && !expectAllowed) allowed.push(key);
          if (!ok && expectAllowed) refused.push(key);
        }),
      );
    };
    for (const rule of rules) {
      for (const group of rule.apiGroups) {
        for (const res of rule.resources) {
          const [resource, subresource] = res.split('/');
          const granted = new Set(
            rules
              .filter((r) => r.apiGroups.includes(group) && r.resources.includes(res))
              .flatMap((r) => r.verbs),
          );
          for (const verb of VERBS) check({ group, resource, subresource, verb }, granted.has(verb));
        }
      }
    }
    for (const attrs of SENSITIVE) check(attrs, false);
    await Promise.all(checks);
    expect(refused, 'granted by role.yaml but refused by the apiserver').toEqual([]);
    expect(allowed, 'allowed by the apiserver although role.yaml does not grant it, or sensitive').toEqual(
      [],
    );
  });

  it('a refused request is visible to the 403 check of the operator output', async () => {
    const err = await sa.core.listNamespacedSecret({ namespace: ns }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(statusCodeOf(err)).toBe(403);
    expect(String((err as Error).message)).toMatch(FORBIDDEN);
  });

  it('is sufficient: the operator as the ServiceAccount hibernates and wakes a VM with no 403', async () => {
    const t0 = Date.now();
    const marks: string[] = [];
    const mark = (what: string) => marks.push(`${what} +${((Date.now() - t0) / 1000).toFixed(1)} s`);
    // A Lease left held by a killed run would delay the election by its 15 s; a live holder is not touched.
    const lease = await admin.coordination
      .readNamespacedLease({ name: LEADER_ELECTION_ID, namespace: SA_NAMESPACE })
      .catch(() => undefined);
    const renewed = lease?.spec?.renewTime ? new Date(String(lease.spec.renewTime)).getTime() : 0;
    if (lease && Date.now() - renewed > 20_000) {
      await admin.coordination.deleteNamespacedLease({ name: LEADER_ELECTION_ID, namespace: SA_NAMESPACE });
    }

    const probePort = await freePort();
    const metricsPort = await freePort();
    const env = cleanEnv({
      TEMPORAL_ADDRESS: stack.temporalAddress,
      TEMPORAL_NAMESPACE: stack.temporalNamespace,
      OCI_REGISTRY: stack.ociRegistry,
      KUBECONFIG: saKubeconfig,
      TEMPORAL_TASK_QUEUE: taskQueue,
      WATCH_NAMESPACE: ns,
      LEADER_ELECT: 'true',
      LEADER_ELECTION_NAMESPACE: SA_NAMESPACE,
      PROBE_ADDR: `127.0.0.1:${probePort}`,
      METRICS_ADDR: `127.0.0.1:${metricsPort}`,
      OPERATOR_LOG_LEVEL: 'debug',
    });
    mark('environment');
    op = startOperator(env, [], { probePort, metricsPort, launcher: 'node' });
    const acquired = await op.waitForLog((l) => l.msg === 'successfully acquired lease', 90_000);
    await op.waitForLog((l) => l.msg === 'started watching', 30_000);
    await waitFor200(`${op.probeUrl}/readyz`, 30_000);
    mark('leading, watching and ready');

    await admin.core.createNamespacedPod({
      namespace: ns,
      body: simPod({ namespace: ns, name: POD, vmName: vmNameForPod(ns, POD), pool, app: 'rbac-e2e' }),
    });
    const firstId = await waitFor(
      `pod ${POD} running with a VM id`,
      async () => {
        const p = await admin.core.readNamespacedPod({ name: POD, namespace: ns });
        const ok = containerRunning(p) && vmIDOf(p) !== '' && lifecycleOf(p).state === LifecycleStates.ready;
        return ok ? vmIDOf(p) : undefined;
      },
      PHASE_MS,
    );

    await admin.custom.createNamespacedCustomObject({
      ...crBase,
      body: {
        apiVersion: `${GROUP}/${VERSION}`,
        kind: KIND_COCOONHIBERNATION,
        metadata: { name: CR, namespace: ns },
        spec: { podRef: { name: POD }, desire: 'Hibernate' },
      },
    });
    mark('VM running');
    const hibernated = await waitPhase('Hibernated');
    mark('Hibernated');
    expect(hibernated.metadata.finalizers).toContain(Finalizers.cocoonHibernation);
    const vm = vmNameForPod(ns, POD);
    const head = await fetch(`http://${stack.ociRegistry}/v2/${vm}/manifests/${Tags.hibernate}`, {
      method: 'HEAD',
      headers: { accept: MANIFEST_ACCEPT },
    });
    expect(head.status).toBe(200);

    await admin.custom.patchNamespacedCustomObject(
      { ...crBase, name: CR, body: { spec: { desire: 'Wake' } } },
      mergePatch,
    );
    const active = await waitPhase('Active');
    mark('Active');
    expect(active.status?.vmName).toBe(vm);
    const pod = await admin.core.readNamespacedPod({ name: POD, namespace: ns });
    expect(containerRunning(pod)).toBe(true);
    expect(vmIDOf(pod)).not.toBe(firstId);
    expect(pod.metadata?.annotations).not.toHaveProperty(Annotations.hibernate);

    // The hibernation writes happened as the ServiceAccount: finalizer (update), pod annotation and status
    // (patch) above; Events (create) and the Lease (create/update) here.
    await waitFor(
      'the operator events of both transitions',
      async () => {
        const list = await admin.core.listNamespacedEvent({
          namespace: ns,
          fieldSelector: `involvedObject.name=${CR},involvedObject.kind=${KIND_COCOONHIBERNATION}`,
        });
        const reasons = new Set(
          list.items.filter((e) => e.source?.component === EVENT_SOURCE).map((e) => e.reason),
        );
        return reasons.has(EventReasons.hibernated) && reasons.has(EventReasons.wokenActive)
          ? reasons
          : undefined;
      },
      10_000,
    );
    mark('events');
    const held = await admin.coordination.readNamespacedLease({
      name: LEADER_ELECTION_ID,
      namespace: SA_NAMESPACE,
    });
    expect(held.spec?.holderIdentity).toBe(acquired.identity);

    console.info(`[rbac e2e] operator as ${SA_NAMESPACE}/${SA_NAME}: ${marks.join(', ')}`);
    expect(refusals(), 'forbidden requests in the operator output').toEqual([]);
    expect(op.logs.filter((l) => l.level === 'error' || l.level === 'fatal')).toEqual([]);
  }, 150_000);
});
