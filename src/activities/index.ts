/** Activity factories, grouped by boundary (Kubernetes, registry). */
export { createKubeActivities, hibernationRef, type KubeActivities, type KubeActivityDeps } from './kube.js';
export { createRegistryActivities, type ManifestRegistry, type RegistryActivities } from './registry.js';
