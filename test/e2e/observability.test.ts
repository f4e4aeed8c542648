/**
 * The shipped observability artefacts against real parts: a real Prometheus (Debian package `prometheus`,
 * installed by `scripts/tools.sh prometheus`) scrapes the operator process on the local stack while one
 * CocoonHibernation hibernates and wakes a simulator VM. Then every expression of the Grafana dashboard
 * (config/grafana/cocoon-operator.json) and of the alert rules (config/prometheus/alerts.yaml) is asked of
 * Prometheus's HTTP API: each parses, the dashboard's transition and registry panels return data, the
 * rules load and evaluate without error, and `promtool check rules` accepts the file. The same run checks
 * the way from kubectl to the history: the CR's workflow-id annotation names a workflow Temporal knows.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { bundleWorkflows } from '../../scripts/bundle-workflows.js';
import { vmWorkflowId } from '../../src/api/ids.js';
import { LifecycleStates, Tags, WorkflowAnnotations } from '../../src/api/keys.js';
import { containerRunning, lifecycleOf, vmIDOf, vmNameForPod } from '../../src/api/pod.js';
import type { KubeClients } from '../../src/kube/client.js';
import { simPod } from '../support/builders.js';
import { freePort } from '../support/ports.js';
import { waitFor } from '../support/wait.js';
import { VkSimClient } from '../vksim/client.js';
import { dropTag, Hibernations } from './hibernation-harness.js';
import {
  cleanEnv,
  type OperatorProcess,
  stackEnv as operatorStackEnv,
  ROOT,
  startReadyOperator,
  stopOperator,
} from './operator-process.js';
import { kubeClients, stackEnv } from './stack-harness.js';

const ns = `obs-e2e-${randomBytes(3).toString('hex')}`;
const taskQueue = `obs-e2e-${randomUUID()}`;
const POD = 'obs-0';
const UI = 'http://127.0.0.1:8233';
const DASHBOARD = join(ROOT, 'config/grafana/cocoon-operator.json');
const ALERTS = join(ROOT, 'config/prometheus/alerts.yaml');
/** Grafana's own variables, replaced as Grafana would at a 1 s scrape interval. */
const GRAFANA_VARS: Record<string, string> = { $__rate_interval: '1m' };
/** Dashboard panels every query of which must return data once one hibernate and one wake have finished. */
const TRANSITION_PANELS = [
  'Transitions by phase and result',
  'Phase duration (p50, p95)',
  'Mean phase duration',
  'Registry call latency (p50, p95)',
];

let kube: KubeClients;
let crs: Hibernations;
let temporal: Client;
let connection: Connection;
let op: OperatorProcess | undefined;
let prometheus: ChildProcess | undefined;
let promUrl = '';
let workDir = '';
let registry = '';

interface PromAnswer {
  status: string;
  error?: string;
  data?: { resultType: string; result: unknown[] };
}

async function promQuery(expr: string): Promise<PromAnswer> {
  const res = await fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent(expr)}`);
  return (await res.json()) as PromAnswer;
}

function dashboardExprs(): Array<{ panel: string; expr: string }> {
  const dash = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as {
    panels: Array<{ title: string; targets?: Array<{ expr: string }> }>;
  };
  return dash.panels.flatMap((p) =>
    (p.targets ?? []).map((t) => ({
      panel: p.title,
      expr: Object.entries(GRAFANA_VARS).reduce((e, [k, v]) => e.replaceAll(k, v), t.expr),
    })),
  );
}

function alertRules(): Array<{ alert: string; expr: string }> {
  const doc = parse(readFileSync(ALERTS, 'utf8')) as {
    groups: Array<{ rules: Array<{ alert: string; expr: string }> }>;
  };
  return doc.groups.flatMap((g) => g.rules);
}

describe('observability: dashboard and alert rules against a real Prometheus', () => {
  beforeAll(async () => {
    execFileSync('bash', [join(ROOT, 'scripts/tools.sh'), 'prometheus'], { stdio: 'inherit' });
    const stack = await stackEnv();
    kube = kubeClients(stack.kubeconfig);
    registry = stack.ociRegistry;
    const sim = new VkSimClient(stack.vksimUrl);
    const { pool } = await sim.state();
    await kube.core.createNamespace({ body: { metadata: { name: ns } } });
    crs = new Hibernations(kube, ns);
    connection = await Connection.connect({ address: stack.temporalAddress });
    temporal = new Client({ connection, namespace: stack.temporalNamespace });

    await bundleWorkflows();
    const metricsPort = await freePort();
    const probePort = await freePort();
    op = await startReadyOperator(
      cleanEnv({
        ...operatorStackEnv(),
        TEMPORAL_TASK_QUEUE: taskQueue,
        TEMPORAL_UI_URL: UI,
        WATCH_NAMESPACE: ns,
        LEADER_ELECT: 'false',
        PROBE_ADDR: `127.0.0.1:${probePort}`,
        METRICS_ADDR: `127.0.0.1:${metricsPort}`,
      }),
      { probePort, metricsPort },
    );

    workDir = mkdtempSync(join(tmpdir(), 'obs-e2e-'));
    const promPort = await freePort();
    promUrl = `http://127.0.0.1:${promPort}`;
    writeFileSync(
      join(workDir, 'prometheus.yml'),
      [
        'global: {scrape_interval: 1s, evaluation_interval: 1s}',
        `rule_files: [${JSON.stringify(ALERTS)}]`,
        'scrape_configs:',
        '  - job_name: cocoon-operator',
        `    static_configs: [{targets: ["127.0.0.1:${metricsPort}"]}]`,
        '',
      ].join('\n'),
    );
    prometheus = spawn(
      'prometheus',
      [
        `--config.file=${join(workDir, 'prometheus.yml')}`,
        `--storage.tsdb.path=${join(workDir, 'data')}`,
        `--web.listen-address=127.0.0.1:${promPort}`,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let promLog = '';
    prometheus.stderr!.setEncoding('utf8').on('data', (c: string) => {
      promLog = (promLog + c).slice(-4000);
    });
    await waitFor('prometheus ready', async () => (await fetch(`${promUrl}/-/ready`)).ok, 60_000, {
      describe: () => promLog,
    });

    // One hibernate and one wake of a simulator VM.
    const vm = vmNameForPod(ns, POD);
    await kube.core.createNamespacedPod({
      namespace: ns,
      body: simPod({ namespace: ns, name: POD, vmName: vm, pool: pool, app: 'hibernation-e2e' }),
    });
    await waitFor(
      `pod ${POD} running`,
      async () => {
        const p = await kube.core.readNamespacedPod({ name: POD, namespace: ns });
        return containerRunning(p) && vmIDOf(p) !== '' && lifecycleOf(p).state === LifecycleStates.ready;
      },
      60_000,
    );
    await crs.create(POD, POD, 'Hibernate');
    await crs.waitPhase(POD, 'Hibernated', 60_000);
    await crs.setDesire(POD, 'Wake');
    await crs.waitPhase(POD, 'Active', 60_000);
  }, 300_000);

  afterAll(async () => {
    prometheus?.kill('SIGTERM');
    await stopOperator(op);
    await temporal?.workflow
      .getHandle(vmWorkflowId(ns, POD))
      .terminate('observability e2e teardown')
      .catch(() => undefined);
    await crs?.forceDelete(POD);
    await kube?.core
      .deleteNamespacedPod({ name: POD, namespace: ns, gracePeriodSeconds: 0 })
      .catch(() => undefined);
    if (registry) await dropTag(registry, vmNameForPod(ns, POD), Tags.hibernate).catch(() => undefined);
    await kube?.core.deleteNamespace({ name: ns }).catch(() => undefined);
    await connection?.close();
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  });

  it('every dashboard expression parses, and the transition and registry panels return data', {
    timeout: 90_000,
  }, async () => {
    const exprs = dashboardExprs();
    expect(exprs.length).toBeGreaterThan(20);
    const transitions = exprs.filter((e) => TRANSITION_PANELS.includes(e.panel));
    expect(new Set(transitions.map((t) => t.panel))).toEqual(new Set(TRANSITION_PANELS));
    // Barrier: Prometheus has scraped the finished transitions at least twice (rate needs two samples).
    let empty: string[] = [];
    await waitFor(
      'every transition panel to return data',
      async () => {
        empty = [];
        for (const t of transitions) {
          if (((await promQuery(t.expr)).data?.result ?? []).length === 0) empty.push(t.expr);
        }
        return empty.length === 0;
      },
      45_000,
      { describe: () => empty },
    );
    for (const { panel, expr } of exprs) {
      const a = await promQuery(expr);
      expect(a.error, `${panel}: ${expr}`).toBeUndefined();
      expect(a.status, `${panel}: ${expr}`).toBe('success');
    }
    const done = await promQuery('sum by (result) (cocoon_operator_wake_phase_duration_seconds_count)');
    expect(done.data?.result).toEqual([{ metric: { result: 'ok' }, value: [expect.any(Number), '1'] }]);
  });

  it('every alert expression parses, the rules load and evaluate cleanly, and promtool accepts the file', async () => {
    const rules = alertRules();
    expect(rules.map((r) => r.alert)).toEqual(
      expect.arrayContaining([
        'CocoonHibernationTransitionsTimingOut',
        'CocoonSetSubAgentDeadLettered',
        'CocoonOperatorWorkflowTaskFailures',
        'CocoonOperatorWatcherNotSynced',
      ]),
    );
    for (const r of rules) {
      const a = await promQuery(r.expr);
      expect(a.status, `${r.alert}: ${a.error}`).toBe('success');
    }
    type RuleState = { name: string; health: string; lastError?: string; lastEvaluation: string };
    const evaluated = await waitFor(
      'every alert rule evaluated',
      async () => {
        const res = (await (await fetch(`${promUrl}/api/v1/rules?type=alert`)).json()) as {
          data: { groups: Array<{ rules: RuleState[] }> };
        };
        const all = res.data.groups.flatMap((g) => g.rules);
        return all.length === rules.length && all.every((r) => !r.lastEvaluation.startsWith('0001'))
          ? all
          : undefined;
      },
      30_000,
    );
    const unhealthy = evaluated.filter((r) => r.health !== 'ok' || r.lastError);
    expect(unhealthy.map((r) => `${r.name}: ${r.health} ${r.lastError ?? ''}`)).toEqual([]);
    // Healthy run: the watcher reports synced, so its alert's input is there and the alert is quiet.
    const synced = await promQuery('cocoon_operator_watcher_synced');
    expect(synced.data?.result).toEqual([expect.objectContaining({ value: [expect.any(Number), '1'] })]);
    expect(execFileSync('promtool', ['check', 'rules', ALERTS], { encoding: 'utf8' })).toContain('SUCCESS');
  });

  it('leads from kubectl to the workflow: the CR names its workflow id and UI page, and Temporal knows it', async () => {
    const cr = await crs.get(POD);
    const id = cr?.metadata.annotations?.[WorkflowAnnotations.id];
    expect(id).toBe(vmWorkflowId(ns, POD));
    expect(cr?.metadata.annotations?.[WorkflowAnnotations.url]).toBe(
      `${UI}/namespaces/default/workflows/${encodeURIComponent(id!)}`,
    );
    const described = await temporal.workflow.getHandle(id!).describe();
    expect(described.type).toBe('vmWorkflow');
    expect(described.taskQueue).toBe(taskQueue);
  });
});
