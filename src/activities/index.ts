/** Activity factories, grouped by boundary (Kubernetes, registry). */

export { type CocoonSetActivities, createCocoonSetActivities } from './cocoonset.js';
export { heartbeatWhileRunning } from './heartbeat.js';
export { createKubeActivities, hibernationRef, type KubeActivities, type KubeActivityDeps } from './kube.js';
export { createRegistryActivities, type ManifestRegistry, type RegistryActivities } from './registry.js';
