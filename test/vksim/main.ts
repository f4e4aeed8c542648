/**
 * Process entry of the vk-cocoon simulator: `npx tsx test/vksim/main.ts`.
 * Env: KUBECONFIG (required unless in-cluster), OCI_REGISTRY (required, host:port), VKSIM_NODE_NAME
 * (default cocoon-pool), VKSIM_POOL (default default), VKSIM_CPU_CLASS (optional), VKSIM_CONTROL_ADDR
 * (default 127.0.0.1:18089), VKSIM_BIND (default true; "false" when a kube-scheduler runs), VKSIM_SEATS (default 1000),
 * VKSIM_LOG_LEVEL (default info). Logs JSON lines to stdout; SIGTERM/SIGINT stop it gracefully.
 */
import pino from 'pino';
import { loadKubeConfig } from '../../src/kube/client.js';
import { VkSimulator } from './sim.js';

const logger = pino({ name: 'vksim', level: process.env.VKSIM_LOG_LEVEL || 'info' });

async function main(): Promise<void> {
  const registry = process.env.OCI_REGISTRY;
  if (!registry) throw new Error('OCI_REGISTRY is required (host:port of the registry)');
  const sim = new VkSimulator({
    kube: loadKubeConfig(),
    registry,
    nodeName: process.env.VKSIM_NODE_NAME || undefined,
    pool: process.env.VKSIM_POOL || undefined,
    cpuClass: process.env.VKSIM_CPU_CLASS || undefined,
    controlAddr: process.env.VKSIM_CONTROL_ADDR || '127.0.0.1:18089',
    bind: process.env.VKSIM_BIND !== 'false',
    seats: process.env.VKSIM_SEATS ? Number(process.env.VKSIM_SEATS) : undefined,
    log: (level, msg, fields) => logger[level](fields ?? {}, msg),
  });
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'stopping');
    sim
      .stop()
      .then(() => process.exit(0))
      .catch((err) => {
        logger.error({ err }, 'stop failed');
        process.exit(1);
      });
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  await sim.start();
}

main().catch((err) => {
  logger.fatal({ err }, 'vk simulator failed to start');
  process.exit(1);
});
