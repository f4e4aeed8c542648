/**
 * A TCP forwarder in front of a real server (the stack's kube-apiserver) for transport tests: it counts
 * the connections clients open through it and can play the server side of two keep-alive hazards. TLS
 * passes through untouched (the client still verifies the apiserver's certificate, whose SAN is the
 * loopback IP, whatever the port). Bound to 127.0.0.1 only.
 */
import { type AddressInfo, createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';

export class TcpProxy {
  /** Connections accepted so far. */
  connections = 0;
  /** Connections reset by {@link resetOnNextUse}. */
  resets = 0;
  private server?: Server;
  private readonly open = new Set<Socket>();
  /** Connections that are reset (without forwarding) the next time the client sends on them. */
  private readonly armed = new Set<Socket>();

  constructor(private readonly upstream: { host: string; port: number }) {}

  /** Starts listening; resolves with the port. */
  async start(): Promise<number> {
    this.server = createServer((client) => {
      this.connections++;
      this.open.add(client);
      const up = tcpConnect(this.upstream);
      client.on('data', (chunk) => {
        if (this.armed.has(client)) {
          // The server "closed" this idle connection just as the client reused it: the request is never
          // forwarded, the client sees a reset.
          this.armed.delete(client);
          this.resets++;
          up.destroy();
          client.resetAndDestroy();
          return;
        }
        up.write(chunk);
      });
      up.on('data', (chunk) => client.write(chunk));
      const done = () => {
        this.open.delete(client);
        this.armed.delete(client);
        client.destroy();
        up.destroy();
      };
      client.on('close', done);
      client.on('error', done);
      up.on('close', done);
      up.on('error', done);
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    return (this.server.address() as AddressInfo).port;
  }

  /** Connections open now. */
  openConnections(): number {
    return this.open.size;
  }

  /**
   * Every connection open now is reset the next time the client sends on it, before anything reaches the
   * server (the race of a server closing an idle keep-alive connection as the client reuses it).
   */
  resetOnNextUse(): void {
    for (const s of this.open) this.armed.add(s);
  }

  /** Closes every open connection cleanly (FIN), as a server ending idle connections does. */
  closeAll(): void {
    for (const s of this.open) s.end();
  }

  async stop(): Promise<void> {
    for (const s of this.open) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}
