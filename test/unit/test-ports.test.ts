/**
 * The test suite's port allocator (test/support/ports.ts): the ports it hands the operator child for its
 * probe and metrics listeners must lie outside the kernel's ephemeral range, or an outgoing connection can
 * take one between allocation and the child's bind (the EADDRINUSE startup failures it replaced).
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { freePort } from '../support/ports.js';

const ephemeralLow = Number(
  readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0],
);

function listen(port: number): Promise<ReturnType<typeof createServer>> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(port, '127.0.0.1', () => resolve(s));
  });
}

describe('freePort', () => {
  it('hands out distinct ports below the ephemeral range, each bindable', async () => {
    const ports = [];
    for (let i = 0; i < 20; i++) ports.push(await freePort());
    expect(new Set(ports).size).toBe(ports.length);
    for (const p of ports) {
      expect(p).toBeGreaterThanOrEqual(24_000);
      expect(p).toBeLessThan(ephemeralLow);
      const s = await listen(p);
      await new Promise((r) => s.close(r));
    }
  });

  it('skips a port another listener holds', async () => {
    const held = await freePort();
    const s = await listen(held + 1); // the next candidate, unless held was the window's last port
    try {
      const p = await freePort();
      expect(p).not.toBe(held + 1);
      expect(p).not.toBe(held);
    } finally {
      await new Promise((r) => s.close(r));
    }
  });
});
