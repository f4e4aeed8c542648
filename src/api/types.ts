/**
 * TypeScript shapes of the two custom resources (group cocoonset.cocoonstack.io/v1), matching the CRDs in
 * config/crd/ (docs/cocoonset.md#the-resource, docs/hibernation.md#the-resource). Only fields the operator
 * reads or writes are typed strictly; the rest pass through.
 */
import type { V1EnvFromSource, V1ObjectMeta, V1ResourceRequirements } from '@kubernetes/client-node';

export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  /** RFC 3339, second precision. */
  lastTransitionTime?: string;
  observedGeneration?: number;
}

export type HibernationDesire = 'Hibernate' | 'Wake';
export type HibernationPhase = 'Pending' | 'Hibernating' | 'Hibernated' | 'Waking' | 'Active' | 'Failed';

export interface CocoonHibernation {
  apiVersion?: string;
  kind?: string;
  metadata: V1ObjectMeta;
  spec: { podRef: { name: string }; desire: HibernationDesire | string };
  status?: {
    observedGeneration?: number;
    phase?: HibernationPhase | '';
    vmName?: string;
    conditions?: Condition[];
  };
}

export type AgentMode = 'clone' | 'run';
export type ToolboxMode = 'run' | 'clone' | 'static';
export type OSType = 'linux' | 'windows' | 'android' | 'macos';
export type SnapshotPolicy = 'always' | 'main-only' | 'never';
export type HibernatePolicy = 'retain' | 'release';
export type Backend = 'cloud-hypervisor' | 'firecracker';
export type ConnType = 'ssh' | 'rdp' | 'vnc' | 'adb';
export type CocoonSetPhase =
  | 'Pending'
  | 'Running'
  | 'Scaling'
  | 'Suspending'
  | 'Suspended'
  | 'Waking'
  | 'Migrating'
  | 'Failed';

/** Options inlined in both agent and toolbox specs. `storage` is a Kubernetes quantity. */
export interface VMOptions {
  os?: OSType;
  backend?: Backend;
  connType?: ConnType;
  network?: string;
  forcePull?: boolean;
  noDirectIO?: boolean;
  probePort?: number;
  storage?: string | number;
  resources?: V1ResourceRequirements;
}

export interface AgentSpec extends VMOptions {
  replicas?: number;
  image: string;
  mode?: AgentMode;
  envFrom?: V1EnvFromSource[];
  serviceAccountName?: string;
}

export interface ToolboxSpec extends VMOptions {
  name: string;
  image?: string;
  mode?: ToolboxMode;
  staticIP?: string;
  staticVMID?: string;
  vncPort?: number;
}

export interface AgentStatus {
  slot: number;
  role: string;
  podName?: string;
  vmName?: string;
  vmID?: string;
  ip?: string;
  phase?: string;
  forkedFrom?: string;
}

export interface ToolboxStatus {
  name: string;
  podName?: string;
  vmName?: string;
  vmID?: string;
  ip?: string;
  phase?: string;
  connType?: string;
  vncPort?: number;
}

export interface CocoonSet {
  apiVersion?: string;
  kind?: string;
  metadata: V1ObjectMeta;
  spec: {
    suspend?: boolean;
    snapshotPolicy?: SnapshotPolicy;
    hibernatePolicy?: HibernatePolicy;
    nodePool?: string;
    snapshotCompatibilityClass?: string;
    nodeName?: string;
    agent: AgentSpec;
    toolboxes?: ToolboxSpec[];
  };
  status?: {
    observedGeneration?: number;
    phase?: CocoonSetPhase;
    readyAgents: number;
    desiredAgents: number;
    readyToolboxes: number;
    desiredToolboxes: number;
    agents?: AgentStatus[];
    toolboxes?: ToolboxStatus[];
    conditions?: Condition[];
  };
}
