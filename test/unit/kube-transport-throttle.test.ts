/**
 * The typed clients' transport (src/kube/transport.ts) against a local HTTP server standing in for the
 * apiserver: a 429 with Retry-After is sent again after the wait it asks for, as client-go does, so that a
 * transient rejection (API Priority and Fairness, a custom resource whose storage is still initializing in
 * a namespace created a moment ago) never reaches an activity as a failure; a 429 without Retry-After, and
 * the last of the bounded retries, are returned to the caller unchanged.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { makeKubeClients, statusCodeOf } from '../../src/kube/client.js';
import { TOO_MANY_REQUESTS_RETRIES } from '../../src/kube/transport.js';
import { kubeConfigFor } from '../support/kubeconfig.js';

let server: http.Server;
let base: string;
/** What the server answers next: each entry is used once, then 200 with an empty list. */
let script: { status: number; retryAfter?: string }[] = [];
let seen: { method: string; at: number }[] = [];

beforeAll(async () => {
  server = http.createServer((req, res) => {
    seen.push({ method: req.method ?? '', at: Date.now() });
    req.resume();
    const next = script.shift();
    if (next) {
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (next.retryAfter !== undefined) headers['retry-after'] = next.retryAfter;
      res.writeHead(next.status, headers);
      res.end(
        JSON.stringify({
          kind: 'Status',
          apiVersion: 'v1',
          status: 'Failure',
          message: 'storage is (re)initializing',
          reason: 'TooManyRequests',
          code: next.status,
        }),
      );
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ kind: 'PodList', apiVersion: 'v1', metadata: {}, items: [] }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise((r) => server.close(r));
});

beforeEach(() => {
  script = [];
  seen = [];
});

function clients(opts: { requestTimeoutMs?: number } = {}) {
  return makeKubeClients(kubeConfigFor(base), opts);
}

describe('429 Too Many Requests', () => {
  it('sends a request the server throttled again after the Retry-After it asked for, for reads and writes alike', async () => {
    const kube = clients();
    script = [{ status: 429, retryAfter: '1' }];
    const list = await kube.core.listNamespacedPod({ namespace: 'fresh' });
    expect(list.items).toEqual([]);
    expect(seen).toHaveLength(2);
    expect(seen[1]!.at - seen[0]!.at).toBeGreaterThanOrEqual(950);

    script = [
      { status: 429, retryAfter: '0' },
      { status: 429, retryAfter: '0' },
    ];
    await kube.core.createNamespacedPod({ namespace: 'fresh', body: { metadata: { name: 'p' } } });
    expect(seen.slice(2).map((s) => s.method)).toEqual(['POST', 'POST', 'POST']);
    expect(kube.transport.stats().throttledRetries).toBe(3);
  });

  it('returns a 429 without Retry-After to the caller at once (nothing says when to come back)', async () => {
    const kube = clients();
    script = [{ status: 429 }];
    const err = await kube.core.listNamespacedPod({ namespace: 'fresh' }).catch((e: unknown) => e);
    expect(statusCodeOf(err)).toBe(429);
    expect(seen).toHaveLength(1);
    expect(kube.transport.stats().throttledRetries).toBe(0);
  });

  it(`gives up after ${TOO_MANY_REQUESTS_RETRIES} retries and returns the last 429`, async () => {
    const kube = clients();
    script = Array.from({ length: TOO_MANY_REQUESTS_RETRIES + 1 }, () => ({ status: 429, retryAfter: '0' }));
    const err = await kube.core.listNamespacedPod({ namespace: 'fresh' }).catch((e: unknown) => e);
    expect(statusCodeOf(err)).toBe(429);
    expect(seen).toHaveLength(TOO_MANY_REQUESTS_RETRIES + 1);
  });

  it('stops waiting when the call is bounded: the request timeout ends a Retry-After wait', async () => {
    const kube = clients({ requestTimeoutMs: 300 });
    script = [{ status: 429, retryAfter: '5' }];
    const started = Date.now();
    const err = await kube.core.listNamespacedPod({ namespace: 'fresh' }).catch((e: unknown) => e);
    expect((err as Error).name).toBe('TimeoutError');
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(seen).toHaveLength(1);
  });
});
