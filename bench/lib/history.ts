/**
 * Reads workflow histories from Temporal: where a VM transition's time went (when the workflow started,
 * when its registry probe was scheduled, started and completed) and what it cost Temporal (tasks,
 * activities, local activities, signals, timers, history events, Temporal Cloud actions). Timestamps are
 * the Temporal server's (same host clock as the benchmark's).
 */
import type { Client } from '@temporalio/client';
import proto, { type temporal } from '@temporalio/proto';
import { median } from './stats.js';

const ET = proto.temporal.api.enums.v1.EventType;
const RESET_CAUSE =
  proto.temporal.api.enums.v1.WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW;

/** One history event as the client returns it. */
export type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

type Ts = { seconds?: number | { toNumber(): number } | null; nanos?: number | null } | null | undefined;

function tsMs(ts: Ts): number {
  if (!ts) return Number.NaN;
  const s = typeof ts.seconds === 'number' ? ts.seconds : (ts.seconds?.toNumber() ?? 0);
  return s * 1000 + (ts.nanos ?? 0) / 1e6;
}

/** Server time of an event, epoch ms. */
export function eventTimeMs(ev: HistoryEvent): number {
  return tsMs(ev.eventTime as Ts);
}

/** The events of the current run of `workflowId`, in order. */
export async function fetchEvents(client: Client, workflowId: string): Promise<HistoryEvent[]> {
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  return history.events ?? [];
}

/** Marker name the SDK core (used by the TypeScript SDK) gives local activity results (sdk-core constants.rs). */
export const LOCAL_ACTIVITY_MARKER = 'core_local_activity';
/** Search attribute the SDK upserts for `patched()`; exempt from actions. */
const CHANGE_VERSION_ATTRIBUTE = 'TemporalChangeVersion';
/** Core's heartbeat throttle: 80 % of the heartbeat timeout, at most 60 s; 30 s without a timeout (ms). */
const HEARTBEAT_THROTTLE_SHARE = 0.8;
const MAX_HEARTBEAT_THROTTLE_MS = 60_000;
const DEFAULT_HEARTBEAT_THROTTLE_MS = 30_000;
/** When the operator's activities send their first heartbeat (src/activities/heartbeat.ts's period), ms. */
const FIRST_HEARTBEAT_MS = 1_000;

/**
 * What a slice of one workflow history cost Temporal. Counts are events of the slice (per transition when
 * the slice is one transition); `actions` estimates Temporal Cloud billable actions.
 */
export interface TemporalCounts {
  /** History events. */
  events: number;
  /** Workflow tasks completed. */
  workflowTasks: number;
  /**
   * Workflow tasks timed out (WORKFLOW_TASK_TIMED_OUT). In this operator's runs nearly all are
   * schedule-to-start timeouts on the sticky queue: the task then goes to the shared queue with the whole
   * history, and the worker that takes it replays the run unless it has it cached.
   */
  workflowTaskTimeouts: number;
  /** Activity task attempts: scheduled activities plus their retries (ActivityTaskStarted.attempt − 1). */
  activityTasks: number;
  /** Local activities (MARKER_RECORDED named {@link LOCAL_ACTIVITY_MARKER}). */
  localActivities: number;
  /** Other markers (`patched()` records `core_patch`). */
  otherMarkers: number;
  /** Timers started (explicit, and `condition` with a timeout). */
  timers: number;
  /** UpsertWorkflowSearchAttributes events. */
  searchAttributeUpserts: number;
  /** Signals received (WORKFLOW_EXECUTION_SIGNALED), signal-with-start's included. */
  signals: number;
  /** Activity heartbeats that reached the server, estimated (not in history; see {@link temporalCounts}). */
  heartbeatsEst: number;
  /** Temporal Cloud actions, estimated (see {@link temporalCounts}); `actionsByKind` sums to it. */
  actions: number;
  actionsByKind: Record<string, number>;
}

/**
 * Counts a slice of one run's history (`events`, in order; a time window of it is fine). Temporal Cloud
 * actions follow https://docs.temporal.io/cloud/actions (temporalio/documentation,
 * docs/evaluate/cloud/actions.mdx, read 2026-12): per event of the slice,
 * - WORKFLOW_EXECUTION_STARTED 1 (client start, signal-with-start, continue-as-new's new run);
 * - WORKFLOW_EXECUTION_SIGNALED 1, except the signal a signal-with-start delivered with the start (event 2
 *   right after STARTED): a signal-with-start is 1 action in all;
 * - ACTIVITY_TASK_SCHEDULED 1, and each retry 1 (ActivityTaskStarted.attempt − 1);
 * - markers (local activity results, patches, side effects) 1 per workflow task that recorded any, plus
 *   WorkflowTaskCompleted.meteringMetadata.nonfirstLocalActivityExecutionAttempts (local activity retries);
 * - TIMER_STARTED 1; UPSERT_WORKFLOW_SEARCH_ATTRIBUTES 1 unless it sets only TemporalChangeVersion;
 * - START_CHILD_WORKFLOW_EXECUTION_INITIATED 2; update accepted, Nexus operation scheduled or cancel
 *   requested, workflow options updated, a workflow task failed by a reset: 1 each;
 * - activity heartbeats 1 each that reaches the server. They are not in history: estimated from the
 *   recorded attempt's run time: none under FIRST_HEARTBEAT_MS (src/activities/heartbeat.ts heartbeats
 *   first one period after the start), then one (core sends the first at once) plus one per throttle
 *   interval (80 % of the heartbeat timeout).
 * Not counted: queries (not in history; the operator sends none, the benchmark's own are harness), and
 * CONTINUED_AS_NEW itself (the new run's STARTED is the action).
 */
export function temporalCounts(events: readonly HistoryEvent[]): TemporalCounts {
  const c: TemporalCounts = {
    events: events.length,
    workflowTasks: 0,
    workflowTaskTimeouts: 0,
    activityTasks: 0,
    localActivities: 0,
    otherMarkers: 0,
    timers: 0,
    searchAttributeUpserts: 0,
    signals: 0,
    heartbeatsEst: 0,
    actions: 0,
    actionsByKind: {},
  };
  const add = (kind: string, n = 1) => {
    if (n > 0) c.actionsByKind[kind] = (c.actionsByKind[kind] ?? 0) + n;
  };
  const markerTasks = new Set<string>();
  const throttleMs = new Map<string, number>();
  const startedAt = new Map<string, number>();
  for (const ev of events) {
    const at = eventTimeMs(ev);
    switch (ev.eventType) {
      case ET.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        add('workflow start');
        break;
      case ET.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
        c.signals++;
        if (Number(String(ev.eventId)) !== 2) add('signal');
        break;
      case ET.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
        c.workflowTasks++;
        add(
          'local activity retry',
          ev.workflowTaskCompletedEventAttributes?.meteringMetadata?.nonfirstLocalActivityExecutionAttempts ??
            0,
        );
        break;
      case ET.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
        c.workflowTaskTimeouts++;
        break;
      case ET.EVENT_TYPE_WORKFLOW_TASK_FAILED:
        if (ev.workflowTaskFailedEventAttributes?.cause === RESET_CAUSE) add('reset');
        break;
      case ET.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: {
        const a = ev.activityTaskScheduledEventAttributes;
        const hbMs = tsMs(a?.heartbeatTimeout as Ts);
        throttleMs.set(
          String(ev.eventId),
          hbMs > 0
            ? Math.min(HEARTBEAT_THROTTLE_SHARE * hbMs, MAX_HEARTBEAT_THROTTLE_MS)
            : DEFAULT_HEARTBEAT_THROTTLE_MS,
        );
        c.activityTasks++;
        add('activity');
        break;
      }
      case ET.EVENT_TYPE_ACTIVITY_TASK_STARTED: {
        const a = ev.activityTaskStartedEventAttributes;
        const retries = Math.max(0, (a?.attempt ?? 1) - 1);
        c.activityTasks += retries;
        add('activity retry', retries);
        startedAt.set(String(a?.scheduledEventId), at);
        break;
      }
      case ET.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
      case ET.EVENT_TYPE_ACTIVITY_TASK_FAILED:
      case ET.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
      case ET.EVENT_TYPE_ACTIVITY_TASK_CANCELED: {
        const sid = String(
          (
            ev.activityTaskCompletedEventAttributes ??
            ev.activityTaskFailedEventAttributes ??
            ev.activityTaskTimedOutEventAttributes ??
            ev.activityTaskCanceledEventAttributes
          )?.scheduledEventId,
        );
        const t0 = startedAt.get(sid);
        const every = throttleMs.get(sid);
        const ran = t0 === undefined ? 0 : at - t0;
        if (every && ran >= FIRST_HEARTBEAT_MS)
          c.heartbeatsEst += 1 + Math.floor((ran - FIRST_HEARTBEAT_MS) / every);
        break;
      }
      case ET.EVENT_TYPE_MARKER_RECORDED: {
        const m = ev.markerRecordedEventAttributes;
        if (m?.markerName === LOCAL_ACTIVITY_MARKER) c.localActivities++;
        else c.otherMarkers++;
        markerTasks.add(String(m?.workflowTaskCompletedEventId));
        break;
      }
      case ET.EVENT_TYPE_TIMER_STARTED:
        c.timers++;
        add('timer');
        break;
      case ET.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES: {
        c.searchAttributeUpserts++;
        const keys = Object.keys(
          ev.upsertWorkflowSearchAttributesEventAttributes?.searchAttributes?.indexedFields ?? {},
        );
        if (keys.some((k) => k !== CHANGE_VERSION_ATTRIBUTE)) add('search attribute upsert');
        break;
      }
      case ET.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
        add('child workflow', 2);
        break;
      case ET.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
        add('update');
        break;
      case ET.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED:
      case ET.EVENT_TYPE_NEXUS_OPERATION_CANCEL_REQUESTED:
        add('nexus');
        break;
      case ET.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED:
        add('options update');
        break;
    }
  }
  add('markers (per workflow task)', markerTasks.size);
  add('activity heartbeat (est.)', c.heartbeatsEst);
  c.actions = Object.values(c.actionsByKind).reduce((a, b) => a + b, 0);
  return c;
}

/** Field-wise medians of several slices' counts (each `actionsByKind` key on its own; absent = 0). */
export function medianCounts(rows: readonly TemporalCounts[]): TemporalCounts {
  const m = (f: (r: TemporalCounts) => number) => median(rows.map(f));
  const kinds = new Set(rows.flatMap((r) => Object.keys(r.actionsByKind)));
  return {
    events: m((r) => r.events),
    workflowTasks: m((r) => r.workflowTasks),
    workflowTaskTimeouts: m((r) => r.workflowTaskTimeouts),
    activityTasks: m((r) => r.activityTasks),
    localActivities: m((r) => r.localActivities),
    otherMarkers: m((r) => r.otherMarkers),
    timers: m((r) => r.timers),
    searchAttributeUpserts: m((r) => r.searchAttributeUpserts),
    signals: m((r) => r.signals),
    heartbeatsEst: m((r) => r.heartbeatsEst),
    actions: m((r) => r.actions),
    actionsByKind: Object.fromEntries([...kinds].map((k) => [k, m((r) => r.actionsByKind[k] ?? 0)])),
  };
}

/**
 * Timeline of one workflow run (epoch ms) and its {@link TemporalCounts}. Registry activity fields are
 * those of the first such call.
 */
export interface RunTimeline {
  workflowId: string;
  events: number;
  started: number;
  workflowTasks: number;
  /** Activities scheduled, by type (retries not included; see `counts.activityTasks`). */
  activities: Record<string, number>;
  /** Wall time activities of the workflow queue spent scheduled→completed, summed (ms). */
  kubeActivityMs: number;
  registry?: { name: string; scheduled: number; started: number; completed: number };
  /** Time of the last event read. */
  last: number;
  continuedAsNew: boolean;
  /** What the whole run cost Temporal. */
  counts: TemporalCounts;
}

/** Activity type names served by the registry task queue. */
const REGISTRY_ACTIVITIES = new Set(['hasManifest', 'deleteManifest']);

/** Reads the current run of `workflowId` and summarizes it (see RunTimeline). */
export async function runTimeline(client: Client, workflowId: string): Promise<RunTimeline> {
  const events = await fetchEvents(client, workflowId);
  const counts = temporalCounts(events);
  const scheduled = new Map<string, { name: string; at: number }>();
  const startedAt = new Map<string, number>();
  const out: RunTimeline = {
    workflowId,
    events: counts.events,
    started: Number.NaN,
    workflowTasks: counts.workflowTasks,
    activities: {},
    kubeActivityMs: 0,
    last: Number.NaN,
    continuedAsNew: false,
    counts,
  };
  for (const ev of events) {
    const at = eventTimeMs(ev);
    out.last = at;
    const id = String(ev.eventId);
    switch (ev.eventType) {
      case ET.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        out.started = at;
        break;
      case ET.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
        out.continuedAsNew = true;
        break;
      case ET.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: {
        const name = ev.activityTaskScheduledEventAttributes?.activityType?.name ?? '?';
        scheduled.set(id, { name, at });
        out.activities[name] = (out.activities[name] ?? 0) + 1;
        break;
      }
      case ET.EVENT_TYPE_ACTIVITY_TASK_STARTED:
        startedAt.set(String(ev.activityTaskStartedEventAttributes?.scheduledEventId), at);
        break;
      case ET.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
      case ET.EVENT_TYPE_ACTIVITY_TASK_FAILED:
      case ET.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: {
        const attrs =
          ev.activityTaskCompletedEventAttributes ??
          ev.activityTaskFailedEventAttributes ??
          ev.activityTaskTimedOutEventAttributes;
        const sid = String(attrs?.scheduledEventId);
        const s = scheduled.get(sid);
        if (!s) break;
        if (REGISTRY_ACTIVITIES.has(s.name)) {
          out.registry ??= {
            name: s.name,
            scheduled: s.at,
            started: startedAt.get(sid) ?? Number.NaN,
            completed: at,
          };
        } else {
          out.kubeActivityMs += at - s.at;
        }
        break;
      }
    }
  }
  return out;
}

/** Description figures of a workflow's current run: history length (events) and size (bytes). */
export async function historyFigures(
  client: Client,
  workflowId: string,
): Promise<{ runId: string; length: number; sizeBytes: number }> {
  const d = await client.workflow.getHandle(workflowId).describe();
  return { runId: d.runId, length: d.historyLength, sizeBytes: d.historySize ?? Number.NaN };
}

/** Terminates the open runs of `ids` (best effort, at most `parallel` calls in flight). */
export async function terminateAll(client: Client, ids: readonly string[], parallel = 16): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(parallel, ids.length) }, async () => {
      for (;;) {
        const i = next++;
        if (i >= ids.length) return;
        await client.workflow
          .getHandle(ids[i]!)
          .terminate('benchmark run over')
          .catch(() => undefined);
      }
    }),
  );
}
