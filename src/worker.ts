/**
 * The operator process (docs/architecture.md#the-picture, docs/configuration.md#startup-order): validated
 * settings, one pino logger (the Temporal runtime routed into it), the Temporal workers, the leader-elected
 * watcher and the HTTP endpoints. `npm start` runs it; `--mode=worker|watcher` runs one half only.
 *
 * Exit codes: 0 after a graceful SIGTERM/SIGINT; 2 for a bad or missing setting, or a Temporal namespace
 * the operator cannot use (unknown, or lacking search attributes it may not register) (one line on stderr,
 * no stack); 1 for any other startup or runtime failure (a fatal JSON log line).
 */
import { createServer } from 'node:net';
import { totalmem } from 'node:os';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { getHeapStatistics } from 'node:v8';
import type { NativeConnection, Runtime, RuntimeOptions, Worker } from '@temporalio/worker';
import {
  type Config,
  ConfigError,
  formatListen,
  HelpRequested,
  type ListenAddress,
  loadConfig,
} from './config.js';
import type { HttpServers, ReadyCheck } from './http.js';
import { OwnWrites } from './kube/own-writes.js';
import type { LeaderElector } from './leader.js';
import type { Logger } from './log.js';
import type { startWatcher } from './watcher/index.js';
import { ownCompletionBytes, ownsCompletionBytes } from './workflow-completions.js';
import { configureWorkflowStackTraces } from './workflow-threads.js';

/**
 * Everything heavy, loaded only after the settings are valid, so a bad setting fails in well under a
 * second instead of after loading the Temporal SDK and the Kubernetes client.
 */
async function loadModules() {
  const [
    client,
    worker,
    prom,
    activities,
    ids,
    keys,
    http,
    kube,
    leader,
    log,
    metrics,
    registry,
    searchAttributes,
    watcher,
    workflowCode,
  ] = await Promise.all([
    import('@temporalio/client'),
    import('@temporalio/worker'),
    import('prom-client'),
    import('./activities/index.js'),
    import('./api/ids.js'),
    import('./api/keys.js'),
    import('./http.js'),
    import('./kube/client.js'),
    import('./leader.js'),
    import('./log.js'),
    import('./metrics.js'),
    import('./registry/client.js'),
    import('./search-attributes.js'),
    import('./watcher/index.js'),
    import('./workflow-code.js'),
  ]);
  return {
    Client: client.Client,
    NativeConnection: worker.NativeConnection,
    Runtime: worker.Runtime,
    Worker: worker.Worker,
    Gauge: prom.Gauge,
    createKubeActivities: activities.createKubeActivities,
    createCocoonSetActivities: activities.createCocoonSetActivities,
    createRegistryActivities: activities.createRegistryActivities,
    heartbeatWhileRunning: activities.heartbeatWhileRunning,
    taskQueues: ids.taskQueues,
    LEADER_ELECTION_ID: keys.LEADER_ELECTION_ID,
    scrapeText: http.scrapeText,
    startHttp: http.startHttp,
    loadKubeConfig: kube.loadKubeConfig,
    makeKubeClients: kube.makeKubeClients,
    defaultIdentity: leader.defaultIdentity,
    kubeLeaseStore: leader.kubeLeaseStore,
    LeaderElector: leader.LeaderElector,
    temporalLevelFor: log.temporalLevelFor,
    temporalLogger: log.temporalLogger,
    createMetricsRegistry: metrics.createMetricsRegistry,
    registerWatcherSyncedGauge: metrics.registerWatcherSyncedGauge,
    OCIRegistryClient: registry.OCIRegistryClient,
    ensureSearchAttributes: searchAttributes.ensureSearchAttributes,
    startWatcher: watcher.startWatcher,
    workflowBundleFor: workflowCode.workflowBundleFor,
  };
}

const HERE = dirname(fileURLToPath(import.meta.url));
/** The process version line (docs/configuration.md#startup-order); set by the image build. */
export const VERSION = process.env.COCOON_OPERATOR_VERSION ?? 'dev';
/** How long a graceful shutdown may take beyond the activity grace period before the process gives up. */
const SHUTDOWN_SLACK_MS = 5_000;
/**
 * How long a workflow task waits on the sticky queue of the worker that last ran the workflow before the
 * server hands it to any worker of the task queue (the SDK's default is 10 s). A worker killed with -9 never
 * says it is gone, so each of its workflows' next task (an activity's result, a signal) waited that long;
 * with 3 s a transition resumes on the new worker within seconds. A live worker takes its sticky tasks
 * within milliseconds; under a burst (1000 desire edits in 5 s) most wait longer and move to the shared
 * queue with their whole history, which measured cheaper than waiting for them with 30 s
 * (docs/performance.md#shared-workflow-modules-shipped).
 */
const STICKY_QUEUE_TIMEOUT = '3s';
/** Bound of one Temporal health check done for /readyz. */
const TEMPORAL_HEALTH_TIMEOUT_MS = 2_000;
/** Wait between attempts to reach Temporal at startup. */
const TEMPORAL_CONNECT_RETRY_MS = 2_000;

type Watcher = Awaited<ReturnType<typeof startWatcher>>;

/**
 * The process's memory limit in MiB (its cgroup's, e.g. a container's `resources.limits.memory`), or
 * `undefined` when it has none below the machine's memory (Node's `process.constrainedMemory()`).
 */
function memoryLimitMiB(): number | undefined {
  const limit = process.constrainedMemory();
  return limit > 0 && limit < totalmem() ? Math.round(limit / 2 ** 20) : undefined;
}

/** A free TCP port on 127.0.0.1 (for the SDK's Prometheus exporter when none is configured). */
function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** Attempts at a free port for the SDK's exporter (`TEMPORAL_METRICS_ADDR` empty) before startup fails. */
const AUTO_METRICS_PORT_ATTEMPTS = 5;

/**
 * Installs the Temporal runtime (`runtime.install(options)`; `runtime` is the SDK's `Runtime`) with the
 * SDK's Prometheus exporter at `cfg` (null: none), and returns the address the exporter listens on. 'auto'
 * takes a free loopback port; that port is closed again before the SDK binds it, so another socket can take
 * it meanwhile: a bind that fails with "Address already in use" is retried on a new port, 5 attempts in
 * all. Otherwise throws an Error naming TEMPORAL_METRICS_ADDR, the address and the SDK's message (a
 * configured address that is taken fails startup at once).
 */
export async function installRuntime(
  runtime: typeof Runtime,
  options: RuntimeOptions,
  cfg: Config['temporal']['metricsAddr'],
): Promise<ListenAddress | null> {
  if (cfg === null) {
    runtime.install(options);
    return null;
  }
  for (let attempt = 1; ; attempt++) {
    const addr = cfg === 'auto' ? { host: '127.0.0.1', port: await freeLoopbackPort() } : cfg;
    const telemetryOptions = {
      ...options.telemetryOptions,
      metrics: { prometheus: { bindAddress: formatListen(addr) } },
    };
    try {
      runtime.install({ ...options, telemetryOptions });
      return addr;
    } catch (err) {
      const message = (err as Error).message;
      const taken = /Address already in use/.test(message);
      if (cfg !== 'auto' || !taken || attempt >= AUTO_METRICS_PORT_ATTEMPTS) {
        const where =
          cfg === 'auto'
            ? `${formatListen(addr)} (a free loopback port, attempt ${attempt})`
            : formatListen(addr);
        throw new Error(`TEMPORAL_METRICS_ADDR ${where}: ${message}`);
      }
    }
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(t);
      resolve();
    });
  });
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/**
 * What a Temporal connect error says about the settings, for the retry warning; undefined when it may be
 * transient. `message`: the SDK's error text. TLS spoken to a plaintext server fails with rustls'
 * `InvalidContentType` (the dev server's answer to a TLS hello), which no retry fixes: the operator keeps
 * retrying (a crash loop would say no more) but names the setting.
 */
export function temporalConnectHint(message: string): string | undefined {
  if (/InvalidContentType/.test(message)) {
    return 'the server answered without TLS: unset TEMPORAL_TLS (and the TLS settings that imply it) or use its TLS address';
  }
  return undefined;
}

/**
 * Connects to Temporal, retrying every 2 s until it answers or `signal` aborts (then undefined); each failure
 * is logged at WARN, with `temporalConnectHint` when the settings are the cause.
 */
async function connectTemporal(
  Native: typeof NativeConnection,
  config: Config,
  log: Logger,
  signal: AbortSignal,
): Promise<NativeConnection | undefined> {
  const { address, tls, apiKey } = config.temporal;
  for (let attempt = 1; !signal.aborted; attempt++) {
    try {
      const conn = await Native.connect({ address, tls, apiKey });
      log.info(
        { address, namespace: config.temporal.namespace, tls: tls !== undefined },
        'connected to Temporal',
      );
      return conn;
    } catch (err) {
      const message = (err as Error).message;
      const hint = temporalConnectHint(message);
      log.warn(
        { address, attempt, err: message },
        hint ? `cannot reach Temporal: ${hint}; retrying` : 'cannot reach Temporal yet; retrying',
      );
      await sleep(TEMPORAL_CONNECT_RETRY_MS, signal);
    }
  }
  return undefined;
}

/** Everything that runs; filled in as startup proceeds so shutdown can stop what exists. */
interface Running {
  http?: HttpServers;
  connection?: NativeConnection;
  workers: Worker[];
  workerRuns: Promise<void>[];
  elector?: LeaderElector;
  watcher?: Watcher;
  /** Serializes watcher start/stop across leadership changes. */
  watcherOp: Promise<void>;
  workersReady: boolean;
}

/**
 * Runs the operator until SIGTERM/SIGINT. Resolves with the exit code: 0 after a graceful stop, 1 when a
 * worker failed or startup failed for a reason other than a setting.
 */
export async function run(config: Config, log: Logger): Promise<number> {
  const {
    Client,
    NativeConnection,
    Runtime,
    Worker,
    Gauge,
    createKubeActivities,
    createCocoonSetActivities,
    createRegistryActivities,
    heartbeatWhileRunning,
    taskQueues,
    LEADER_ELECTION_ID,
    scrapeText,
    startHttp,
    loadKubeConfig,
    makeKubeClients,
    defaultIdentity,
    kubeLeaseStore,
    LeaderElector,
    temporalLevelFor,
    temporalLogger,
    createMetricsRegistry,
    registerWatcherSyncedGauge,
    OCIRegistryClient,
    ensureSearchAttributes,
    startWatcher,
    workflowBundleFor,
  } = await loadModules();
  let kube: ReturnType<typeof makeKubeClients>;
  try {
    kube = makeKubeClients(loadKubeConfig(config.kubeconfig));
  } catch (err) {
    const why = (err as Error).message.split('\n')[0];
    throw new ConfigError(
      'KUBECONFIG',
      config.kubeconfig
        ? `cannot load kubeconfig "${config.kubeconfig}": ${why}`
        : `not set, and neither in-cluster config nor ~/.kube/config is usable: ${why}`,
    );
  }
  log.info(
    { version: VERSION, revision: process.env.COCOON_OPERATOR_REVISION ?? 'unknown' },
    `cocoon-operator ${VERSION} starting`,
  );
  if (config.leaderElect && config.mode !== 'worker' && config.leaderElectionNamespaceSource === 'fallback') {
    log.warn(
      { namespace: config.leaderElectionNamespace },
      'no LEADER_ELECTION_NAMESPACE, POD_NAMESPACE or service-account namespace; using "default" for the leader Lease',
    );
  }
  const stopping = new AbortController();
  const running: Running = { workers: [], workerRuns: [], watcherOp: Promise.resolve(), workersReady: false };
  let fatal: unknown;
  let resolveDone!: () => void;
  const done = new Promise<void>((r) => {
    resolveDone = r;
  });
  const onSignal = (sig: NodeJS.Signals) => {
    if (stopping.signal.aborted) return;
    log.info({ signal: sig }, 'shutdown requested');
    stopping.abort();
    resolveDone();
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);

  const runsWorker = config.mode !== 'watcher';
  const runsWatcher = config.mode !== 'worker';
  const queues = taskQueues(config.temporal.taskQueue);

  const { registry: metricsRegistry, metrics } = createMetricsRegistry();
  // Read by a person (LOG_FORMAT=pretty at info): only the workflows' info lines and the SDK's warnings and
  // errors show. An explicit debug/trace keeps them all.
  const quietSdk = config.logFormat === 'pretty' && config.logLevel === 'info';
  const temporalMetrics = await installRuntime(
    Runtime,
    {
      logger: temporalLogger(log.child({ component: 'temporal' }, { level: config.logLevel }), { quietSdk }),
      shutdownSignals: [], // this process orders its own shutdown (watcher, lease, then workers)
      telemetryOptions: {
        logging: { filter: { core: temporalLevelFor(config.logLevel), other: 'WARN' }, forward: {} },
      },
    },
    runsWorker ? config.temporal.metricsAddr : null,
  );

  const readyChecks: ReadyCheck[] = [
    {
      name: 'temporal',
      check: async () => {
        const conn = running.connection;
        if (!conn) return 'not connected';
        await withTimeout(conn.healthService.check({}), TEMPORAL_HEALTH_TIMEOUT_MS, 'Temporal health check');
        return undefined;
      },
    },
  ];
  if (runsWorker) {
    readyChecks.push({
      name: 'worker',
      check: () => (running.workersReady ? undefined : 'workers not running'),
    });
  }
  if (runsWatcher) {
    const watcherNotReady = () => {
      if (running.elector && !running.elector.isLeader()) return undefined; // standby replicas are ready
      if (!running.watcher) return 'not started';
      const behind = running.watcher.unsynced();
      return behind.length === 0 ? undefined : `informers not synced: ${behind.join(', ')}`;
    };
    readyChecks.push({ name: 'watcher', check: watcherNotReady });
    registerWatcherSyncedGauge(metricsRegistry, () => watcherNotReady() === undefined);
  }
  if (config.leaderElect && runsWatcher) {
    new Gauge({
      name: 'leader_election_master_status',
      help: '1 while this process holds the leader Lease, else 0.',
      labelNames: ['name'] as const,
      registers: [metricsRegistry],
      collect() {
        this.set({ name: LEADER_ELECTION_ID }, running.elector?.isLeader() ? 1 : 0);
      },
    });
  }
  const extraMetrics = temporalMetrics
    ? [
        scrapeText(
          `http://${formatListen({ host: temporalMetrics.host && temporalMetrics.host !== '0.0.0.0' ? temporalMetrics.host : '127.0.0.1', port: temporalMetrics.port })}/metrics`,
        ),
      ]
    : [];

  try {
    running.http = await startHttp({
      probeAddr: config.probeAddr,
      metricsAddr: config.metricsAddr,
      registry: metricsRegistry,
      readyChecks,
      extraMetrics,
      log,
    });
    log.info(
      {
        probe: running.http.probe ?? 'off',
        metrics: running.http.metrics ?? 'off',
        temporalMetrics: temporalMetrics ? formatListen(temporalMetrics) : 'off',
      },
      'http endpoints listening',
    );

    running.connection = await connectTemporal(NativeConnection, config, log, stopping.signal);
    if (running.connection) {
      const connection = running.connection;
      // The activities' writes, whose watch echoes the watcher then keeps from their writers.
      const ownWrites = new OwnWrites();
      const namespace = config.temporal.namespace;
      if (runsWorker) {
        // Before any worker polls: without them every workflow task fails (BadSearchAttributes).
        await ensureSearchAttributes(connection.operatorService, namespace, log);
        const registry = new OCIRegistryClient(config.ociRegistry);
        const temporalUi = config.temporalUiUrl ? { url: config.temporalUiUrl, namespace } : undefined;
        const kubeActivities = {
          ...createKubeActivities({
            kube,
            log: log.child({ component: 'activity' }),
            metrics,
            temporalUi,
            ownWrites,
          }),
          ...createCocoonSetActivities({ kube, metrics, temporalUi, ownWrites }),
        };
        const registryActivities = createRegistryActivities({ registry });
        const stackTraces = configureWorkflowStackTraces(config.workflowStackTraces);
        if (stackTraces.recorded && !config.workflowStackTraces) {
          log.warn(
            {},
            'workflow stack traces stay on: start the process with --require of workflow-thread-preload.cjs (as npm start and the image do) to turn them off',
          );
        }
        if (!ownCompletionBytes(Worker.prototype)) {
          log.warn(
            {},
            'this Temporal SDK has no Worker#handleActivation: cached workflows may pin buffer-pool slabs',
          );
        }
        const bundleStarted = Date.now();
        const bundle = await workflowBundleFor(HERE, log);
        log.info(
          {
            path: bundle.codePath,
            origin: bundle.origin,
            ms: Date.now() - bundleStarted,
            workflowStackTraces: stackTraces.recorded,
            completionsOwnBytes: ownsCompletionBytes(Worker.prototype),
          },
          bundle.origin === 'built'
            ? 'built and cached the workflow bundle'
            : 'loaded prebuilt workflow bundle',
        );
        const common = {
          connection,
          namespace,
          shutdownGraceTime: config.shutdownGraceMs,
          shutdownForceTime: config.shutdownGraceMs + SHUTDOWN_SLACK_MS,
          interceptors: { activity: [heartbeatWhileRunning] },
        };
        running.workers = [
          await Worker.create({
            ...common,
            taskQueue: queues.workflows,
            workflowBundle: { codePath: bundle.codePath },
            activities: kubeActivities,
            stickyQueueScheduleToStartTimeout: STICKY_QUEUE_TIMEOUT,
            ...(config.workflowCacheSize === 'auto' ? {} : { maxCachedWorkflows: config.workflowCacheSize }),
          }),
          await Worker.create({
            ...common,
            taskQueue: queues.hibernationRegistry,
            activities: registryActivities,
            maxConcurrentActivityTaskExecutions: config.hibernationConcurrency,
          }),
          await Worker.create({
            ...common,
            taskQueue: queues.cocoonSetRegistry,
            activities: registryActivities,
            maxConcurrentActivityTaskExecutions: config.cocoonSetConcurrency,
          }),
        ];
        running.workerRuns = running.workers.map((w) =>
          w.run().catch((err) => {
            fatal ??= err;
            log.fatal({ err, taskQueue: w.options.taskQueue }, 'Temporal worker failed');
            stopping.abort();
            resolveDone();
          }),
        );
        running.workersReady = true;
        log.info(
          {
            queues,
            cocoonsetConcurrency: config.cocoonSetConcurrency,
            hibernationConcurrency: config.hibernationConcurrency,
            workflowCacheSize: running.workers[0]?.options.maxCachedWorkflows,
            // Node sizes each V8 heap (this thread's, the workflow thread's) from the container's memory
            // limit when it has one, else from the machine's memory (docs/performance.md#operator-memory-as-shipped).
            heapLimitMiB: Math.round(getHeapStatistics().heap_size_limit / 2 ** 20),
            memoryLimitMiB: memoryLimitMiB(),
          },
          'Temporal workers running',
        );
      }
      if (runsWatcher && !stopping.signal.aborted) {
        const client = new Client({ connection, namespace });
        const startW = () => {
          running.watcherOp = running.watcherOp
            .then(async () => {
              if (running.watcher || stopping.signal.aborted) return;
              running.watcher = await startWatcher({
                kube,
                client,
                taskQueue: queues.workflows,
                namespace: config.watchNamespace,
                log,
                cocoonSets: true,
                ownWrites,
              });
              log.info({ namespace: config.watchNamespace || '(all)' }, 'started watching');
            })
            .catch((err) => {
              // Like controller-runtime when a controller cannot start: give up, let the Deployment restart us.
              fatal ??= err;
              log.fatal({ err }, 'watcher failed to start');
              stopping.abort();
              resolveDone();
            });
          return running.watcherOp;
        };
        const stopW = () => {
          running.watcherOp = running.watcherOp
            .then(async () => {
              const w = running.watcher;
              running.watcher = undefined;
              if (w) {
                await w.stop();
                log.info('stopped watching');
              }
            })
            .catch((err) => log.error({ err }, 'stopping the watcher failed'));
          return running.watcherOp;
        };
        if (config.leaderElect) {
          running.elector = new LeaderElector({
            store: kubeLeaseStore(kube.coordination, config.leaderElectionNamespace, LEADER_ELECTION_ID),
            identity: defaultIdentity(),
            log: log.child({ component: 'leader' }),
            onStartedLeading: startW,
            onStoppedLeading: stopW,
          });
          running.elector.start();
        } else {
          await startW();
        }
      }
      log.info(
        {
          mode: config.mode,
          metrics: running.http.metrics ?? 'off',
          probe: running.http.probe ?? 'off',
          leader: config.leaderElect,
          cocoonsetConcurrency: config.cocoonSetConcurrency,
          hibernationConcurrency: config.hibernationConcurrency,
        },
        'operator started',
      );
    }
  } catch (err) {
    fatal ??= err;
    if (!(err instanceof ConfigError)) log.fatal({ err }, 'startup failed');
    stopping.abort();
    resolveDone();
  }

  await done;
  await shutdown(running, config, log);
  process.off('SIGTERM', onSignal);
  process.off('SIGINT', onSignal);
  // A setting the environment cannot satisfy (e.g. search attributes that may not be registered): main
  // prints its one line and exits 2, as for a bad setting.
  if (fatal instanceof ConfigError) throw fatal;
  return fatal === undefined ? 0 : 1;
}

/** Stop order: watcher (via the elector, which then releases the Lease), workers (grace period), HTTP. */
async function shutdown(running: Running, config: Config, log: Logger): Promise<void> {
  const started = Date.now();
  try {
    if (running.elector) await running.elector.stop();
    await running.watcherOp;
    if (running.watcher) {
      await running.watcher.stop();
      running.watcher = undefined;
      log.info('stopped watching');
    }
  } catch (err) {
    log.error({ err }, 'stopping the watcher failed');
  }
  running.workersReady = false;
  for (const w of running.workers) {
    if (w.getState() === 'RUNNING') w.shutdown();
  }
  await withTimeout(
    Promise.all(running.workerRuns),
    config.shutdownGraceMs + 2 * SHUTDOWN_SLACK_MS,
    'worker shutdown',
  ).catch((err) => log.error({ err }, 'workers did not stop in time'));
  await running.connection?.close().catch(() => undefined);
  await running.http?.close();
  log.info({ ms: Date.now() - started }, 'shutdown complete');
}

/** Process entry: settings → run → exit code. */
export async function main(argv = process.argv.slice(2), env = process.env): Promise<never> {
  let config: Config;
  try {
    config = loadConfig(argv, env);
  } catch (err) {
    if (err instanceof HelpRequested) {
      process.stdout.write(`${err.message}\n`);
      process.exit(0);
    }
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const { createLogger } = await import('./log.js');
  const log = createLogger(config.logLevel, undefined, config.logFormat);
  let code: number;
  try {
    code = await run(config, log);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message.split('\n')[0]}\n`);
      process.exit(2);
    }
    log.fatal({ err }, 'operator failed');
    code = 1;
  }
  process.exit(code);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  void main();
}
