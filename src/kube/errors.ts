/**
 * Kubernetes API errors as short, stable text and as Temporal failures with the right retry policy.
 *
 * client-node's `ApiException` message is an HTTP dump (`HTTP-Code: 422\nMessage: …\nBody: {…}\nHeaders:
 * {…"audit-id":…}`). The headers differ on every request, so a message built from it never repeats: an
 * Event carrying it never folds, and a log line or a status message carrying it is 1 KB of noise. The
 * apiserver's own answer is the `metav1.Status` in the body: its `message` (e.g. `Pod "x" is invalid:
 * spec.containers[0].resources.limits[ephemeral-storage]: Invalid value: "-5Gi": must be greater than or
 * equal to 0`), `reason` (`Invalid`) and `code` (422).
 */
import { ApplicationFailure, ApplicationFailureCategory } from '@temporalio/common';
import { statusCodeOf } from './client.js';

/** The parts of an apiserver `metav1.Status` answer we show. */
export interface KubeStatus {
  code?: number;
  reason?: string;
  message?: string;
}

/** The `metav1.Status` carried by a client-node ApiException's body (a JSON string or object), if any. */
export function kubeStatusOf(err: unknown): KubeStatus | undefined {
  const body = (err as { body?: unknown })?.body;
  let parsed: unknown = body;
  if (typeof body === 'string') {
    try {
      parsed = JSON.parse(body);
    } catch {
      return undefined;
    }
  }
  if (parsed === null || typeof parsed !== 'object') return undefined;
  const s = parsed as Record<string, unknown>;
  if (typeof s.message !== 'string' && typeof s.reason !== 'string') return undefined;
  return {
    code: typeof s.code === 'number' ? s.code : undefined,
    reason: typeof s.reason === 'string' ? s.reason : undefined,
    message: typeof s.message === 'string' ? s.message : undefined,
  };
}

/**
 * A one-line text for any error of a Kubernetes call: `<apiserver message> (<reason>, HTTP <code>)` when
 * the answer carries a Status, else `HTTP <code>` for a Status-less answer, else the error's own message
 * (transport errors: `connect ECONNREFUSED …`). Never contains response headers, so the same rejection
 * gives the same text every time.
 */
export function kubeErrorMessage(err: unknown): string {
  const code = statusCodeOf(err);
  const status = kubeStatusOf(err);
  if (status?.message) {
    const tail = [status.reason, code !== undefined ? `HTTP ${code}` : undefined].filter(Boolean).join(', ');
    return tail ? `${status.message} (${tail})` : status.message;
  }
  if (code !== undefined) return status?.reason ? `${status.reason} (HTTP ${code})` : `HTTP ${code}`;
  return err instanceof Error ? err.message : String(err);
}

/**
 * True for answers a retry cannot change: 4xx except 408 (timeout), 409 (conflict: a re-read can win)
 * and 429 (throttled). 5xx and transport errors (no code) are worth retrying.
 */
export function isPermanentKubeError(err: unknown): boolean {
  const code = statusCodeOf(err);
  return code !== undefined && code >= 400 && code < 500 && code !== 408 && code !== 409 && code !== 429;
}

/**
 * The Temporal failure an activity throws for a failed Kubernetes call: an ApplicationFailure of type
 * `KubeApi<reason or code>` whose message is `kubeErrorMessage(err)` (prefixed `<what>: ` when given);
 * non-retryable when `isPermanentKubeError`, so Temporal does not retry a 422 three times with a stack
 * trace each.
 */
export function kubeFailure(err: unknown, what?: string): ApplicationFailure {
  const status = kubeStatusOf(err);
  const code = statusCodeOf(err);
  return ApplicationFailure.create({
    type: `KubeApi${status?.reason ?? (code !== undefined ? String(code) : 'Error')}`,
    message: what ? `${what}: ${kubeErrorMessage(err)}` : kubeErrorMessage(err),
    nonRetryable: isPermanentKubeError(err),
  });
}

/**
 * The failure an activity throws when the object it acts on is gone (`<what> not found`): type `NotFound`
 * (the entity workflows test for it with `isNotFound` and re-read the world), non-retryable, and BENIGN:
 * the worker logs it at DEBUG instead of a WARN with a stack. A pod or CR deleted under an activity is an
 * expected race (a set deleted with all its pods made one such WARN per pod), not an operator fault.
 */
export function notFound(what: string): ApplicationFailure {
  return ApplicationFailure.create({
    type: 'NotFound',
    message: `${what} not found`,
    nonRetryable: true,
    category: ApplicationFailureCategory.BENIGN,
  });
}
