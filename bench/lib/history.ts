/**
 * Reads VM workflow histories from Temporal to say where a transition's time went: when the workflow
 * started (first signal), when its registry probe was scheduled, started (a slot was free) and completed,
 * and how many workflow tasks and activities it took. Timestamps are the Temporal server's (same host
 * clock as the benchmark's).
 */
import type { Client } from '@temporalio/client';
import proto from '@temporalio/proto';

const ET = proto.temporal.api.enums.v1.EventType;

type Ts = { seconds?: number | { toNumber(): number } | null; nanos?: number | null } | null | undefined;

function tsMs(ts: Ts): number {
  if (!ts) return Number.NaN;
  const s = typeof ts.seconds === 'number' ? ts.seconds : (ts.seconds?.toNumber() ?? 0);
  return s * 1000 + (ts.nanos ?? 0) / 1e6;
}

/** Timeline of one workflow run (epoch ms). Registry activity fields are those of the first such call. */
export interface RunTimeline {
  workflowId: string;
  events: number;
  started: number;
  workflowTasks: number;
  activities: Record<string, number>;
  /** Wall time activities of the workflow queue spent scheduled→completed, summed (ms). */
  kubeActivityMs: number;
  registry?: { name: string; scheduled: number; started: number; completed: number };
  /** Time of the last event read. */
  last: number;
  continuedAsNew: boolean;
}

/** Activity type names served by the registry task queue. */
const REGISTRY_ACTIVITIES = new Set(['hasManifest', 'deleteManifest']);

/** Reads the current run of `workflowId` and summarizes it (see RunTimeline). */
export async function runTimeline(client: Client, workflowId: string): Promise<RunTimeline> {
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  const scheduled = new Map<string, { name: string; at: number }>();
  const startedAt = new Map<string, number>();
  const out: RunTimeline = {
    workflowId,
    events: history.events?.length ?? 0,
    started: Number.NaN,
    workflowTasks: 0,
    activities: {},
    kubeActivityMs: 0,
    last: Number.NaN,
    continuedAsNew: false,
  };
  for (const ev of history.events ?? []) {
    const at = tsMs(ev.eventTime as Ts);
    out.last = at;
    const id = String(ev.eventId);
    switch (ev.eventType) {
      case ET.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        out.started = at;
        break;
      case ET.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
        out.workflowTasks++;
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
