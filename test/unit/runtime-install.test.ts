/**
 * Installing the Temporal runtime with the SDK's Prometheus exporter (src/worker.ts `installRuntime`). The
 * fake `Runtime` throws the SDK's real message for a taken bind address, captured with `Runtime.install`
 * against a port a local server held; the SDK accepts a second `install` after such a failure.
 */
import type { Runtime, RuntimeOptions } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { installRuntime } from '../../src/worker.js';

const TAKEN = 'Failed to start prometheus metrics exporter: Address already in use (os error 98)';

/** A `Runtime` whose `install` throws `failures[i]` on call i (undefined: succeeds) and records each bind address. */
function fakeRuntime(failures: (string | undefined)[]) {
  const binds: (string | undefined)[] = [];
  const runtime = {
    install(options: RuntimeOptions) {
      const metrics = options.telemetryOptions?.metrics as
        | { prometheus?: { bindAddress?: string } }
        | undefined;
      binds.push(metrics?.prometheus?.bindAddress);
      const failure = failures[binds.length - 1];
      if (failure) throw new Error(failure);
    },
  } as unknown as typeof Runtime;
  return { runtime, binds };
}

const options: RuntimeOptions = { shutdownSignals: [], telemetryOptions: { logging: { forward: {} } } };

describe('installRuntime', () => {
  it("'auto' whose port another socket took meanwhile: retried on a new port, and that port is returned", async () => {
    const { runtime, binds } = fakeRuntime([TAKEN, TAKEN, undefined]);
    const addr = await installRuntime(runtime, options, 'auto');
    expect(binds).toHaveLength(3);
    for (const b of binds) expect(b).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(binds[2]).toBe(`127.0.0.1:${addr?.port}`);
    expect(addr?.host).toBe('127.0.0.1');
  });

  it("'auto' gives up after 5 taken ports with the SDK's error", async () => {
    const { runtime, binds } = fakeRuntime(Array(6).fill(TAKEN));
    await expect(installRuntime(runtime, options, 'auto')).rejects.toThrow(
      new RegExp(
        `^TEMPORAL_METRICS_ADDR 127\\.0\\.0\\.1:\\d+ \\(a free loopback port, attempt 5\\): ${TAKEN.replace(/[()]/g, '\\$&')}$`,
      ),
    );
    expect(binds).toHaveLength(5);
  });

  it('a configured address that is taken fails at once, naming the setting and the address (no retry on another port)', async () => {
    const { runtime, binds } = fakeRuntime([TAKEN, undefined]);
    await expect(installRuntime(runtime, options, { host: '0.0.0.0', port: 9464 })).rejects.toThrow(
      `TEMPORAL_METRICS_ADDR 0.0.0.0:9464: ${TAKEN}`,
    );
    expect(binds).toEqual(['0.0.0.0:9464']);
  });

  it("'auto' with another install error fails at once", async () => {
    const { runtime, binds } = fakeRuntime(['Runtime is already installed', undefined]);
    await expect(installRuntime(runtime, options, 'auto')).rejects.toThrow('Runtime is already installed');
    expect(binds).toHaveLength(1);
  });

  it('no exporter (null): installs without one and returns null; the other options pass through', async () => {
    const seen: RuntimeOptions[] = [];
    const runtime = { install: (o: RuntimeOptions) => seen.push(o) } as unknown as typeof Runtime;
    expect(await installRuntime(runtime, options, null)).toBeNull();
    expect(seen).toEqual([options]);
  });
});
