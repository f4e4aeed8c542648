/**
 * The simulator's control API (node:http), for tests and humans (docs/development.md#simulator):
 *   GET    /healthz  → 200 "ok" once started and while its pod informers are synced (a list or watch failing
 *                      over 15 s is not), else 503 with the reason
 *   GET    /state    → SimState JSON (VMs, local snapshots, intents, tracked pods, fault rules)
 *   GET    /faults   → FaultRule[]
 *   POST   /faults   → add a rule (FaultRuleInput JSON) → 201 {rule, crashed}; 400 on an invalid rule
 *   DELETE /faults   → clear every rule → 204
 *   POST   /crash    → {namespace, pod}: that pod's VM dies → 200 {crashed: true}; 404 when it has no VM
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { FaultRuleError, type FaultRuleInput } from './faults.js';
import type { VkSimulator } from './sim.js';

const MAX_BODY_BYTES = 64 * 1024;

function send(res: ServerResponse, status: number, body?: unknown): void {
  if (body === undefined) {
    res.writeHead(status).end();
    return;
  }
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res
    .writeHead(status, { 'content-type': typeof body === 'string' ? 'text/plain' : 'application/json' })
    .end(text);
}

async function readJSON(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).byteLength;
    if (size > MAX_BODY_BYTES) throw new FaultRuleError('request body too large');
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (!text) return {};
  try {
    return JSON.parse(text);
  } catch {
    throw new FaultRuleError('request body is not JSON');
  }
}

/** Splits `host:port` (IPv6 hosts in brackets). Throws on a missing or bad port. */
export function parseHostPort(addr: string): { host: string; port: number } {
  const m = /^\[?([^\]]*)\]?:(\d+)$/.exec(addr.trim());
  if (!m) throw new Error(`control address must be host:port, got ${JSON.stringify(addr)}`);
  return { host: m[1] || '127.0.0.1', port: Number(m[2]) };
}

/** Starts the control server on `addr` (`host:port`). Resolves once listening; rejects if the bind fails. */
export async function startControlServer(
  sim: VkSimulator,
  addr: string,
): Promise<{ close(): Promise<void> }> {
  const { host, port } = parseHostPort(addr);
  const server = createServer((req, res) => {
    void handle(sim, req, res).catch((err) => send(res, 500, { error: (err as Error).message }));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

async function handle(sim: VkSimulator, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = new URL(req.url ?? '/', 'http://local').pathname;
  const route = `${req.method} ${path}`;
  try {
    switch (route) {
      case 'GET /healthz': {
        const problem = sim.healthProblem();
        return problem ? send(res, 503, problem) : send(res, 200, 'ok');
      }
      case 'GET /state':
        return send(res, 200, sim.state());
      case 'GET /faults':
        return send(res, 200, sim.faults.list());
      case 'POST /faults':
        return send(res, 201, await sim.addFault((await readJSON(req)) as FaultRuleInput));
      case 'DELETE /faults':
        sim.faults.clear();
        return send(res, 204);
      case 'POST /crash': {
        const body = (await readJSON(req)) as { namespace?: unknown; pod?: unknown };
        if (typeof body.namespace !== 'string' || typeof body.pod !== 'string') {
          return send(res, 400, { error: 'body must be {"namespace": string, "pod": string}' });
        }
        const crashed = await sim.crash(body.namespace, body.pod);
        return crashed
          ? send(res, 200, { crashed: true })
          : send(res, 404, { error: `pod ${body.namespace}/${body.pod} has no VM on ${sim.nodeName}` });
      }
      default:
        return send(res, 404, { error: `no route ${route}` });
    }
  } catch (err) {
    if (err instanceof FaultRuleError) return send(res, 400, { error: err.message });
    throw err;
  }
}
