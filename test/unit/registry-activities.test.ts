/**
 * The registry activities' failures (src/activities/registry.ts `asFailure`): an error the registry client
 * reports is final for the activity (nonRetryable), since the client has already retried what is worth
 * retrying and the workflow's backoff does the rest; any other error keeps the activity's retries. The
 * client is the product's, against an in-process HTTP server (the one boundary faked).
 */
import { ApplicationFailure } from '@temporalio/common';
import { afterEach, describe, expect, it } from 'vitest';
import { createRegistryActivities } from '../../src/activities/registry.js';
import { OCIRegistryClient } from '../../src/registry/client.js';
import { multiKeychain } from '../../src/registry/credentials.js';
import { startServer } from './registry-fake.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

async function failureOf(p: Promise<unknown>): Promise<ApplicationFailure> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ApplicationFailure);
  return err as ApplicationFailure;
}

describe('registry activity failures', () => {
  it("a registry answering 503: the client's 3 attempts, then a non-retryable RegistryError naming the call (before: 3 more activity attempts, 9 requests)", async () => {
    const srv = await startServer((req, res) => {
      res.writeHead(req.url === '/v2/' ? 200 : 503).end();
    });
    cleanups.push(() => srv.close());
    const registry = new OCIRegistryClient(srv.authority, {
      keychain: multiKeychain(),
      retry: { initialDelayMs: 5 },
    });
    cleanups.push(() => registry.close());
    const activities = createRegistryActivities({ registry });
    const failure = await failureOf(activities.hasManifest({ vmName: 'vk-a', tag: 'hibernate' }));
    expect(failure).toMatchObject({ type: 'RegistryError', nonRetryable: true });
    expect(failure.message).toMatch(/^probe vk-a:hibernate: /);
    expect(srv.hits('/v2/vk-a/manifests/').length).toBe(3);
  });

  it('a request that times out is not retried by the activity either (helper-63: a hung registry reached the CR status after 3 × 30 s)', async () => {
    const srv = await startServer((req, res) => {
      if (req.url === '/v2/') res.writeHead(200).end();
      // Manifest requests get no answer.
    });
    cleanups.push(() => srv.close());
    const registry = new OCIRegistryClient(srv.authority, { keychain: multiKeychain(), timeoutMs: 200 });
    cleanups.push(() => registry.close());
    const activities = createRegistryActivities({ registry });
    const failure = await failureOf(activities.deleteManifest({ vmName: 'vk-a', tag: 'hibernate' }));
    expect(failure).toMatchObject({ type: 'RegistryError', nonRetryable: true });
    expect(failure.message).toMatch(/^delete vk-a:hibernate: .*no answer within 200ms/);
  });

  it('an error that is not the registry client’s (a bug) keeps the activity’s retries', async () => {
    const activities = createRegistryActivities({
      registry: {
        hasManifest: async () => {
          throw new TypeError('cannot read properties of undefined');
        },
        deleteManifest: async () => undefined,
        manifestAnnotations: async () => undefined,
      },
    });
    const failure = await failureOf(activities.hasManifest({ vmName: 'vk-a', tag: 'hibernate' }));
    expect(failure).toMatchObject({ type: 'RegistryError', nonRetryable: false });
  });
});
