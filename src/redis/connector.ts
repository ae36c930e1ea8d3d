import { connect as connectTcp, type Socket } from 'node:net';
import { connect as connectTls } from 'node:tls';

/** The part of ioredis's options a connection is made from (its `StandaloneConnector`'s). */
interface ConnectOptions {
  host?: string | undefined;
  port?: number | undefined;
  family?: number | undefined;
  path?: string | undefined;
  tls?: object | boolean | undefined;
  disconnectTimeout?: number | undefined;
}

/** ioredis's `AbstractConnector`, as its `Connector` option extends it. */
interface AbstractConnector {
  connecting: boolean;
  stream?: Socket | undefined;
  firstError?: Error | undefined;
}
type AbstractConnectorClass = new (disconnectTimeout: number | undefined) => AbstractConnector;

/**
 * ioredis's `Connector` option for a store's own client: ioredis's own connection (TCP or TLS
 * to the host and port, or a Unix socket), whose handshake (`CLIENT SETINFO` twice, and `AUTH`,
 * `SELECT` when the URL has them) goes out in one write. A server at its `maxclients` writes
 * `-ERR max number of clients reached` and closes at once; the handshake written command by
 * command met its reset at the second write, `write EPIPE`, and the socket was destroyed with
 * the refusal unread in its buffer: the calls said only "write EPIPE" (on a real redis-server,
 * in 50 to 60 of 60 connections). Written once, the write goes out, and the refusal is read
 * before the reset is: the calls name it (see RedisBudgetStore's `#watchRefusal`). A single
 * connection's only: why a Cluster's nodes connect without it is told in `openClient`.
 */
export function oneWriteConnector(base: AbstractConnectorClass): new (options: unknown) => AbstractConnector {
  return class OneWriteConnector extends base {
    readonly #options: ConnectOptions;

    constructor(options: unknown) {
      const o = options as ConnectOptions;
      super(o.disconnectTimeout);
      this.#options = o;
    }

    connect(): Promise<Socket> {
      const o = this.#options;
      this.connecting = true;
      // As ioredis's StandaloneConnector: the socket is made on the next tick, so a disconnect
      // called meanwhile (connecting: false) ends the attempt.
      return new Promise((resolve, reject) => {
        process.nextTick(() => {
          if (!this.connecting) {
            reject(new Error('Connection is closed.'));
            return;
          }
          const where =
            o.path !== undefined && o.path !== null && o.path !== ''
              ? { path: o.path }
              : {
                  ...(o.host == null ? {} : { host: o.host }),
                  ...(o.port == null ? {} : { port: o.port }),
                  ...(o.family == null ? {} : { family: o.family }),
                };
          let stream: Socket;
          try {
            stream = o.tls
              ? connectTls({ ...where, ...(typeof o.tls === 'object' ? o.tls : {}) })
              : connectTcp(where as Parameters<typeof connectTcp>[0]);
          } catch (error) {
            reject(error);
            return;
          }
          this.stream = stream;
          stream.once('error', (error) => {
            this.firstError = error;
          });
          // Before ioredis's own handler of the same event (it is added once this resolves), which
          // writes the handshake: corked, it goes out at the next tick in one write.
          stream.once(o.tls ? 'secureConnect' : 'connect', () => {
            stream.cork();
            process.nextTick(() => stream.uncork());
          });
          resolve(stream);
        });
      });
    }
  };
}
