/**
 * Process settings: environment variables seed the defaults, command-line flags override them, and every
 * value is validated before anything starts (docs/configuration.md,
 * docs/architecture.md#the-concurrency-knob). A bad or missing value becomes a {@link ConfigError} whose
 * message is one line naming the setting.
 *
 * Deliberate deviations from the Go operator, each for a reason:
 * - Concurrency values that are not integers are rejected (the reference silently falls back to 4).
 * - `LEADER_ELECT` values that are not booleans are rejected (the reference silently treats them as true).
 * - `OPERATOR_LOG_LEVEL` accepts zerolog's names (`panic` maps to pino `fatal`, `disabled` to `silent`).
 * - `OCI_REGISTRY` is checked for shape (no scheme, no trailing slash), not only for emptiness, because the
 *   reference accepts a malformed value and then fails every registry call.
 * - Leader election outside a pod: the reference fails with "unable to find leader election namespace";
 *   here the namespace comes from `LEADER_ELECTION_NAMESPACE`, else `POD_NAMESPACE`, else the in-cluster
 *   service-account namespace file, else `default` (the worker logs a warning in that last case), so the
 *   operator also runs from a laptop against a remote cluster.
 */
import { accessSync, constants, readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { parseArgs } from 'node:util';

/** A configuration problem; `message` is a single line that starts with the setting's name. */
export class ConfigError extends Error {
  override name = 'ConfigError';
  /** The env variable or flag the message names. */
  readonly setting: string;
  constructor(setting: string, problem: string) {
    super(`${setting}: ${problem}`);
    this.setting = setting;
  }
}

/** Which parts of the process run (`--mode`). */
export type Mode = 'all' | 'worker' | 'watcher';

/** pino level names (what `OPERATOR_LOG_LEVEL` resolves to). */
export type LogLevelName = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'silent';

/** How log lines are written (`LOG_FORMAT`). */
export type LogFormat = 'json' | 'pretty';

/** A TCP listen address; `host` is undefined for `:port` (all interfaces). `port` 0 = ephemeral. */
export interface ListenAddress {
  host: string | undefined;
  port: number;
}

/** TLS material for the Temporal connection, already read from disk. */
export interface TemporalTls {
  serverRootCACertificate?: Buffer;
  clientCertPair?: { crt: Buffer; key: Buffer };
  serverNameOverride?: string;
}

/** The validated settings of one operator process. */
export interface Config {
  /** Explicit kubeconfig path (`--kubeconfig`/`KUBECONFIG`); undefined → in-cluster, then ~/.kube/config. */
  kubeconfig: string | undefined;
  /** `host[:port][/path]` of the OCI registry that holds the VM snapshots. */
  ociRegistry: string;
  temporal: {
    address: string;
    namespace: string;
    /** Base task queue; the derived queues come from taskQueues() in src/api/ids.ts. */
    taskQueue: string;
    /** undefined = plain connection (or the SDK's default TLS when an API key is set). */
    tls: TemporalTls | true | undefined;
    apiKey: string | undefined;
    /**
     * Where the SDK's own Prometheus exporter listens; 'auto' = a free loopback port, merged into /metrics;
     * null = off (also when TEMPORAL_METRICS_ADDR is empty and METRICS_ADDR is 0: nothing to merge into).
     */
    metricsAddr: ListenAddress | 'auto' | null;
  };
  /** Activity slots of the CocoonSet registry task queue (≥ 1). */
  cocoonSetConcurrency: number;
  /** Activity slots of the hibernation registry task queue (≥ 1). */
  hibernationConcurrency: number;
  /**
   * Workflows the workflow worker keeps in memory (the SDK's `maxCachedWorkflows`); ≥ 2, 'auto' =
   * the SDK's default, sized from the V8 heap limit.
   */
  workflowCacheSize: number | 'auto';
  /** `/metrics` listener; null = disabled (`0`). */
  metricsAddr: ListenAddress | null;
  /** `/healthz` + `/readyz` listener; null = disabled (`0` or an empty flag). */
  probeAddr: ListenAddress | null;
  leaderElect: boolean;
  leaderElectionNamespace: string;
  /** Where leaderElectionNamespace came from; 'fallback' means nothing named one and `default` is used. */
  leaderElectionNamespaceSource: 'setting' | 'POD_NAMESPACE' | 'serviceaccount' | 'fallback';
  /** Namespace the watcher is limited to; '' = all namespaces. */
  watchNamespace: string;
  logLevel: LogLevelName;
  /** `json`: one JSON object per line (the default); `pretty`: human-readable lines for a terminal. */
  logFormat: LogFormat;
  /** Base URL of the Temporal Web UI, without a trailing slash; undefined = no UI links. */
  temporalUiUrl: string | undefined;
  mode: Mode;
  /** How long in-flight activities may run after SIGTERM before they are cancelled, in milliseconds. */
  shutdownGraceMs: number;
  /**
   * The SDK records a stack at every promise workflow code creates (the Temporal UI's Stack Trace tab);
   * off, the workflow threads skip it (src/workflow-thread-preload.cjs).
   */
  workflowStackTraces: boolean;
}

/** One row of the settings table (docs/configuration.md and the compose tests check against it). */
export interface SettingSpec {
  env: string;
  flag: string;
  default?: string;
  required: boolean;
  description: string;
}

/** Where the in-cluster service-account namespace lives (client-go's rule). */
export const SERVICE_ACCOUNT_NAMESPACE_FILE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace';

/**
 * Every setting of the process, in display order. `flag` is the long flag name with its dashes; the env
 * value seeds the flag's default; an empty env value counts as unset.
 */
export const ENV_SETTINGS: SettingSpec[] = [
  {
    env: 'OCI_REGISTRY',
    flag: '--oci-registry',
    required: true,
    description: 'OCI registry holding VM snapshots, host[:port][/path] without scheme, e.g. 127.0.0.1:5000',
  },
  {
    env: 'KUBECONFIG',
    flag: '--kubeconfig',
    required: false,
    description: 'kubeconfig file; unset = in-cluster config, then ~/.kube/config',
  },
  {
    env: 'WATCH_NAMESPACE',
    flag: '--watch-namespace',
    default: '',
    required: false,
    description: 'namespace the watcher is limited to; empty = all namespaces',
  },
  {
    env: 'TEMPORAL_ADDRESS',
    flag: '--temporal-address',
    default: '127.0.0.1:7233',
    required: false,
    description: 'Temporal frontend host:port',
  },
  {
    env: 'TEMPORAL_NAMESPACE',
    flag: '--temporal-namespace',
    default: 'default',
    required: false,
    description: 'Temporal namespace',
  },
  {
    env: 'TEMPORAL_TASK_QUEUE',
    flag: '--temporal-task-queue',
    default: 'cocoon-operator',
    required: false,
    description:
      'base task queue; registry activities use <base>-hibernation-registry and <base>-cocoonset-registry',
  },
  {
    env: 'TEMPORAL_TLS',
    flag: '--temporal-tls',
    required: false,
    description: 'true/false; unset = TLS when a CA, client certificate or API key is given',
  },
  {
    env: 'TEMPORAL_TLS_CA',
    flag: '--temporal-tls-ca',
    required: false,
    description: 'PEM file with the CA that signs the Temporal server certificate (default: system roots)',
  },
  {
    env: 'TEMPORAL_TLS_CERT',
    flag: '--temporal-tls-cert',
    required: false,
    description: 'PEM client certificate for mTLS (needs TEMPORAL_TLS_KEY)',
  },
  {
    env: 'TEMPORAL_TLS_KEY',
    flag: '--temporal-tls-key',
    required: false,
    description: 'PEM private key of the mTLS client certificate (needs TEMPORAL_TLS_CERT)',
  },
  {
    env: 'TEMPORAL_TLS_SERVER_NAME',
    flag: '--temporal-tls-server-name',
    required: false,
    description: 'override of the server name checked against the Temporal server certificate',
  },
  {
    env: 'TEMPORAL_API_KEY',
    flag: '--temporal-api-key',
    required: false,
    description: 'Temporal Cloud API key (sent as a bearer token; turns TLS on)',
  },
  {
    env: 'TEMPORAL_UI_URL',
    flag: '--temporal-ui-url',
    required: false,
    description:
      'base URL of the Temporal Web UI, e.g. http://127.0.0.1:8233; set = each CR gets an annotation linking its workflow',
  },
  {
    env: 'TEMPORAL_METRICS_ADDR',
    flag: '--temporal-metrics-bind-address',
    default: '',
    required: false,
    description:
      'where the Temporal SDK serves its own Prometheus metrics (an IP address and a port); empty = a free loopback port, merged into /metrics (off when METRICS_ADDR is 0); 0 = off',
  },
  {
    env: 'COCOONSET_CONCURRENCY',
    flag: '--cocoonset-concurrency',
    default: '4',
    required: false,
    description: 'concurrent registry activities of the CocoonSet controller (integer ≥ 1)',
  },
  {
    env: 'HIBERNATION_CONCURRENCY',
    flag: '--hibernation-concurrency',
    default: '4',
    required: false,
    description: 'concurrent registry activities of the hibernation controller (integer ≥ 1)',
  },
  {
    env: 'WORKFLOW_CACHE_SIZE',
    flag: '--workflow-cache-size',
    // 150: with 1000 VMs hibernated and woken at once, the image's peak stays under 250 MiB
    // (docs/performance.md#a-cache-of-150-session-37).
    default: '150',
    required: false,
    description:
      "workflows kept in the worker's memory between tasks (integer ≥ 2); auto = the Temporal SDK's default, from the V8 heap limit",
  },
  {
    env: 'METRICS_ADDR',
    flag: '--metrics-bind-address',
    default: ':8080',
    required: false,
    description: '[host]:port of the /metrics listener; 0 = off',
  },
  {
    env: 'PROBE_ADDR',
    flag: '--health-probe-bind-address',
    default: ':8081',
    required: false,
    description: '[host]:port of the /healthz and /readyz listener; 0 = off',
  },
  {
    env: 'LEADER_ELECT',
    flag: '--leader-elect',
    default: 'true',
    required: false,
    description: 'elect one watcher through a coordination.k8s.io Lease (true/false)',
  },
  {
    env: 'LEADER_ELECTION_NAMESPACE',
    flag: '--leader-election-namespace',
    required: false,
    description:
      'namespace of the Lease; unset = POD_NAMESPACE, else the service-account namespace, else default',
  },
  {
    env: 'OPERATOR_LOG_LEVEL',
    flag: '--log-level',
    default: 'info',
    required: false,
    description: 'trace, debug, info, warn, error, fatal, panic or disabled',
  },
  {
    env: 'LOG_FORMAT',
    flag: '--log-format',
    default: 'json',
    required: false,
    description: 'json = one JSON object per line; pretty = human-readable lines (npm run dev sets it)',
  },
  {
    env: 'OPERATOR_MODE',
    flag: '--mode',
    default: 'all',
    required: false,
    description: 'all = worker and watcher; worker = Temporal workers only; watcher = watcher only',
  },
  {
    env: 'SHUTDOWN_GRACE_PERIOD',
    flag: '--shutdown-grace-period',
    default: '30s',
    required: false,
    description: 'time in-flight activities get after SIGTERM, e.g. 30s, 500ms, 2m',
  },
  {
    env: 'WORKFLOW_STACK_TRACES',
    flag: '--workflow-stack-traces',
    default: 'false',
    required: false,
    description:
      'record workflow stack traces for the Temporal UI and `temporal workflow stack` (true/false; costs about half the workflow CPU)',
  },
];

const BOOLEAN_FLAGS = new Set(['--leader-elect', '--temporal-tls', '--workflow-stack-traces']);

/** Raw value of one setting and the name to blame when it is bad (the flag if given, else the env). */
interface Raw {
  value: string | undefined;
  source: string;
}

function spec(env: string): SettingSpec {
  const s = ENV_SETTINGS.find((x) => x.env === env);
  if (!s) throw new Error(`unknown setting ${env}`);
  return s;
}

/**
 * Go's flag package accepts `-name` as well as `--name`, and bare booleans; node's parseArgs does not.
 * Rewrites `-long-name[=v]` to `--long-name[=v]` and a bare boolean flag to `--flag=true`.
 */
function normalizeArgv(argv: string[]): string[] {
  return argv.map((arg) => {
    let a = arg;
    if (/^-[a-z][a-z-]+(=|$)/.test(a)) a = `-${a}`;
    if (BOOLEAN_FLAGS.has(a)) a = `${a}=true`;
    return a;
  });
}

function parseFlags(argv: string[]): { flags: Map<string, string>; help: boolean } {
  const options: Record<string, { type: 'string' } | { type: 'boolean'; short?: string }> = {};
  for (const s of ENV_SETTINGS) options[s.flag.slice(2)] = { type: 'string' };
  options.help = { type: 'boolean', short: 'h' };
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({ args: normalizeArgv(argv), options, strict: true, allowPositionals: true });
  } catch (err) {
    const msg = (err as Error).message;
    const m = /'(-[^' ]+)/.exec(msg);
    const name = m?.[1]?.replace(/^-([a-z]{2,})/, '--$1') ?? 'flags';
    if (/Unknown option/.test(msg)) throw new ConfigError(name, 'unknown flag');
    if (/argument missing/.test(msg)) throw new ConfigError(name, 'needs a value (--flag=value)');
    throw new ConfigError(name, msg.split('\n')[0]!);
  }
  if (parsed.positionals.length > 0) {
    throw new ConfigError(
      'arguments',
      `unexpected argument "${parsed.positionals[0]}" (flags take the form --name=value)`,
    );
  }
  const flags = new Map<string, string>();
  for (const [k, v] of Object.entries(parsed.values)) {
    if (k !== 'help' && typeof v === 'string') flags.set(`--${k}`, v);
  }
  return { flags, help: parsed.values.help === true };
}

/** Renders the settings table for `--help`. */
export function usage(): string {
  const lines = ['Usage: cocoon-operator [flags]   (each flag defaults to its environment variable)', ''];
  for (const s of ENV_SETTINGS) {
    const def = s.required
      ? ' (required)'
      : s.default !== undefined && s.default !== ''
        ? ` (default ${s.default})`
        : '';
    lines.push(`  ${s.flag.padEnd(34)} ${s.env.padEnd(26)} ${s.description}${def}`);
  }
  return lines.join('\n');
}

/** Thrown by loadConfig for `--help`/`-h`: the caller prints `usage()` and exits 0. */
export class HelpRequested extends Error {
  override name = 'HelpRequested';
}

const HOST_PORT = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]*)):(\d{1,5})$/;

function parseListen(raw: Raw, allowDisable: boolean): ListenAddress | null {
  const v = raw.value ?? '';
  if (allowDisable && v === '0') return null;
  const m = HOST_PORT.exec(v);
  const port = m ? Number(m[3]) : Number.NaN;
  if (!m || port > 65535) {
    throw new ConfigError(
      raw.source,
      `must be [host]:port${allowDisable ? ' or 0 to disable' : ''}, got "${v}"`,
    );
  }
  const host = m[1] ?? m[2];
  return { host: host === '' ? undefined : host, port };
}

/**
 * TEMPORAL_METRICS_ADDR: empty → 'auto' (a free loopback port), `0` → null (off), else `[ip]:port`. The
 * Temporal SDK binds a socket address as given: it resolves no host name (`localhost` crashed its start),
 * and port 0 would bind a port this process cannot learn, so its metrics would silently drop out of
 * /metrics; both are refused here.
 */
function parseTemporalMetricsAddr(raw: Raw): ListenAddress | 'auto' | null {
  if (raw.value === '' || raw.value === undefined) return 'auto';
  const addr = parseListen(raw, true);
  if (addr?.host !== undefined && isIP(addr.host) === 0) {
    throw new ConfigError(
      raw.source,
      `the host must be an IP address (the Temporal SDK does not resolve names), got "${raw.value}"`,
    );
  }
  if (addr?.port === 0) {
    throw new ConfigError(
      raw.source,
      `port 0 would bind a port the operator cannot merge into /metrics; leave it empty for a free loopback port, got "${raw.value}"`,
    );
  }
  return addr;
}

function parseConcurrency(raw: Raw, what: string): number {
  const v = (raw.value ?? '').trim();
  if (!/^[+-]?\d+$/.test(v))
    throw new ConfigError(raw.source, `must be an integer ≥ 1, got "${raw.value ?? ''}"`);
  const n = Number(v);
  // The reference's wording (docs/configuration.md#startup-order), kept for the < 1 case.
  if (n < 1) throw new ConfigError(raw.source, `${what} concurrency must be at least 1, got ${n}`);
  if (!Number.isSafeInteger(n)) throw new ConfigError(raw.source, `must be an integer ≥ 1, got "${v}"`);
  return n;
}

function parseCacheSize(raw: Raw): number | 'auto' {
  const v = (raw.value ?? '').trim();
  if (v === 'auto') return 'auto';
  const n = /^\d+$/.test(v) ? Number(v) : Number.NaN;
  // The SDK turns 1 into 2 with a warning; say so at start instead. 0 (no cache) is refused too: the SDK
  // evicts a run while its local activities (all of this operator's Kubernetes I/O) are in flight, drops
  // or retries them, and logs "This is an SDK bug"; each such task then times out (10 s) before it is
  // retried.
  if (!Number.isSafeInteger(n) || n < 2) {
    throw new ConfigError(raw.source, `must be auto or an integer ≥ 2, got "${raw.value ?? ''}"`);
  }
  return n;
}

function parseBool(raw: Raw): boolean {
  const v = raw.value ?? '';
  // strconv.ParseBool's accepted spellings.
  if (['1', 't', 'T', 'TRUE', 'true', 'True'].includes(v)) return true;
  if (['0', 'f', 'F', 'FALSE', 'false', 'False'].includes(v)) return false;
  throw new ConfigError(raw.source, `must be true or false, got "${v}"`);
}

const LOG_LEVELS: Record<string, LogLevelName> = {
  trace: 'trace',
  debug: 'debug',
  info: 'info',
  warn: 'warn',
  error: 'error',
  fatal: 'fatal',
  panic: 'fatal',
  disabled: 'silent',
};

function parseLogLevel(raw: Raw): LogLevelName {
  const v = raw.value ?? '';
  const level = LOG_LEVELS[v.toLowerCase()];
  if (!level) {
    throw new ConfigError(
      raw.source,
      `must be one of trace, debug, info, warn, error, fatal, panic, disabled, got "${v}"`,
    );
  }
  return level;
}

function parseLogFormat(raw: Raw): LogFormat {
  const v = raw.value ?? '';
  if (v !== 'json' && v !== 'pretty') throw new ConfigError(raw.source, `must be json or pretty, got "${v}"`);
  return v;
}

/** An http(s) URL without query or fragment; returned without its trailing slashes. */
function parseBaseUrl(raw: Raw): string {
  const v = raw.value ?? '';
  let url: URL;
  try {
    url = new URL(v);
  } catch {
    throw new ConfigError(raw.source, `must be an http(s) URL, got "${v}"`);
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.search || url.hash) {
    throw new ConfigError(raw.source, `must be an http(s) URL without query or fragment, got "${v}"`);
  }
  return v.replace(/\/+$/, '');
}

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

function parseDuration(raw: Raw): number {
  const v = raw.value ?? '';
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(v);
  if (!m) throw new ConfigError(raw.source, `must be a duration like 30s, 500ms or 2m, got "${v}"`);
  return Math.round(Number(m[1]) * DURATION_UNITS[m[2]!]!);
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

function parseNamespace(raw: Raw, allowEmpty: boolean): string {
  const v = raw.value ?? '';
  if (v === '' && allowEmpty) return '';
  if (v.length > 63 || !DNS_LABEL.test(v)) {
    throw new ConfigError(raw.source, `must be a Kubernetes namespace name (RFC 1123 label), got "${v}"`);
  }
  return v;
}

function parseNonEmpty(raw: Raw): string {
  const v = raw.value ?? '';
  if (v.trim() === '' || v !== v.trim())
    throw new ConfigError(raw.source, `must be a non-empty name, got "${v}"`);
  return v;
}

// host (DNS name, IPv4 or [IPv6]) with optional port, then optional lowercase repository path segments.
const OCI_REGISTRY =
  /^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$/;

function parseRegistry(raw: Raw): string {
  const v = raw.value;
  if (v === undefined || v === '')
    throw new ConfigError(raw.source, 'must be set (host[:port][/path] of the OCI registry)');
  if (!OCI_REGISTRY.test(v)) {
    throw new ConfigError(
      raw.source,
      `must be host[:port][/path] without scheme or trailing slash, got "${v}"`,
    );
  }
  return v;
}

function parseTemporalAddress(raw: Raw): string {
  const v = raw.value ?? '';
  const m = HOST_PORT.exec(v);
  if (!m || (m[1] ?? m[2]) === '' || Number(m[3]) > 65535 || Number(m[3]) === 0) {
    throw new ConfigError(raw.source, `must be host:port, got "${v}"`);
  }
  return v;
}

function readPem(raw: Raw): Buffer {
  const path = raw.value!;
  try {
    return readFileSync(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new ConfigError(raw.source, `cannot read file "${path}" (${code})`);
  }
}

function checkReadable(raw: Raw): void {
  try {
    accessSync(raw.value!, constants.R_OK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new ConfigError(raw.source, `cannot read file "${raw.value}" (${code})`);
  }
}

function readServiceAccountNamespace(file: string): string | undefined {
  try {
    const ns = readFileSync(file, 'utf8').trim();
    return ns === '' ? undefined : ns;
  } catch {
    return undefined;
  }
}

/** Options for {@link loadConfig}; tests point the service-account file elsewhere. */
export interface LoadConfigOptions {
  serviceAccountNamespaceFile?: string;
}

/**
 * Resolves and validates every setting. `argv` excludes node and the script (process.argv.slice(2)).
 * A flag wins over its env variable; an empty env variable counts as unset. Reads the TLS files and, for
 * the Lease namespace fallback, the service-account namespace file.
 *
 * @throws ConfigError on the first bad or missing value (one line naming the flag or env variable).
 * @throws HelpRequested for `--help`/`-h`.
 */
export function loadConfig(argv: string[], env: NodeJS.ProcessEnv, opts: LoadConfigOptions = {}): Config {
  const { flags, help } = parseFlags(argv);
  if (help) throw new HelpRequested(usage());

  const get = (envName: string): Raw => {
    const s = spec(envName);
    if (flags.has(s.flag)) return { value: flags.get(s.flag), source: s.flag };
    const e = env[envName];
    if (e !== undefined && e !== '') return { value: e, source: envName };
    return { value: s.default, source: envName };
  };
  const optional = (envName: string): Raw | undefined => {
    const r = get(envName);
    return r.value === undefined || r.value === '' ? undefined : r;
  };

  const ociRegistry = parseRegistry(get('OCI_REGISTRY'));
  const kcRaw = optional('KUBECONFIG');
  // KUBECONFIG may be a path list; like client-node, only the first file is used.
  const kubeconfig = kcRaw?.value?.split(':')[0] || undefined;
  if (kcRaw && kubeconfig) checkReadable({ value: kubeconfig, source: kcRaw.source });
  const watchNamespace = parseNamespace(get('WATCH_NAMESPACE'), true);

  const address = parseTemporalAddress(get('TEMPORAL_ADDRESS'));
  const namespace = parseNonEmpty(get('TEMPORAL_NAMESPACE'));
  const taskQueue = parseNonEmpty(get('TEMPORAL_TASK_QUEUE'));
  const tlsRaw = optional('TEMPORAL_TLS');
  const tlsOn = tlsRaw ? parseBool(tlsRaw) : undefined;
  const caRaw = optional('TEMPORAL_TLS_CA');
  const certRaw = optional('TEMPORAL_TLS_CERT');
  const keyRaw = optional('TEMPORAL_TLS_KEY');
  const serverName = optional('TEMPORAL_TLS_SERVER_NAME')?.value;
  const apiKey = optional('TEMPORAL_API_KEY')?.value;
  if (certRaw && !keyRaw)
    throw new ConfigError(get('TEMPORAL_TLS_KEY').source, 'must be set when a client certificate is given');
  if (keyRaw && !certRaw)
    throw new ConfigError(get('TEMPORAL_TLS_CERT').source, 'must be set when a client key is given');
  const tlsMaterial: TemporalTls = {};
  if (caRaw) tlsMaterial.serverRootCACertificate = readPem(caRaw);
  if (certRaw && keyRaw) tlsMaterial.clientCertPair = { crt: readPem(certRaw), key: readPem(keyRaw) };
  if (serverName) tlsMaterial.serverNameOverride = serverName;
  const hasMaterial = Object.keys(tlsMaterial).length > 0;
  if (tlsOn === false && hasMaterial) {
    throw new ConfigError(tlsRaw!.source, 'is false but TLS files or a server name are given');
  }
  let tls: TemporalTls | true | undefined;
  if (hasMaterial) tls = tlsMaterial;
  else if (tlsOn === true || (tlsOn === undefined && apiKey !== undefined)) tls = true;

  const temporalMetricsAddr = parseTemporalMetricsAddr(get('TEMPORAL_METRICS_ADDR'));

  const cocoonSetConcurrency = parseConcurrency(get('COCOONSET_CONCURRENCY'), 'cocoonset');
  const hibernationConcurrency = parseConcurrency(get('HIBERNATION_CONCURRENCY'), 'hibernation');
  const workflowCacheSize = parseCacheSize(get('WORKFLOW_CACHE_SIZE'));

  const metricsAddr = parseListen(get('METRICS_ADDR'), true);
  const probeRaw = get('PROBE_ADDR');
  // controller-runtime: an empty probe address (possible only as an explicit flag) disables the listener.
  const probeAddr = probeRaw.value === '' ? null : parseListen(probeRaw, true);

  const leaderElect = parseBool(get('LEADER_ELECT'));
  let leaderElectionNamespace: string;
  let leaderElectionNamespaceSource: Config['leaderElectionNamespaceSource'];
  const lenRaw = optional('LEADER_ELECTION_NAMESPACE');
  const saNamespace = () =>
    readServiceAccountNamespace(opts.serviceAccountNamespaceFile ?? SERVICE_ACCOUNT_NAMESPACE_FILE);
  if (lenRaw) {
    leaderElectionNamespace = parseNamespace(lenRaw, false);
    leaderElectionNamespaceSource = 'setting';
  } else if (env.POD_NAMESPACE) {
    leaderElectionNamespace = parseNamespace({ value: env.POD_NAMESPACE, source: 'POD_NAMESPACE' }, false);
    leaderElectionNamespaceSource = 'POD_NAMESPACE';
  } else {
    const sa = saNamespace();
    leaderElectionNamespace = sa ?? 'default';
    leaderElectionNamespaceSource = sa ? 'serviceaccount' : 'fallback';
  }

  const logLevel = parseLogLevel(get('OPERATOR_LOG_LEVEL'));
  const logFormat = parseLogFormat(get('LOG_FORMAT'));
  const uiRaw = optional('TEMPORAL_UI_URL');
  const temporalUiUrl = uiRaw ? parseBaseUrl(uiRaw) : undefined;
  const modeRaw = get('OPERATOR_MODE');
  if (!['all', 'worker', 'watcher'].includes(modeRaw.value ?? '')) {
    throw new ConfigError(modeRaw.source, `must be all, worker or watcher, got "${modeRaw.value ?? ''}"`);
  }
  const mode = modeRaw.value as Mode;
  const shutdownGraceMs = parseDuration(get('SHUTDOWN_GRACE_PERIOD'));
  const workflowStackTraces = parseBool(get('WORKFLOW_STACK_TRACES'));

  return {
    kubeconfig,
    ociRegistry,
    temporal: {
      address,
      namespace,
      taskQueue,
      tls,
      apiKey,
      metricsAddr: temporalMetricsAddr === 'auto' && metricsAddr === null ? null : temporalMetricsAddr,
    },
    cocoonSetConcurrency,
    hibernationConcurrency,
    workflowCacheSize,
    metricsAddr,
    probeAddr,
    leaderElect,
    leaderElectionNamespace,
    leaderElectionNamespaceSource,
    watchNamespace,
    logLevel,
    logFormat,
    temporalUiUrl,
    mode,
    shutdownGraceMs,
    workflowStackTraces,
  };
}

/** `host:port` for logs and URLs (`:8080` → `0.0.0.0:8080`). */
export function formatListen(a: ListenAddress): string {
  const host = a.host ?? '0.0.0.0';
  return host.includes(':') ? `[${host}]:${a.port}` : `${host}:${a.port}`;
}
