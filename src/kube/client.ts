/**
 * Kubernetes client construction shared by the watcher, the activities and the simulator.
 * Kubeconfig precedence follows controller-runtime's GetConfig
 * (docs/configuration.md#notes-on-some-settings): an explicit path, then KUBECONFIG, then in-cluster, then
 * ~/.kube/config.
 */
import {
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
} from '@kubernetes/client-node';
import { KeepAliveTransport } from './transport.js';

export interface KubeClients {
  kc: KubeConfig;
  core: CoreV1Api;
  custom: CustomObjectsApi;
  coordination: CoordinationV1Api;
  /** The keep-alive transport the three typed clients share (src/kube/transport.ts). */
  transport: KeepAliveTransport;
}

/**
 * Loads a KubeConfig. `path` wins over KUBECONFIG; with neither, in-cluster config is tried, then the
 * default file. Throws when nothing usable is found (the caller reports it as a startup error).
 */
export function loadKubeConfig(path?: string): KubeConfig {
  const kc = new KubeConfig();
  const fromEnv = process.env.KUBECONFIG;
  if (path) kc.loadFromFile(path);
  else if (fromEnv) kc.loadFromFile(fromEnv.split(':')[0]!);
  else if (process.env.KUBERNETES_SERVICE_HOST) kc.loadFromCluster();
  else kc.loadFromDefault();
  if (!kc.getCurrentCluster()) throw new Error('no Kubernetes cluster in the kubeconfig');
  return kc;
}

/**
 * Builds the typed API clients from one KubeConfig. They share one {@link KeepAliveTransport}: the
 * KubeConfig's credentials applied per request as client-node does, over kept-alive connections.
 * Watches (`new Watch(kc)`) keep client-node's own transport. `requestTimeoutMs` bounds every call
 * (default: no bound).
 */
export function makeKubeClients(kc: KubeConfig, opts: { requestTimeoutMs?: number } = {}): KubeClients {
  const transport = new KeepAliveTransport(kc, opts);
  return {
    kc,
    core: transport.makeApiClient(CoreV1Api),
    custom: transport.makeApiClient(CustomObjectsApi),
    coordination: transport.makeApiClient(CoordinationV1Api),
    transport,
  };
}

/**
 * Request options that send a body as an RFC 7386 JSON merge patch. client-node defaults patches to
 * JSON Patch, which the apiserver rejects for a merge-shaped body, so every merge patch passes this.
 */
export const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

/** Same for strategic-merge patches (pods only; vk-cocoon writes its lifecycle triple this way). */
export const strategicMergePatch = setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch);

/**
 * Drops `metadata.managedFields` from `obj` in place (sets it to undefined, which JSON and Temporal payloads
 * leave out; a `delete` would turn every cached metadata object into a slower, larger dictionary-mode
 * object) and returns it. Nothing in the operator reads
 * server-side field ownership, and on a pod that several managers write (the scheduler, vk-cocoon, the
 * operator) it is the largest part of the metadata. Applied to every object the informers cache (as
 * controller-runtime's `TransformStripManagedFields` does) and to the CocoonSet activities' answers, which
 * cross into workflow history.
 */
export function stripManagedFields<T extends { metadata?: { managedFields?: unknown } }>(obj: T): T {
  if (obj.metadata?.managedFields !== undefined) obj.metadata.managedFields = undefined;
  return obj;
}

/** HTTP status code of a client-node ApiException (or undefined for transport errors). */
export function statusCodeOf(err: unknown): number | undefined {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'number' ? code : undefined;
}
