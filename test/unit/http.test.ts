import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { type HttpServers, scrapeText, startHttp } from '../../src/http.js';
import { createLogger } from '../../src/log.js';
import { createOperatorMetrics } from '../../src/metrics.js';

const log = createLogger('silent');
const loopback0 = { host: '127.0.0.1', port: 0 };
let servers: HttpServers | undefined;

afterEach(async () => {
  await servers?.close();
  servers = undefined;
});

describe('probe and metrics endpoints', () => {
  it('answers /healthz ok and /readyz from the checks, with controller-runtime style verbose output', async () => {
    let temporal: string | undefined = 'not connected';
    servers = await startHttp({
      probeAddr: loopback0,
      metricsAddr: null,
      registry: new Registry(),
      readyChecks: [
        { name: 'temporal', check: () => temporal },
        { name: 'watcher', check: async () => undefined },
      ],
      log,
    });
    const base = `http://${servers.probe}`;
    expect(servers.metrics).toBeUndefined();
    expect(await fetch(`${base}/healthz`).then((r) => r.text())).toBe('ok');

    let res = await fetch(`${base}/readyz`);
    expect(res.status).toBe(503);
    expect(await res.text()).toBe('[-]temporal failed: not connected\n[+]watcher ok\nreadyz check failed\n');
    res = await fetch(`${base}/readyz/watcher`);
    expect(res.status).toBe(200);

    temporal = undefined;
    res = await fetch(`${base}/readyz`);
    expect([res.status, await res.text()]).toEqual([200, 'ok']);
    expect(await fetch(`${base}/readyz?verbose`).then((r) => r.text())).toContain('[+]temporal ok');
    expect((await fetch(`${base}/readyz/nope`)).status).toBe(404);
    expect((await fetch(`${base}/metrics`)).status).toBe(404); // metrics live on their own listener
  });

  it('counts a throwing check as not ready', async () => {
    servers = await startHttp({
      probeAddr: loopback0,
      metricsAddr: null,
      registry: new Registry(),
      readyChecks: [
        {
          name: 'temporal',
          check: () => {
            throw new Error('boom');
          },
        },
      ],
      log,
    });
    const res = await fetch(`http://${servers.probe}/readyz`);
    expect(res.status).toBe(503);
    expect(await res.text()).toContain('[-]temporal failed: boom');
  });

  it('serves the registry plus the extra exporters on /metrics, and survives a dead exporter', async () => {
    const exporter = createServer((_req, res) => {
      res.end('# HELP temporal_x x\n# TYPE temporal_x counter\ntemporal_x{task_queue="q"} 3\n');
    });
    await new Promise<void>((r) => exporter.listen(0, '127.0.0.1', r));
    const port = (exporter.address() as AddressInfo).port;
    const registry = new Registry();
    createOperatorMetrics(registry);
    servers = await startHttp({
      probeAddr: null,
      metricsAddr: loopback0,
      registry,
      readyChecks: [],
      extraMetrics: [
        scrapeText(`http://127.0.0.1:${port}/metrics`),
        scrapeText('http://127.0.0.1:1/metrics', 500),
      ],
      log,
    });
    try {
      const res = await fetch(`http://${servers.metrics}/metrics`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe(registry.contentType);
      const text = await res.text();
      expect(text).toContain('# TYPE cocoon_operator_subagent_rebuild_total counter');
      expect(text).toContain('temporal_x{task_queue="q"} 3');
    } finally {
      await new Promise((r) => exporter.close(r));
    }
  });

  it('serves all three paths from one listener when both addresses are the same', async () => {
    const probe = await startHttp({
      probeAddr: loopback0,
      metricsAddr: null,
      registry: new Registry(),
      readyChecks: [],
      log,
    });
    const port = Number(probe.probe!.split(':').pop());
    await probe.close();
    servers = await startHttp({
      probeAddr: { host: '127.0.0.1', port },
      metricsAddr: { host: '127.0.0.1', port },
      registry: new Registry(),
      readyChecks: [],
      log,
    });
    expect(servers.probe).toBe(servers.metrics);
    expect((await fetch(`http://${servers.probe}/metrics`)).status).toBe(200);
    expect((await fetch(`http://${servers.probe}/healthz`)).status).toBe(200);
  });

  it('fails to start when the address is taken, naming the setting and the address', async () => {
    servers = await startHttp({
      probeAddr: loopback0,
      metricsAddr: null,
      registry: new Registry(),
      readyChecks: [],
      log,
    });
    const port = Number(servers.probe!.split(':').pop());
    await expect(
      startHttp({
        probeAddr: { host: '127.0.0.1', port },
        metricsAddr: null,
        registry: new Registry(),
        readyChecks: [],
        log,
      }),
    ).rejects.toMatchObject({
      code: 'EADDRINUSE',
      message: expect.stringMatching(new RegExp(`^PROBE_ADDR 127\\.0\\.0\\.1:${port}: listen EADDRINUSE`)),
    });
  });
});
