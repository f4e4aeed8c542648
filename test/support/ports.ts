/**
 * Ports for the listeners a test (or bench) tells a child process to open: the operator's probe and
 * metrics addresses, the worker runtime's Prometheus endpoint.
 *
 * Asking the kernel for port 0 and closing it again races: the port goes back to the ephemeral range, and
 * any outgoing connection made before the child binds (the suite makes many, to the apiserver, Temporal
 * and the registry) may take it as its local port, so the child dies with EADDRINUSE. So the ports come
 * from a window BELOW the kernel's ephemeral range, which the kernel never hands out on its own; only
 * explicit binds use it. Each process starts at a pid-derived offset in the window and counts up, so the
 * ports one process hands out are distinct, and each candidate is test-bound first to skip one that a
 * listener (another process, the local stack) already holds.
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/** Lowest port handed out; the local stack's fixed ports (scripts/stack/paths.ts) are all below it. */
const WINDOW_LOW = 24_000;

/** First port of the kernel's ephemeral range (Linux: /proc/sys/net/ipv4/ip_local_port_range), else 32768. */
function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 0 ? low : 32_768;
  } catch {
    return 32_768;
  }
}

const windowHigh = Math.min(ephemeralLow(), 32_768); // exclusive
let next = WINDOW_LOW + ((process.pid * 97) % Math.max(1, windowHigh - WINDOW_LOW));

function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/**
 * A TCP port on 127.0.0.1, in [24000, start of the ephemeral range), not bound when this returns and not
 * returned before by this process. Throws when the ephemeral range starts at or below 24000 (no window
 * outside it) or when no port in the window can be bound.
 */
export async function freePort(): Promise<number> {
  const size = windowHigh - WINDOW_LOW;
  if (size <= 0) {
    throw new Error(
      `freePort: the ephemeral port range starts at ${windowHigh}, leaving no window above ${WINDOW_LOW}`,
    );
  }
  for (let tried = 0; tried < size; tried++) {
    const port = next;
    next = next + 1 >= windowHigh ? WINDOW_LOW : next + 1;
    if (await canBind(port)) return port;
  }
  throw new Error(`freePort: every port in [${WINDOW_LOW}, ${windowHigh}) is bound`);
}
