/**
 * The stack's components: how each starts (detached, loopback only), how its health is probed, and what
 * runs once it is ready (CRDs, search attributes, the registry's delete-by-tag probe).
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { SearchAttributes } from '../../src/api/keys.js';
import { applyCrds } from './kube.js';
import {
  binaries,
  HOST,
  Ports,
  repoRoot,
  stackPaths,
  TEMPORAL_NAMESPACE,
  type ToolName,
  vksimEntry,
} from './paths.js';
import { adminTls, apiserverUrl, pkiFiles } from './pki.js';
import { httpGet, httpsGet, type ProcessSignature, run, say, spawnDetached } from './proc.js';
import { checkDeleteByTag } from './registry.js';

export interface Component {
  name: string;
  /** Where it listens, for `status`. */
  endpoint: string;
  /** Main port; an unhealthy listener there blocks a start. */
  port: number;
  /** Recognises its processes of this stack dir, for `down` and `status` without a pid file. */
  signature(): ProcessSignature;
  /** Binaries it runs, which `up` builds with scripts/tools.sh when missing. */
  binaries(): { tool: ToolName; path: string }[];
  /** False when the component cannot be started here (the simulator before its entry file exists). */
  present(): boolean;
  /** One quick probe: true when ready to serve. Never throws. */
  healthy(): Promise<boolean>;
  /** Spawns the process; returns its pid. */
  start(): Promise<number>;
  readyTimeoutMs: number;
  /** Runs after the component is ready, on every `up` (idempotent). `fresh` = started by this `up`. */
  afterReady?(fresh: boolean): Promise<void>;
}

const etcdUrl = `http://${HOST}:${Ports.etcdClient}`;
const registryUrl = `http://${HOST}:${Ports.registry}`;
const vksimUrl = `http://${HOST}:${Ports.vksim}`;
const temporalAddress = `${HOST}:${Ports.temporal}`;

/** Search attributes the workflows upsert; all Keyword (src/api/keys.ts SearchAttributes). */
export const searchAttributeNames: string[] = Object.values(SearchAttributes);

const etcd: Component = {
  name: 'etcd',
  endpoint: etcdUrl,
  port: Ports.etcdClient,
  signature: () => ({ cmdline: `--data-dir=${stackPaths().etcdData}` }),
  binaries: () => [{ tool: 'etcd', path: binaries().etcd }],
  present: () => true,
  async healthy() {
    const r = await httpGet(`${etcdUrl}/health`).catch(() => undefined);
    return r?.status === 200 && /"health":\s*"true"/.test(r.body);
  },
  async start() {
    const peer = `http://${HOST}:${Ports.etcdPeer}`;
    return spawnDetached('etcd', binaries().etcd, [
      '--name=cocoon-stack',
      `--data-dir=${stackPaths().etcdData}`,
      `--listen-client-urls=${etcdUrl}`,
      `--advertise-client-urls=${etcdUrl}`,
      `--listen-peer-urls=${peer}`,
      `--initial-advertise-peer-urls=${peer}`,
      `--initial-cluster=cocoon-stack=${peer}`,
      '--initial-cluster-state=new',
      // A throwaway test store: skip fsync like envtest does (much faster on shared disks).
      '--unsafe-no-fsync=true',
      '--log-level=warn',
    ]);
  },
  readyTimeoutMs: 30_000,
};

const apiserver: Component = {
  name: 'kube-apiserver',
  endpoint: apiserverUrl,
  port: Ports.apiserver,
  signature: () => ({ cmdline: `--tls-cert-file=${pkiFiles().servingCert}` }),
  binaries: () => [
    { tool: 'kube', path: binaries().apiserver },
    { tool: 'kube', path: binaries().kubectl },
  ],
  present: () => true,
  async healthy() {
    const tls = adminTls();
    if (!tls) return false;
    const r = await httpsGet(`${apiserverUrl}/readyz`, tls).catch(() => undefined);
    return r?.status === 200 && r.body.trim() === 'ok';
  },
  async start() {
    const f = pkiFiles();
    return spawnDetached('kube-apiserver', binaries().apiserver, [
      `--etcd-servers=${etcdUrl}`,
      `--bind-address=${HOST}`,
      `--advertise-address=${HOST}`,
      `--secure-port=${Ports.apiserver}`,
      `--cert-dir=${stackPaths().pki}`,
      `--tls-cert-file=${f.servingCert}`,
      `--tls-private-key-file=${f.servingKey}`,
      `--client-ca-file=${f.caCert}`,
      '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
      `--service-account-key-file=${f.saPub}`,
      `--service-account-signing-key-file=${f.saKey}`,
      '--service-cluster-ip-range=10.0.0.0/24',
      '--authorization-mode=Node,RBAC',
      // No kube-controller-manager runs, so nothing creates the `default` ServiceAccounts that this
      // admission plugin insists on for every pod.
      '--disable-admission-plugins=ServiceAccount',
      // The lease reconciler would publish 127.0.0.1 as the `kubernetes` Service endpoint, which endpoint
      // validation refuses (loopback), and log that every 10 s; nothing in-cluster needs that Service here.
      '--endpoint-reconciler-type=none',
      '--allow-privileged=true',
      '--profiling=false',
    ]);
  },
  readyTimeoutMs: 120_000,
  async afterReady() {
    const files = await applyCrds();
    if (files.length === 0) say('kube-apiserver: no CRD manifests in config/crd/ yet');
    else say(`kube-apiserver: CRDs established (${files.map((f) => f.split('/').pop()).join(', ')})`);
  },
};

const registry: Component = {
  name: 'registry',
  endpoint: registryUrl,
  port: Ports.registry,
  signature: () => ({ cmdline: `serve ${stackPaths().registryConfig}` }),
  binaries: () => [{ tool: 'registry', path: binaries().registry }],
  present: () => true,
  async healthy() {
    const r = await httpGet(`${registryUrl}/v2/`).catch(() => undefined);
    return r?.status === 200;
  },
  async start() {
    return spawnDetached('registry', binaries().registry, ['serve', stackPaths().registryConfig], {
      // distribution v3 exports OpenTelemetry traces by default; there is no collector here.
      env: { OTEL_TRACES_EXPORTER: 'none', OTEL_SDK_DISABLED: 'true' },
    });
  },
  readyTimeoutMs: 30_000,
  async afterReady(fresh) {
    if (!fresh) return;
    const r = await checkDeleteByTag(registryUrl, 'cocoon-stack/selfcheck', 'probe');
    if (r.manifestPut !== 201 || r.deleteTag !== 202 || r.headAfter !== 404) {
      throw new Error(`registry: DELETE by tag does not work as required: ${JSON.stringify(r)}`);
    }
  },
};

/** Runs the Temporal CLI against the stack's frontend, ignoring any user config or TEMPORAL_* env. */
function temporalCli(args: string[], timeoutMs = 10_000): Promise<string> {
  return run(
    binaries().temporal,
    [
      ...args,
      '--address',
      temporalAddress,
      '--namespace',
      TEMPORAL_NAMESPACE,
      '--disable-config-file',
      '--disable-config-env',
      '--command-timeout',
      `${Math.floor(timeoutMs / 1000)}s`,
    ],
    { timeoutMs: timeoutMs + 2000 },
  );
}

/** Custom search attributes registered in the stack's namespace, by name → type (as the CLI prints it). */
async function listSearchAttributes(): Promise<Map<string, string>> {
  const out = await temporalCli(['operator', 'search-attribute', 'list', '--output', 'json']);
  const parsed = JSON.parse(out) as unknown;
  const m = new Map<string, string>();
  const rows: unknown[] = Array.isArray(parsed) ? parsed : [];
  const obj = (Array.isArray(parsed) ? {} : parsed) as Record<string, unknown>;
  // CLI output is either a list of {name,type} rows or {customAttributes:{name:type}, ...}.
  for (const r of rows) {
    const row = r as { name?: string; type?: string };
    if (row.name) m.set(row.name, String(row.type));
  }
  for (const key of ['customAttributes', 'systemAttributes']) {
    const part = obj[key];
    if (part && typeof part === 'object') for (const [k, v] of Object.entries(part)) m.set(k, String(v));
  }
  return m;
}

/**
 * SQLite settings of the dev server's file: a write-ahead log, synced at checkpoints rather than at every
 * commit. With SQLite's defaults (a rollback journal, a sync per commit) each of a transition's few history
 * writes waited on the disk and the server spent about 20 ms more CPU per transition (1000 VMs hibernated
 * in twice the wall time; docs/performance.md#the-temporal-servers-sqlite-file). A killed server process
 * loses nothing committed; a machine that loses power may lose the last commits, which is the dev server's
 * trade (it is not a production store). docker-compose.yml sets the same two.
 */
export const temporalSqlitePragmas: readonly string[] = ['journal_mode=wal', 'synchronous=normal'];

/**
 * Dynamic config of the dev server (`--dynamic-config-value`). `history.transferProcessorMaxPollRPS`: the
 * history service reads the tasks it hands to matching (a workflow task or an activity to dispatch) at
 * most this many times a second per history shard, 20 by default. A cluster spreads its workflows over
 * many shards; the dev server has one, so that limit is the whole server's, and once transitions come
 * faster than one per 50 ms each dispatch waited up to 50 ms for the next read: one CR at a time went
 * from 60–90 ms to ~120 ms as soon as the creates came back to back, and a trivial SDK workflow on the
 * same server did the same (docs/performance.md#one-cr-on-an-idle-operator). docker-compose.yml sets the
 * same.
 */
export const temporalDynamicConfig: readonly string[] = ['history.transferProcessorMaxPollRPS=1000'];

const temporal: Component = {
  name: 'temporal',
  endpoint: `${temporalAddress} (UI http://${HOST}:${Ports.temporalUi})`,
  port: Ports.temporal,
  signature: () => ({ cmdline: `--db-filename ${stackPaths().temporalDb}` }),
  binaries: () => [{ tool: 'temporal', path: binaries().temporal }],
  present: () => true,
  async healthy() {
    const out = await temporalCli(['operator', 'cluster', 'health'], 3000).catch(() => '');
    return /\bSERVING\b/.test(out) && !/NOT_SERVING/.test(out);
  },
  async start() {
    return spawnDetached('temporal', binaries().temporal, [
      'server',
      'start-dev',
      '--ip',
      HOST,
      '--port',
      String(Ports.temporal),
      '--ui-port',
      String(Ports.temporalUi),
      '--db-filename',
      stackPaths().temporalDb,
      ...temporalSqlitePragmas.flatMap((p) => ['--sqlite-pragma', p]),
      ...temporalDynamicConfig.flatMap((kv) => ['--dynamic-config-value', kv]),
      '--ui-disable-news-fetch',
      '--log-level',
      'warn',
      ...searchAttributeNames.flatMap((n) => ['--search-attribute', `${n}=Keyword`]),
    ]);
  },
  readyTimeoutMs: 60_000,
  async afterReady() {
    // start-dev registers them on a fresh db; a server started some other way may lack them.
    const have = await listSearchAttributes();
    for (const n of searchAttributeNames) {
      if (have.has(n)) continue;
      say(`temporal: registering search attribute ${n} (Keyword)`);
      await temporalCli(['operator', 'search-attribute', 'create', '--name', n, '--type', 'Keyword']);
    }
  },
};

const vksim: Component = {
  name: 'vksim',
  endpoint: vksimUrl,
  port: Ports.vksim,
  signature: () => ({ cmdline: vksimEntry, env: `KUBECONFIG=${stackPaths().adminKubeconfig}` }),
  binaries: () => [],
  present: () => existsSync(vksimEntry),
  async healthy() {
    const r = await httpGet(`${vksimUrl}/healthz`).catch(() => undefined);
    return r?.status === 200;
  },
  async start() {
    const tsxCli = createRequire(import.meta.url).resolve('tsx/cli');
    return spawnDetached('vksim', process.execPath, [tsxCli, vksimEntry], {
      cwd: repoRoot,
      env: {
        KUBECONFIG: stackPaths().adminKubeconfig,
        OCI_REGISTRY: `${HOST}:${Ports.registry}`,
        VKSIM_CONTROL_ADDR: `${HOST}:${Ports.vksim}`,
      },
    });
  },
  readyTimeoutMs: 60_000,
};

/** All components in start order (`down` stops them in reverse). */
export const components: Component[] = [etcd, apiserver, registry, temporal, vksim];

export function componentByName(name: string): Component {
  const c = components.find((x) => x.name === name || (name === 'apiserver' && x.name === 'kube-apiserver'));
  if (!c) throw new Error(`unknown component ${name}; one of ${components.map((x) => x.name).join(', ')}`);
  return c;
}
