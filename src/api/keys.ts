/**
 * The wire contract with vk-cocoon, cocoon-webhook and the Go operator: every annotation key, label key,
 * finalizer, tag, condition and event reason. This module is the only place that spells them
 * (docs/wire-contract.md#keys; cocoon-common v0.3.0 meta/).
 */

export const GROUP = 'cocoonset.cocoonstack.io';
export const VERSION = 'v1';
export const API_VERSION = `${GROUP}/${VERSION}`;
export const KIND_COCOONSET = 'CocoonSet';
export const KIND_COCOONHIBERNATION = 'CocoonHibernation';
export const PLURAL_COCOONSETS = 'cocoonsets';
export const PLURAL_COCOONHIBERNATIONS = 'cocoonhibernations';

/** Pod and CocoonSet annotation keys (cocoon-common meta/keys.go). */
export const Annotations = {
  mode: 'cocoonset.cocoonstack.io/mode',
  image: 'cocoonset.cocoonstack.io/image',
  storage: 'cocoonset.cocoonstack.io/storage',
  managed: 'cocoonset.cocoonstack.io/managed',
  os: 'cocoonset.cocoonstack.io/os',
  snapshotPolicy: 'cocoonset.cocoonstack.io/snapshot-policy',
  network: 'cocoonset.cocoonstack.io/network',
  forcePull: 'cocoonset.cocoonstack.io/force-pull',
  cocoonSetGeneration: 'cocoonset.cocoonstack.io/generation',
  hibernatedOnNode: 'cocoonset.cocoonstack.io/hibernated-on-node',
  deleteVMNames: 'cocoonset.cocoonstack.io/delete-vm-names',
  rebuildHistory: 'cocoonset.cocoonstack.io/rebuild-history',
  failedHibernateRounds: 'cocoon-operator.cocoonstack.io/failed-hibernate-rounds',
  deadLetter: 'cocoonset.cocoonstack.io/dead-letter',
  vmID: 'vm.cocoonstack.io/id',
  vmName: 'vm.cocoonstack.io/name',
  ip: 'vm.cocoonstack.io/ip',
  vncPort: 'vm.cocoonstack.io/vnc-port',
  hibernate: 'vm.cocoonstack.io/hibernate',
  restoreFromHibernate: 'vm.cocoonstack.io/restore-from-hibernate',
  keepSnapshotOnDelete: 'vm.cocoonstack.io/keep-snapshot-on-delete',
  forkFrom: 'vm.cocoonstack.io/fork-from',
  cloneFromDir: 'vm.cocoonstack.io/clone-from-dir',
  connType: 'vm.cocoonstack.io/conn-type',
  backend: 'vm.cocoonstack.io/backend',
  noDirectIO: 'vm.cocoonstack.io/no-direct-io',
  probePort: 'vm.cocoonstack.io/probe-port',
  lifecycleState: 'vm.cocoonstack.io/lifecycle-state',
  lifecycleObservedGeneration: 'vm.cocoonstack.io/lifecycle-observed-generation',
  lifecycleStateMessage: 'vm.cocoonstack.io/lifecycle-state-message',
  postCloneState: 'vm.cocoonstack.io/post-clone-state',
  postCloneHint: 'vm.cocoonstack.io/post-clone-hint',
  postCloneErrors: 'vm.cocoonstack.io/post-clone-errors',
} as const;

/**
 * The annotation the apiserver's LimitRanger admission plugin writes on a pod whose container resources it
 * defaulted from the namespace's LimitRanges: `LimitRanger plugin set: <names> request for container <c>;
 * <names> limit for container <c>` (k8s.io/kubernetes plugin/pkg/admission/limitranger
 * `mergePodResourceRequirements`). Read, never written (src/cocoonset/drift.ts `limitRangerDefaults`).
 */
export const LIMIT_RANGER_ANNOTATION = 'kubernetes.io/limit-ranger';

/** Label keys written on managed pods and read from nodes (docs/wire-contract.md#on-pods). */
export const Labels = {
  cocoonSet: 'cocoonset.cocoonstack.io/name',
  role: 'cocoonset.cocoonstack.io/role',
  slot: 'cocoonset.cocoonstack.io/slot',
  appName: 'app.kubernetes.io/name',
  nodePool: 'cocoonstack.io/pool',
  snapshotCPUClass: 'cocoonstack.io/snapshot-cpu-class',
  hostname: 'kubernetes.io/hostname',
  nodeRoleCocoonVM: 'node-role.kubernetes.io/cocoon-vm',
} as const;

export const Roles = { main: 'main', subAgent: 'sub-agent', toolbox: 'toolbox' } as const;
export type Role = (typeof Roles)[keyof typeof Roles];

export const TOLERATION_KEY = 'virtual-kubelet.io/provider';
export const DEFAULT_NODE_POOL = 'default';

/** Lifecycle-state values written by vk-cocoon (lowercase, docs/wire-contract.md#on-pods). */
export const LifecycleStates = {
  creating: 'creating',
  ready: 'ready',
  hibernating: 'hibernating',
  hibernated: 'hibernated',
  failed: 'failed',
} as const;
export type LifecycleState = (typeof LifecycleStates)[keyof typeof LifecycleStates];

export const Finalizers = {
  cocoonSet: 'cocoonset.cocoonstack.io/finalizer',
  cocoonHibernation: 'cocoonhibernation.cocoonset.cocoonstack.io/finalizer',
} as const;

/** Registry tags: repository `<OCI_REGISTRY>/<vmName>`. */
export const Tags = { hibernate: 'hibernate', latest: 'latest' } as const;

export const CONDITION_READY = 'Ready';
export const CONDITION_PROGRESSING = 'Progressing';
/** Condition type this port adds when several live CocoonHibernations on one VM want opposite things. */
export const CONDITION_CONFLICT = 'DesireConflict';
/**
 * Condition type this port adds while the registry probe of a hibernate fails (True, reason
 * `RegistryError`, the error and the deadline in its message); removed by the next probe that answers.
 */
export const CONDITION_PROBE_FAILING = 'SnapshotProbeFailing';
/**
 * Condition type this port adds while a wake cannot delete the spent `:hibernate` tag (True, reason
 * `RegistryError`, the error in its message): the CR stays `Waking` and retries with backoff; removed by the
 * delete that succeeds.
 */
export const CONDITION_DELETE_FAILING = 'SnapshotDeleteFailing';

export const EVENT_SOURCE = 'cocoon-operator';

/**
 * Operator-local annotation on the Events the operator folds (src/activities/kube.ts recordEvent): a JSON
 * array of the last emit keys counted into the Event, so a retried activity never counts twice. Not part
 * of the wire contract with other components.
 */
export const EVENT_KEYS_ANNOTATION = 'cocoon-operator.cocoonstack.io/event-keys';

/**
 * Operator-local annotations written on a CocoonHibernation or CocoonSet in the same update that adds its
 * finalizer (no extra API write), so `kubectl describe` leads to the entity workflow: its id (for
 * `temporal workflow show --workflow-id …`) and, when TEMPORAL_UI_URL is set, its Temporal UI page. Not
 * part of the wire contract with other components (docs/observability.md#from-kubectl-to-the-workflow).
 */
export const WorkflowAnnotations = {
  id: 'cocoon-operator.cocoonstack.io/workflow-id',
  url: 'cocoon-operator.cocoonstack.io/workflow-url',
} as const;

/** Event reasons (docs/observability.md#events). */
export const EventReasons = {
  hibernated: 'Hibernated',
  hibernateTimedOut: 'HibernateTimedOut',
  wokenActive: 'WokenActive',
  wakeTimedOut: 'WakeTimedOut',
  retryRequested: 'RetryRequested',
  podLifecycleFailed: 'PodLifecycleFailed',
  mainAgentFailed: 'MainAgentFailed',
  recoveredFromFailure: 'RecoveredFromFailure',
  subAgentRebuilding: 'SubAgentRebuilding',
  subAgentDeadLetter: 'SubAgentDeadLetter',
  wakeNoCapacity: 'WakeNoCapacity',
  /** Ours (not in the reference): the spec builds pods the apiserver would reject; no pod was touched. */
  invalidSpec: 'InvalidSpec',
  /**
   * Ours: a wake ran the VM but the registry refuses the DELETE of its spent `:hibernate` tag (Warning, with
   * the CocoonHibernation's condition `SnapshotDeleteFailing`).
   */
  snapshotDeleteFailing: 'SnapshotDeleteFailing',
  /** Ours: a failed toolbox is recreated at most every 30 s (Warning, with `Progressing=False ToolboxFailing`). */
  toolboxFailing: 'ToolboxFailing',
  /**
   * Ours: no node has the placement the edited spec gives the main, so the live main is kept (Warning, with
   * `Progressing=False NoMatchingNode`).
   */
  noMatchingNode: 'NoMatchingNode',
  /**
   * Ours: the edited spec's clone-mode agent image is not in the registry, so the live main is kept
   * (Warning, with `Progressing=False ImageNotFound`).
   */
  imageNotFound: 'ImageNotFound',
  /**
   * Ours: the namespace's LimitRange or ResourceQuota would refuse a pod the edited spec replaces a live one
   * with, so the live pods are kept (Warning, with `Progressing=False ExceedsNamespaceLimits`).
   */
  exceedsNamespaceLimits: 'ExceedsNamespaceLimits',
} as const;

/**
 * The Lease the watcher's leader election holds (docs/configuration.md#notes-on-some-settings, "Leader
 * election").
 */
export const LEADER_ELECTION_ID = 'cocoon-operator.cocoonset.cocoonstack.io';

/**
 * Temporal custom search attributes of the entity workflows (registered by the stack, compose and at start).
 * A run this version starts sets the identity ones at its start and never publishes `phase`; runs an older
 * version started upsert all four (src/workflows/search-attributes.ts).
 */
export const SearchAttributes = {
  namespace: 'CocoonNamespace',
  vmName: 'CocoonVMName',
  phase: 'CocoonPhase',
  kind: 'CocoonKind',
} as const;

/**
 * vk-cocoon's own side of the contract, reproduced by the simulator (test/vksim/) and readable by tests:
 * node taint and labels, event source and reasons, pod status reasons (docs/wire-contract.md#vk-cocoon).
 */
export const VK_EVENT_SOURCE = 'vk-cocoon';
export const VK_DEFAULT_NODE_NAME = 'cocoon-pool';
export const VK_PROVIDER_TAINT = { key: TOLERATION_KEY, value: 'cocoon', effect: 'NoSchedule' } as const;

/**
 * Event reasons vk-cocoon (and its virtual-kubelet framework) emit on pods (docs/wire-contract.md#vk-cocoon).
 */
export const VkEventReasons = {
  hibernated: 'Hibernated',
  woken: 'Woken',
  createBringUpFailed: 'CreateBringUpFailed',
  hibernateEvidenceFailed: 'HibernateEvidenceFailed',
  hibernateEvidenceUnavailable: 'HibernateEvidenceUnavailable',
  hibernateSnapshotExists: 'HibernateSnapshotExists',
  hibernateSnapshotFailed: 'HibernateSnapshotFailed',
  hibernatePushFailed: 'HibernatePushFailed',
  hibernateRemoveFailed: 'HibernateRemoveFailed',
  wakePullFailed: 'WakePullFailed',
  wakeCloneFailed: 'WakeCloneFailed',
  postCloneExecExhausted: 'PostCloneExecExhausted',
  providerCreateFailed: 'ProviderCreateFailed',
  providerUpdateFailed: 'ProviderUpdateFailed',
  providerCreateSuccess: 'ProviderCreateSuccess',
  providerUpdateSuccess: 'ProviderUpdateSuccess',
  providerDeleteSuccess: 'ProviderDeleteSuccess',
  providerDeleteFailed: 'ProviderDeleteFailed',
} as const;

/** Pod/container status reasons vk-cocoon writes (docs/wire-contract.md#vk-cocoon). */
export const VkStatusReasons = {
  providerFailed: 'ProviderFailed',
  vmGone: 'VMGone',
  terminated: 'Terminated',
} as const;

/**
 * The snapshot artifact wire format (cocoon-common snapshot.Push v1;
 * docs/wire-contract.md#snapshot-artifacts): media types and the manifest annotation keys.
 */
export const SnapshotArtifact = {
  manifestMediaType: 'application/vnd.oci.image.manifest.v1+json',
  artifactType: 'application/vnd.cocoonstack.snapshot.v1+json',
  configMediaType: 'application/vnd.cocoonstack.snapshot.config.v1+json',
  vmConfigMediaType: 'application/vnd.cocoonstack.vm.config+json',
  vmStateMediaType: 'application/vnd.cocoonstack.vm.state+json',
  annotationCreated: 'org.opencontainers.image.created',
  annotationTitle: 'org.opencontainers.image.title',
  annotationBaseImage: 'cocoonstack.snapshot.baseimage',
  annotationFromNode: 'cocoonstack.snapshot.from-node',
} as const;

/** Node taint keys the managed pods tolerate without tolerationSeconds (docs/cocoonset.md#pods). */
export const TaintKeys = {
  notReady: 'node.kubernetes.io/not-ready',
  unreachable: 'node.kubernetes.io/unreachable',
} as const;

/** The single container of every managed pod; the image is never pulled (docs/wire-contract.md#on-crs). */
export const AGENT_CONTAINER_NAME = 'agent';
export const PLACEHOLDER_IMAGE = 'ghcr.io/cocoonstack/placeholder:latest';
/**
 * Resource name the VM's `storage` is mirrored to in container requests and limits (docs/cocoonset.md#pods).
 */
export const EPHEMERAL_STORAGE = 'ephemeral-storage';

/**
 * Reasons of the CocoonSet `Ready` and `Progressing` conditions (docs/wire-contract.md#on-crs,
 * docs/cocoonset.md#status-roll-up).
 */
export const ConditionReasons = {
  allAgentsReady: 'AllAgentsReady',
  agentsNotReady: 'AgentsNotReady',
  stable: 'Stable',
  reconciling: 'Reconciling',
  /**
   * Ours, on `Progressing=False` (as a Deployment says `ProgressDeadlineExceeded` there): the spec builds
   * pods the apiserver would reject, so the set cannot progress and no pod was touched.
   */
  invalidSpec: 'InvalidSpec',
  /** Ours, on `Progressing=False`: the last pass failed; the message is its error. */
  reconcileFailed: 'ReconcileFailed',
  /**
   * Ours, on `Progressing=False` of a suspending set: a CocoonHibernation holds one of its VMs awake
   * against the suspend; the message names the pod and the CocoonHibernation.
   */
  desireConflict: 'DesireConflict',
  /**
   * Ours, on `Progressing=False` of a suspending set: its main pod is still terminating, so the suspend
   * waits to recreate it (the reference fails the create with AlreadyExists and retries with backoff).
   */
  mainTerminating: 'MainTerminating',
  /**
   * Ours, on `Progressing=False` of a migrating set: the restore main no node takes; the message is the
   * scheduler's (change or clear `spec.nodeName` to move it).
   */
  unschedulable: 'Unschedulable',
  /**
   * Ours, on `Progressing=False`: a pod the set would create is held back while its VM's `:hibernate` tag
   * is spent (a CocoonHibernation woke the VM and the registry keeps refusing the tag's DELETE): vk-cocoon
   * restores any create of a VM whose tag exists, which would roll the VM back. The message names the pod,
   * the VM and the CocoonHibernation.
   */
  spentSnapshotTag: 'SpentSnapshotTag',
  /**
   * Ours, on `Progressing=False`: a failed toolbox younger than `TOOLBOX_RECREATE_MIN_AGE_MS` waits for
   * its recreate; the message names the pod and vk-cocoon's (or the pod's) failure.
   */
  toolboxFailing: 'ToolboxFailing',
  /**
   * Ours, on `Progressing=False`: the spec moved the main's placement (pool, CPU class, `spec.nodeName`) to
   * labels no node has; the live main stays and no pod is touched until a node matches or the spec changes.
   */
  noMatchingNode: 'NoMatchingNode',
  /**
   * Ours, on `Progressing=False`: the spec's new clone-mode agent image is not in the registry; the live
   * main stays and no pod is touched until the image is pushed or the spec changes.
   */
  imageNotFound: 'ImageNotFound',
  /**
   * Ours, on `Progressing=False`: the apiserver's LimitRanger or ResourceQuota admission would refuse a pod
   * the edited spec replaces a live one with (the message quotes its refusal); the live pods stay and no pod
   * is touched until the spec or the namespace's limits change.
   */
  exceedsNamespaceLimits: 'ExceedsNamespaceLimits',
  /**
   * Ours, on `Progressing=False` of a `Pending` set: vk-cocoon reported the main's hibernate round failed
   * (lifecycle `failed` while the pod carries the hibernate request: e.g. the registry refused the push). The
   * VM still runs and vk-cocoon retries the round; the message gives vk-cocoon's reason.
   */
  hibernateRoundFailed: 'HibernateRoundFailed',
  /**
   * Ours, on `Progressing=False`: the main's VM lives only in its `:hibernate` snapshot and the spec now
   * names another agent image, under which vk-cocoon will not restore it; the main is left as it is until
   * the image is set back (the state kept) or the snapshot deleted (the new image booted fresh).
   */
  snapshotImageMismatch: 'SnapshotImageMismatch',
} as const;
