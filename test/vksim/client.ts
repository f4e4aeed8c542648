/**
 * A tiny typed client of the simulator's control API (test/vksim/control.ts) for tests. The base URL
 * defaults to VKSIM_URL, else http://127.0.0.1:18089. Every method throws on a non-2xx answer.
 */
import type { FaultRule, FaultRuleInput } from './faults.js';
import type { SimState } from './sim.js';

export type { FaultRule, FaultRuleInput, SimState };

export class VkSimClient {
  readonly baseUrl: string;

  constructor(baseUrl = process.env.VKSIM_URL || 'http://127.0.0.1:18089') {
    this.baseUrl = baseUrl.replace(/\/+$/, '');
  }

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const res = await fetch(`${this.baseUrl}${path}`, {
      method,
      headers: body === undefined ? undefined : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(15_000),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`vksim ${method} ${path}: HTTP ${res.status} ${text}`);
    return (text && res.headers.get('content-type')?.includes('json') ? JSON.parse(text) : text) as T;
  }

  /** True when GET /healthz answers 200. Never throws. */
  async healthy(): Promise<boolean> {
    try {
      await this.call<string>('GET', '/healthz');
      return true;
    } catch {
      return false;
    }
  }

  /** Adds a fault rule, e.g. `{vm: '^vk-ns-demo-0$', op: 'hibernate.push.fail', count: 1}`. */
  addFault(rule: FaultRuleInput): Promise<{ rule: FaultRule; crashed: string[] }> {
    return this.call('POST', '/faults', rule);
  }

  /** Lists the fault rules still armed. */
  faults(): Promise<FaultRule[]> {
    return this.call('GET', '/faults');
  }

  /** Removes every fault rule. */
  async clearFaults(): Promise<void> {
    await this.call('DELETE', '/faults');
  }

  /** Kills the VM of pod `namespace/pod` (eviction: pod deleted, Failed/VMGone). */
  async crash(namespace: string, pod: string): Promise<void> {
    await this.call('POST', '/crash', { namespace, pod });
  }

  /** The simulator's model: VMs, local snapshots, intents, tracked pods, faults. */
  state(): Promise<SimState> {
    return this.call('GET', '/state');
  }
}
