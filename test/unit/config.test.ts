import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, ENV_SETTINGS, HelpRequested, loadConfig, usage } from '../../src/config.js';

const dir = mkdtempSync(join(tmpdir(), 'config-test-'));
const pem = (name: string) => {
  const p = join(dir, name);
  writeFileSync(p, `-----BEGIN ${name}-----\n-----END ${name}-----\n`);
  return p;
};
const kubeconfigFile = join(dir, 'kubeconfig');
writeFileSync(kubeconfigFile, 'apiVersion: v1\nkind: Config\n');
const NO_SA = { serviceAccountNamespaceFile: join(dir, 'absent-namespace') };
const BASE = { OCI_REGISTRY: '127.0.0.1:5000' };

function load(argv: string[] = [], env: NodeJS.ProcessEnv = {}, opts = NO_SA) {
  return loadConfig(argv, { ...BASE, ...env }, opts);
}

/** Loads and returns the ConfigError's message, failing if none is thrown. */
function errorOf(argv: string[], env: NodeJS.ProcessEnv = {}, base: NodeJS.ProcessEnv = BASE): string {
  try {
    loadConfig(argv, { ...base, ...env }, NO_SA);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    const msg = (err as Error).message;
    expect(msg).not.toContain('\n');
    return msg;
  }
  throw new Error('expected a ConfigError');
}

describe('loadConfig defaults', () => {
  it('fills every optional setting from the documented defaults', () => {
    const c = load();
    expect(c).toMatchObject({
      kubeconfig: undefined,
      ociRegistry: '127.0.0.1:5000',
      temporal: {
        address: '127.0.0.1:7233',
        namespace: 'default',
        taskQueue: 'cocoon-operator',
        tls: undefined,
        apiKey: undefined,
        metricsAddr: 'auto',
      },
      cocoonSetConcurrency: 4,
      hibernationConcurrency: 4,
      metricsAddr: { host: undefined, port: 8080 },
      probeAddr: { host: undefined, port: 8081 },
      leaderElect: true,
      leaderElectionNamespace: 'default',
      leaderElectionNamespaceSource: 'fallback',
      watchNamespace: '',
      logLevel: 'info',
      logFormat: 'json',
      temporalUiUrl: undefined,
      mode: 'all',
      shutdownGraceMs: 30_000,
    });
  });

  it('the settings table documents a default for exactly the settings that have one', () => {
    const byEnv = Object.fromEntries(ENV_SETTINGS.map((s) => [s.env, s]));
    expect(byEnv.COCOONSET_CONCURRENCY?.default).toBe('4');
    expect(byEnv.HIBERNATION_CONCURRENCY?.default).toBe('4');
    expect(byEnv.METRICS_ADDR?.default).toBe(':8080');
    expect(byEnv.PROBE_ADDR?.default).toBe(':8081');
    expect(byEnv.LEADER_ELECT?.default).toBe('true');
    expect(byEnv.TEMPORAL_TASK_QUEUE?.default).toBe('cocoon-operator');
    expect(ENV_SETTINGS.filter((s) => s.required).map((s) => s.env)).toEqual(['OCI_REGISTRY']);
    for (const s of ENV_SETTINGS) {
      expect(s.flag).toMatch(/^--[a-z][a-z-]+$/);
      expect(s.description.length).toBeGreaterThan(5);
    }
    expect(new Set(ENV_SETTINGS.map((s) => s.flag)).size).toBe(ENV_SETTINGS.length);
    expect(usage()).toContain('--hibernation-concurrency');
  });

  it('treats an empty env variable as unset', () => {
    const c = load([], { COCOONSET_CONCURRENCY: '', METRICS_ADDR: '', TEMPORAL_NAMESPACE: '' });
    expect(c.cocoonSetConcurrency).toBe(4);
    expect(c.metricsAddr).toEqual({ host: undefined, port: 8080 });
    expect(c.temporal.namespace).toBe('default');
  });
});

describe('loadConfig from env and flags', () => {
  const ENV = {
    KUBECONFIG: kubeconfigFile,
    OCI_REGISTRY: 'registry.example.com:5443/cocoon/snapshots',
    WATCH_NAMESPACE: 'team-a',
    TEMPORAL_ADDRESS: 'temporal.example.com:7233',
    TEMPORAL_NAMESPACE: 'cocoon',
    TEMPORAL_TASK_QUEUE: 'cocoon-q',
    TEMPORAL_API_KEY: 'secret',
    TEMPORAL_METRICS_ADDR: '127.0.0.1:9464',
    COCOONSET_CONCURRENCY: '16',
    HIBERNATION_CONCURRENCY: '8',
    METRICS_ADDR: '127.0.0.1:18080',
    PROBE_ADDR: '[::1]:18081',
    LEADER_ELECT: 'false',
    LEADER_ELECTION_NAMESPACE: 'cocoon-system',
    OPERATOR_LOG_LEVEL: 'DEBUG',
    OPERATOR_MODE: 'worker',
    SHUTDOWN_GRACE_PERIOD: '1.5s',
  };

  it('reads every setting from its env variable', () => {
    const c = loadConfig([], ENV, NO_SA);
    expect(c).toMatchObject({
      kubeconfig: kubeconfigFile,
      ociRegistry: 'registry.example.com:5443/cocoon/snapshots',
      watchNamespace: 'team-a',
      temporal: {
        address: 'temporal.example.com:7233',
        namespace: 'cocoon',
        taskQueue: 'cocoon-q',
        tls: true, // an API key turns TLS on
        apiKey: 'secret',
        metricsAddr: { host: '127.0.0.1', port: 9464 },
      },
      cocoonSetConcurrency: 16,
      hibernationConcurrency: 8,
      metricsAddr: { host: '127.0.0.1', port: 18080 },
      probeAddr: { host: '::1', port: 18081 },
      leaderElect: false,
      leaderElectionNamespace: 'cocoon-system',
      leaderElectionNamespaceSource: 'setting',
      logLevel: 'debug',
      mode: 'worker',
      shutdownGraceMs: 1500,
    });
  });

  it('lets every flag override its env variable', () => {
    const other = pem('KUBECONFIG2');
    const c = loadConfig(
      [
        `--kubeconfig=${other}`,
        '--oci-registry=10.0.0.5:5000',
        '--watch-namespace=team-b',
        '--temporal-address=localhost:7234',
        '--temporal-namespace=ns2',
        '--temporal-task-queue=q2',
        '--temporal-api-key=k2',
        '--temporal-metrics-bind-address=0',
        '--cocoonset-concurrency=2',
        '--hibernation-concurrency',
        '3',
        '--metrics-bind-address=0',
        '--health-probe-bind-address=:9999',
        '--leader-elect',
        '--leader-election-namespace=ops',
        '--log-level=warn',
        '--mode=watcher',
        '--shutdown-grace-period=2m',
      ],
      ENV,
      NO_SA,
    );
    expect(c).toMatchObject({
      kubeconfig: other,
      ociRegistry: '10.0.0.5:5000',
      watchNamespace: 'team-b',
      temporal: {
        address: 'localhost:7234',
        namespace: 'ns2',
        taskQueue: 'q2',
        apiKey: 'k2',
        metricsAddr: null,
      },
      cocoonSetConcurrency: 2,
      hibernationConcurrency: 3,
      metricsAddr: null,
      probeAddr: { host: undefined, port: 9999 },
      leaderElect: true,
      leaderElectionNamespace: 'ops',
      logLevel: 'warn',
      mode: 'watcher',
      shutdownGraceMs: 120_000,
    });
  });

  it('accepts Go flag spellings: single dash, bare and explicit booleans', () => {
    expect(load(['-leader-elect=false']).leaderElect).toBe(false);
    expect(load(['-leader-elect'], { LEADER_ELECT: 'false' }).leaderElect).toBe(true);
    expect(load(['--leader-elect=F']).leaderElect).toBe(false);
    expect(load([], { LEADER_ELECT: '1' }).leaderElect).toBe(true);
    expect(load(['-cocoonset-concurrency=7']).cocoonSetConcurrency).toBe(7);
  });

  it('maps zerolog level names onto pino levels', () => {
    expect(load([], { OPERATOR_LOG_LEVEL: 'panic' }).logLevel).toBe('fatal');
    expect(load([], { OPERATOR_LOG_LEVEL: 'disabled' }).logLevel).toBe('silent');
    expect(load([], { OPERATOR_LOG_LEVEL: 'Trace' }).logLevel).toBe('trace');
  });

  it('takes LOG_FORMAT json or pretty (json by default) and rejects anything else with one line', () => {
    expect(load([], { LOG_FORMAT: 'pretty' }).logFormat).toBe('pretty');
    expect(load(['--log-format=json'], { LOG_FORMAT: 'pretty' }).logFormat).toBe('json');
    expect(() => load([], { LOG_FORMAT: 'text' })).toThrow('LOG_FORMAT: must be json or pretty, got "text"');
  });

  it('takes WORKFLOW_CACHE_SIZE as auto or an integer ≥ 2 (150 by default), and rejects anything else, 0 included, with one line', () => {
    expect(load().workflowCacheSize).toBe(150);
    expect(load([], { WORKFLOW_CACHE_SIZE: 'auto' }).workflowCacheSize).toBe('auto');
    expect(load([], { WORKFLOW_CACHE_SIZE: '2' }).workflowCacheSize).toBe(2);
    expect(load(['--workflow-cache-size=500'], { WORKFLOW_CACHE_SIZE: '250' }).workflowCacheSize).toBe(500);
    for (const v of ['0', '1', '-5', '2.5', 'lots', '1e3']) {
      expect(errorOf([], { WORKFLOW_CACHE_SIZE: v })).toBe(
        `WORKFLOW_CACHE_SIZE: must be auto or an integer ≥ 2, got "${v}"`,
      );
    }
    expect(errorOf(['--workflow-cache-size=1'])).toBe(
      '--workflow-cache-size: must be auto or an integer ≥ 2, got "1"',
    );
  });

  it('takes TEMPORAL_UI_URL as an http(s) base URL without its trailing slash', () => {
    expect(load([], { TEMPORAL_UI_URL: 'http://127.0.0.1:8233/' }).temporalUiUrl).toBe(
      'http://127.0.0.1:8233',
    );
    expect(load(['--temporal-ui-url=https://cloud.temporal.io']).temporalUiUrl).toBe(
      'https://cloud.temporal.io',
    );
    expect(() => load([], { TEMPORAL_UI_URL: '127.0.0.1:8233' })).toThrow(
      /^TEMPORAL_UI_URL: must be an http\(s\) URL/,
    );
    expect(() => load([], { TEMPORAL_UI_URL: 'http://ui/?q=1' })).toThrow(
      /^TEMPORAL_UI_URL: must be an http/,
    );
  });

  it('uses only the first file of a KUBECONFIG path list', () => {
    expect(load([], { KUBECONFIG: `${kubeconfigFile}:/nonexistent` }).kubeconfig).toBe(kubeconfigFile);
  });

  it('reads the Temporal TLS material and enables TLS with it', () => {
    const c = load([], {
      TEMPORAL_TLS_CA: pem('CA'),
      TEMPORAL_TLS_CERT: pem('CERT'),
      TEMPORAL_TLS_KEY: pem('KEY'),
      TEMPORAL_TLS_SERVER_NAME: 'temporal.internal',
    });
    const tls = c.temporal.tls;
    expect(tls).not.toBe(true);
    if (tls === true || tls === undefined) throw new Error('expected TLS material');
    expect(tls.serverRootCACertificate?.toString()).toContain('BEGIN CA');
    expect(tls.clientCertPair?.crt.toString()).toContain('BEGIN CERT');
    expect(tls.clientCertPair?.key.toString()).toContain('BEGIN KEY');
    expect(tls.serverNameOverride).toBe('temporal.internal');
    expect(load([], { TEMPORAL_TLS: 'true' }).temporal.tls).toBe(true);
    expect(load([], { TEMPORAL_TLS: 'false', TEMPORAL_API_KEY: 'k' }).temporal.tls).toBeUndefined();
  });

  it('takes the Lease namespace from POD_NAMESPACE, then the service-account file, then default', () => {
    expect(load([], { POD_NAMESPACE: 'cocoon-system' })).toMatchObject({
      leaderElectionNamespace: 'cocoon-system',
      leaderElectionNamespaceSource: 'POD_NAMESPACE',
    });
    const sa = join(dir, 'namespace');
    writeFileSync(sa, 'from-sa\n');
    expect(load([], {}, { serviceAccountNamespaceFile: sa })).toMatchObject({
      leaderElectionNamespace: 'from-sa',
      leaderElectionNamespaceSource: 'serviceaccount',
    });
    expect(
      load([], { LEADER_ELECTION_NAMESPACE: 'explicit', POD_NAMESPACE: 'pod' }).leaderElectionNamespace,
    ).toBe('explicit');
  });

  it('disables the probe listener with 0 or an empty flag, like controller-runtime', () => {
    expect(load([], { PROBE_ADDR: '0' }).probeAddr).toBeNull();
    expect(load(['--health-probe-bind-address=']).probeAddr).toBeNull();
  });

  it('turns --help into HelpRequested carrying the usage text', () => {
    expect(() => load(['--help'])).toThrow(HelpRequested);
    expect(() => load(['-h'])).toThrow(/OCI_REGISTRY/);
  });
});

describe('loadConfig rejects bad values with one line naming the setting', () => {
  it('requires OCI_REGISTRY', () => {
    expect(errorOf([], {}, {})).toBe('OCI_REGISTRY: must be set (host[:port][/path] of the OCI registry)');
    expect(errorOf(['--oci-registry='], {}, {})).toMatch(/^--oci-registry: must be set/);
  });

  it.each([
    'https://registry.example.com',
    'registry.example.com/',
    'registry.example.com/Upper',
    'registry example',
  ])('rejects the malformed OCI_REGISTRY %s', (v) => {
    expect(errorOf([], { OCI_REGISTRY: v })).toBe(
      `OCI_REGISTRY: must be host[:port][/path] without scheme or trailing slash, got "${v}"`,
    );
  });

  it.each([
    ['COCOONSET_CONCURRENCY', '--cocoonset-concurrency', 'cocoonset'],
    ['HIBERNATION_CONCURRENCY', '--hibernation-concurrency', 'hibernation'],
  ])(
    'rejects %s below 1 with the reference wording, and non-integers too (deliberate: the reference falls back to 4 on an unparsable value)',
    (env, flag, what) => {
      expect(errorOf([], { [env]: '0' })).toBe(`${env}: ${what} concurrency must be at least 1, got 0`);
      expect(errorOf([], { [env]: '-3' })).toBe(`${env}: ${what} concurrency must be at least 1, got -3`);
      expect(errorOf([], { [env]: 'four' })).toBe(`${env}: must be an integer ≥ 1, got "four"`);
      expect(errorOf([], { [env]: '2.5' })).toBe(`${env}: must be an integer ≥ 1, got "2.5"`);
      expect(errorOf([`${flag}=0`], { [env]: '8' })).toBe(
        `${flag}: ${what} concurrency must be at least 1, got 0`,
      );
      expect(errorOf([`${flag}=x`])).toBe(`${flag}: must be an integer ≥ 1, got "x"`);
    },
  );

  it.each([
    ['METRICS_ADDR', '8080'],
    ['METRICS_ADDR', 'localhost'],
    ['PROBE_ADDR', ':99999'],
    ['PROBE_ADDR', 'host:port'],
    ['TEMPORAL_METRICS_ADDR', 'x'],
  ])('rejects the listen address %s=%s', (env, v) => {
    expect(errorOf([], { [env]: v })).toBe(`${env}: must be [host]:port or 0 to disable, got "${v}"`);
  });

  it('TEMPORAL_METRICS_ADDR: refuses a host name (the SDK resolves none) and port 0 (a port /metrics cannot find)', () => {
    expect(errorOf([], { TEMPORAL_METRICS_ADDR: 'localhost:9190' })).toBe(
      'TEMPORAL_METRICS_ADDR: the host must be an IP address (the Temporal SDK does not resolve names), got "localhost:9190"',
    );
    for (const v of ['127.0.0.1:0', ':0', '0.0.0.0:0']) {
      expect(errorOf([], { TEMPORAL_METRICS_ADDR: v })).toBe(
        `TEMPORAL_METRICS_ADDR: port 0 would bind a port the operator cannot merge into /metrics; leave it empty for a free loopback port, got "${v}"`,
      );
    }
    expect(load([], { TEMPORAL_METRICS_ADDR: '[::1]:9190' }).temporal.metricsAddr).toEqual({
      host: '::1',
      port: 9190,
    });
    expect(load([], { TEMPORAL_METRICS_ADDR: ':9190' }).temporal.metricsAddr).toEqual({
      host: undefined,
      port: 9190,
    });
  });

  it('TEMPORAL_METRICS_ADDR empty: a free loopback port merged into /metrics, off when METRICS_ADDR is 0', () => {
    expect(load().temporal.metricsAddr).toBe('auto');
    expect(load([], { METRICS_ADDR: '0' }).temporal.metricsAddr).toBeNull();
    expect(
      load([], { METRICS_ADDR: '0', TEMPORAL_METRICS_ADDR: '127.0.0.1:9464' }).temporal.metricsAddr,
    ).toEqual({
      host: '127.0.0.1',
      port: 9464,
    });
  });

  it.each(['7233', ':7233', 'host:0', 'http://host:7233'])('rejects TEMPORAL_ADDRESS=%s', (v) => {
    expect(errorOf([], { TEMPORAL_ADDRESS: v })).toBe(`TEMPORAL_ADDRESS: must be host:port, got "${v}"`);
  });

  it('rejects a non-boolean LEADER_ELECT and TEMPORAL_TLS', () => {
    expect(errorOf([], { LEADER_ELECT: 'yes' })).toBe('LEADER_ELECT: must be true or false, got "yes"');
    expect(errorOf(['--leader-elect=maybe'])).toBe('--leader-elect: must be true or false, got "maybe"');
    expect(errorOf([], { TEMPORAL_TLS: 'on' })).toBe('TEMPORAL_TLS: must be true or false, got "on"');
  });

  it('rejects an unknown log level', () => {
    expect(errorOf([], { OPERATOR_LOG_LEVEL: 'verbose' })).toBe(
      'OPERATOR_LOG_LEVEL: must be one of trace, debug, info, warn, error, fatal, panic, disabled, got "verbose"',
    );
  });

  it('rejects an unknown mode and a bad grace period', () => {
    expect(errorOf(['--mode=both'])).toBe('--mode: must be all, worker or watcher, got "both"');
    expect(errorOf([], { SHUTDOWN_GRACE_PERIOD: '30' })).toBe(
      'SHUTDOWN_GRACE_PERIOD: must be a duration like 30s, 500ms or 2m, got "30"',
    );
  });

  it('rejects namespaces that are not RFC 1123 labels', () => {
    expect(errorOf([], { WATCH_NAMESPACE: 'Team_A' })).toBe(
      'WATCH_NAMESPACE: must be a Kubernetes namespace name (RFC 1123 label), got "Team_A"',
    );
    expect(errorOf([], { LEADER_ELECTION_NAMESPACE: '-x' })).toMatch(
      /^LEADER_ELECTION_NAMESPACE: must be a Kubernetes/,
    );
    expect(errorOf([], { POD_NAMESPACE: 'UPPER' })).toMatch(/^POD_NAMESPACE: must be a Kubernetes/);
  });

  it('rejects blank Temporal names', () => {
    expect(errorOf(['--temporal-namespace='])).toBe('--temporal-namespace: must be a non-empty name, got ""');
    expect(errorOf([], { TEMPORAL_TASK_QUEUE: ' q ' })).toBe(
      'TEMPORAL_TASK_QUEUE: must be a non-empty name, got " q "',
    );
  });

  it('rejects unreadable files and half a client certificate', () => {
    expect(errorOf([], { KUBECONFIG: join(dir, 'nope') })).toBe(
      `KUBECONFIG: cannot read file "${join(dir, 'nope')}" (ENOENT)`,
    );
    expect(errorOf([], { TEMPORAL_TLS_CA: join(dir, 'nope.pem') })).toBe(
      `TEMPORAL_TLS_CA: cannot read file "${join(dir, 'nope.pem')}" (ENOENT)`,
    );
    expect(errorOf([], { TEMPORAL_TLS_CERT: pem('C') })).toBe(
      'TEMPORAL_TLS_KEY: must be set when a client certificate is given',
    );
    expect(errorOf([], { TEMPORAL_TLS_KEY: pem('K') })).toBe(
      'TEMPORAL_TLS_CERT: must be set when a client key is given',
    );
    expect(errorOf([], { TEMPORAL_TLS: 'false', TEMPORAL_TLS_CA: pem('CA2') })).toBe(
      'TEMPORAL_TLS: is false but TLS files or a server name are given',
    );
  });

  it('rejects unknown flags, flags without a value and positional arguments', () => {
    expect(errorOf(['--no-such-flag=1'])).toBe('--no-such-flag: unknown flag');
    expect(errorOf(['-bogus'])).toBe('--bogus: unknown flag');
    expect(errorOf(['--oci-registry'])).toBe('--oci-registry: needs a value (--flag=value)');
    expect(errorOf(['worker'])).toBe(
      'arguments: unexpected argument "worker" (flags take the form --name=value)',
    );
  });
});
