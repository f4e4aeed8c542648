/**
 * Kubernetes API errors as one readable line and a Temporal failure with the right retry policy
 * (src/kube/errors.ts), from client-node's ApiException as it throws it (the Status as a JSON string body).
 */
import { ApiException } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { isPermanentKubeError, kubeErrorMessage, kubeFailure, notFound } from '../../src/kube/errors.js';

function apiError(code: number, status?: Record<string, unknown>, auditId = 'a1'): ApiException<unknown> {
  return new ApiException(code, 'Unknown API Status Code!', status ? `${JSON.stringify(status)}\n` : '', {
    'audit-id': auditId,
    'content-type': 'application/json',
  });
}

const invalid = {
  kind: 'Status',
  apiVersion: 'v1',
  status: 'Failure',
  message:
    'Pod "demo-0" is invalid: spec.containers[0].resources.limits[ephemeral-storage]: Invalid value: "-5Gi": must be greater than or equal to 0',
  reason: 'Invalid',
  code: 422,
};

describe('kubeErrorMessage', () => {
  it("is the apiserver's message, reason and code, the same for every request (no headers, no audit id)", () => {
    const a = kubeErrorMessage(apiError(422, invalid, 'audit-1'));
    const b = kubeErrorMessage(apiError(422, invalid, 'audit-2'));
    expect(a).toBe(`${invalid.message} (Invalid, HTTP 422)`);
    expect(b).toBe(a);
  });

  it('falls back to the code without a Status body, and to the message of a transport error', () => {
    expect(kubeErrorMessage(apiError(503))).toBe('HTTP 503');
    expect(kubeErrorMessage(new Error('connect ECONNREFUSED 127.0.0.1:6443'))).toBe(
      'connect ECONNREFUSED 127.0.0.1:6443',
    );
  });
});

describe('kubeFailure', () => {
  it('is non-retryable for 4xx a retry cannot change, retryable for 408, 409, 429, 5xx and transport errors', () => {
    for (const code of [400, 403, 404, 410, 422])
      expect(isPermanentKubeError(apiError(code)), `${code}`).toBe(true);
    for (const code of [408, 409, 429, 500, 503])
      expect(isPermanentKubeError(apiError(code)), `${code}`).toBe(false);
    expect(isPermanentKubeError(new Error('socket hang up'))).toBe(false);
    const f = kubeFailure(apiError(422, invalid));
    expect(f).toMatchObject({
      type: 'KubeApiInvalid',
      nonRetryable: true,
      message: kubeErrorMessage(apiError(422, invalid)),
    });
    expect(kubeFailure(apiError(500), 'list pods')).toMatchObject({
      type: 'KubeApi500',
      nonRetryable: false,
      message: 'list pods: HTTP 500',
    });
  });

  it('an object gone under an activity is a NotFound the workflows test for, not retried, and BENIGN (the worker logs it at DEBUG: deleting a set with its pods logged one WARN with a stack per pod)', () => {
    expect(notFound('pod ns/demo-0')).toMatchObject({
      type: 'NotFound',
      message: 'pod ns/demo-0 not found',
      nonRetryable: true,
      category: 'BENIGN',
    });
  });
});
