/**
 * Registry activities: HEAD, GET and DELETE of a snapshot tag. They run on the controller's own registry task
 * queue, whose worker's maxConcurrentActivityTaskExecutions is the concurrency knob
 * (docs/architecture.md#the-concurrency-knob). Cancellation of the activity aborts the HTTP request.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { SnapshotArtifact } from '../api/keys.js';
import { RegistryError } from '../registry/types.js';

/** The registry operations the operator needs (src/registry implements them over the OCI API). */
export interface ManifestRegistry {
  hasManifest(name: string, reference: string, opts?: { signal?: AbortSignal }): Promise<boolean>;
  deleteManifest(name: string, reference: string, opts?: { signal?: AbortSignal }): Promise<void>;
  manifestAnnotations(
    name: string,
    reference: string,
    opts?: { signal?: AbortSignal },
  ): Promise<Record<string, string> | undefined>;
}

function cancellationSignal(): AbortSignal | undefined {
  try {
    return Context.current().cancellationSignal;
  } catch {
    return undefined; // called outside an activity (unit tests)
  }
}

/**
 * The activity failure for `err` from the registry client, its message `<op> <vmName>:<tag>: <error>`.
 * A `RegistryError` is not retried by the activity's retry policy: the client has already retried what the
 * reference retries (src/registry/http.ts: 3 attempts on the reference's statuses and network errors), and
 * what it does not retry (a request timeout of 30 s, an auth or protocol error) the workflow retries with
 * its own backoff, with the error on the CR's status meanwhile. Retried here too, a hung registry reached
 * the status only after 3 × 30 s (found by helper-63), a 503 after 9 requests. Any other error (a bug, not
 * an answer of the registry) keeps the activity's retries.
 */
function asFailure(op: string, vmName: string, tag: string, err: unknown): ApplicationFailure {
  const e = err as { message?: string; status?: number };
  return ApplicationFailure.create({
    type: 'RegistryError',
    message: `${op} ${vmName}:${tag}: ${e?.message ?? String(err)}`,
    nonRetryable: err instanceof RegistryError,
    details: [{ status: e?.status }],
  });
}

/** Builds the registry activities around one registry client. */
export function createRegistryActivities(deps: { registry: ManifestRegistry }) {
  return {
    /** HEAD `<vmName>:<tag>`: true on 200, false on 404; any other outcome fails the activity. */
    async hasManifest(input: { vmName: string; tag: string }): Promise<boolean> {
      try {
        return await deps.registry.hasManifest(input.vmName, input.tag, { signal: cancellationSignal() });
      } catch (err) {
        throw asFailure('probe', input.vmName, input.tag, err);
      }
    },
    /**
     * GET `<vmName>:<tag>`: whether it exists and the image it was taken under (its manifest annotation
     * `cocoonstack.snapshot.baseimage`, '' when it records none); any other outcome fails the activity.
     */
    async snapshotImage(input: {
      vmName: string;
      tag: string;
    }): Promise<{ present: boolean; image: string }> {
      try {
        const a = await deps.registry.manifestAnnotations(input.vmName, input.tag, {
          signal: cancellationSignal(),
        });
        return { present: a !== undefined, image: a?.[SnapshotArtifact.annotationBaseImage] ?? '' };
      } catch (err) {
        throw asFailure('read', input.vmName, input.tag, err);
      }
    },
    /** DELETE `<vmName>:<tag>`; a 404 counts as success. */
    async deleteManifest(input: { vmName: string; tag: string }): Promise<void> {
      try {
        await deps.registry.deleteManifest(input.vmName, input.tag, { signal: cancellationSignal() });
      } catch (err) {
        throw asFailure('delete', input.vmName, input.tag, err);
      }
    },
  };
}

export type RegistryActivities = ReturnType<typeof createRegistryActivities>;
