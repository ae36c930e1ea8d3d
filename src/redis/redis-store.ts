import { createHash, randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { MAX_TIMER_MS } from '../clock.js';
import { parseClusterUrl } from '../config/shared.js';
import { AdaptiveRateLimitError, ConfigError } from '../errors.js';
import type { RedisClient } from './client.js';
import { oneWriteConnector } from './connector.js';
import { CUT, HEARTBEAT, LEAVE, PAUSE } from './scripts.js';
import {
  type BudgetStore,
  type ControllerBooks,
  type CutReply,
  type CutRequest,
  DEFAULT_MAX_PAUSE_MS,
  type HeartbeatReply,
  type HeartbeatRequest,
  type PauseRequest,
  packDecrease,
  unpackDecreases,
} from './store.js';

export interface RedisBudgetStoreOptions {
  /** A Redis URL (a client is opened, and closed with the store) or an ioredis client you own. */
  redis: string | RedisClient;
  /** The budget's name: its keys are `<keyPrefix>{<name>}:state|members|reports`. */
  name: string;
  keyPrefix: string;
  /** A call unanswered this long (ms, real time) fails. */
  redisTimeout: number;
}

interface Script {
  readonly lua: string;
  readonly sha: string;
}

function script(lua: string): Script {
  return { lua, sha: createHash('sha1').update(lua).digest('hex') };
}

const scripts = {
  heartbeat: script(HEARTBEAT),
  cut: script(CUT),
  pause: script(PAUSE),
  leave: script(LEAVE),
};

/**
 * One budget's state in Redis: each call is one Lua script (scripts.ts), atomic on the server and
 * timed by the server's clock. `evalsha` first; on a script cache miss, `eval` (two round trips).
 */
export class RedisBudgetStore implements BudgetStore {
  readonly #client: RedisClient;
  readonly #ownsClient: boolean;
  readonly #keys: readonly [string, string, string];
  readonly #timeout: number;
  #roundTrips = 0;
  /** Repairs answered by a call that cannot carry them (a pause), for the next heartbeat's answer. */
  readonly #pendingRepairs: string[] = [];
  /** Redis refused the URL's database (`SELECT`): every call fails with this, none is sent. */
  #refused: ConfigError | undefined;
  /**
   * The last error of this store's own client since it was last ready (a refused connection, a
   * server at its `maxclients`): what a call failed for when ioredis says only that it gave up.
   */
  #connectionError: unknown;
  /** Calls in a row that got no answer within the timeout (see {@link RECONNECT_AFTER_TIMEOUTS}). */
  #timeoutsInARow = 0;
  /**
   * The server's clock less this process's monotonic one (ms), from the last heartbeat's answer
   * (its `now`, read at the middle of its round trip): a pause's deadline in the server's time.
   */
  #serverOffset: number | undefined;
  /** Half that heartbeat's round trip (ms): how far the offset may be off, added to a deadline. */
  #offsetSlack = 0;

  constructor(options: RedisBudgetStoreOptions) {
    const tag = `${options.keyPrefix}{${options.name}}`;
    this.#keys = [`${tag}:state`, `${tag}:members`, `${tag}:reports`];
    // Node's timers (and ioredis's connectTimeout) fire at once past MAX_TIMER_MS.
    this.#timeout = Math.min(options.redisTimeout, MAX_TIMER_MS);
    const { redis } = options;
    if (typeof redis === 'string') {
      const client = openClient(redis, this.#timeout);
      // Errors reach the budget through its failed calls ('degraded', once); ioredis would print
      // every reconnect attempt. A refused SELECT (`/99` beyond the server's databases) is no
      // passing failure: ioredis reports it here and goes on in database 0, where this budget's
      // keys would mix with another's. The client is closed and every call fails with it.
      client.on('error', (error: unknown) => {
        if (this.#refused !== undefined) return;
        if (!refusedSelect(error)) {
          this.#connectionError = error;
          return;
        }
        this.#refused = databaseRefused(redis, error);
        client.disconnect();
      });
      client.on('ready', () => {
        this.#connectionError = undefined;
      });
      this.#watchRefusal(client);
      this.#client = client;
      this.#ownsClient = true;
    } else {
      this.#client = redis;
      this.#ownsClient = false;
    }
  }

  get roundTrips(): number {
    return this.#roundTrips;
  }

  /**
   * A server that refuses a new connection (at its `maxclients`: `-ERR max number of clients
   * reached`) writes why and closes it at once; ioredis tells no error (or, when a write met the
   * server's reset, `write EPIPE`), so the calls it fails meanwhile said only "Reached the max
   * retries per request limit". The first reply of a connection, read before it is ready, when it
   * is an error, is kept for them, over the socket's error that followed it; else the close
   * itself. The handshake goes out in one write (connector.ts), so the refusal is read before the
   * reset is: written command by command, the second write met the reset and the socket was
   * destroyed with the refusal unread.
   */
  #watchRefusal(client: OwnClient): void {
    let ready = false;
    let refusal: string | undefined;
    client.on('connect', () => {
      ready = false;
      refusal = undefined;
      client.stream?.once('data', (chunk: unknown) => {
        const text = String(chunk);
        if (text.startsWith('-')) refusal = text.slice(1).trim();
      });
    });
    client.on('ready', () => {
      ready = true;
    });
    client.on('close', () => {
      if (ready) return;
      // The refusal read is why, over the socket's error it led to (the first write's `EPIPE`,
      // a reset): kept behind that error, the calls said only `read ECONNRESET`.
      if (refusal !== undefined)
        this.#connectionError = new Error(`the server refused the connection: ${refusal}`);
      else this.#connectionError ??= new Error('the server closed the connection before it was ready');
    });
  }

  async heartbeat(r: HeartbeatRequest): Promise<HeartbeatReply> {
    const p = r.proposal;
    const sentAt = performance.now();
    const reply = (await this.#call(scripts.heartbeat, [
      r.id,
      finite(r.demand),
      finite(r.accepted),
      finite(r.measured),
      r.waited ? 1 : 0,
      r.memberTimeout,
      r.floorFraction,
      optional(r.initialRate),
      r.minRate,
      optional(r.maxRate),
      Math.ceil(r.ttl),
      randomUUID(),
      p?.generation ?? '',
      p === undefined ? '' : p.version,
      optional(p?.rate),
      finite(r.acceptedUnits),
      r.maxPause ?? DEFAULT_MAX_PAUSE_MS,
    ])) as unknown[];
    const [
      rate,
      epoch,
      pauseRemaining,
      members,
      share,
      now,
      generation,
      accepted,
      measured,
      index,
      proposed,
    ] = reply as [
      string,
      unknown,
      unknown,
      unknown,
      string,
      unknown,
      string,
      string,
      string,
      unknown,
      unknown,
    ];
    this.#learnClock(now, sentAt, performance.now());
    return {
      generation,
      rate: number(rate),
      epoch: integer(epoch),
      pauseRemaining: integer(pauseRemaining),
      members: integer(members),
      share: number(share),
      accepted: Number(accepted),
      measured: Number(measured),
      index: integer(index),
      proposed: integer(proposed) === 1,
      now: integer(now),
      books: books(reply.slice(11, 21)),
      repaired: this.#repaired(reply[21]),
      longestMemberTimeout: typeof reply[22] === 'string' ? number(reply[22]) : undefined,
      rejoined: integer(reply[23]) === 1,
      unreported: integer(reply[24]),
      droppedUnreported: integer(reply[25]),
      membersLost: integer(reply[26]),
    };
  }

  async cut(r: CutRequest): Promise<CutReply> {
    const reply = (await this.#call(scripts.cut, [
      r.sentEpoch,
      finite(r.rate),
      finite(r.rateBefore),
      optional(r.measured),
      r.cooldown,
      r.minRate,
      optional(r.maxRate),
      Math.ceil(r.ttl),
      r.generation ?? '',
      randomUUID(),
      r.from?.generation ?? '',
      r.from === undefined ? '' : r.from.version,
      packDecrease(r.record),
      finite(r.random),
      r.maxPause ?? DEFAULT_MAX_PAUSE_MS,
    ])) as unknown[];
    const [cut, stale, rate, epoch, generation] = reply as [unknown, unknown, string, unknown, string];
    return {
      cut: integer(cut) === 1,
      stale: integer(stale) === 1,
      rate: number(rate),
      epoch: integer(epoch),
      generation,
      books: books(reply.slice(5, 15)),
      repaired: this.#repaired(reply[15]),
    };
  }

  async pause(r: PauseRequest): Promise<number> {
    const first = await this.#pauseOnce(r);
    if (first.kind === 'done') return first.remaining;
    // Refused as late, yet answered in time: this store's idea of the server's clock was off (the
    // server's clock stepped, a failover led to a server ahead of the old one, a lopsided round
    // trip). Learnt again from this answer, the pause is sent once more.
    this.#learnClock(first.late, first.sentAt, first.answeredAt);
    const second = await this.#pauseOnce(r);
    if (second.kind === 'done') return second.remaining;
    this.#serverOffset = undefined;
    throw new NoAnswerError(
      `Redis refused the pause twice as past its deadline (server time ${second.late})`,
    );
  }

  /**
   * One PAUSE. Past its deadline (the server's time when this call's redisTimeout ends, with the
   * offset's slack), the script does nothing: run that late, this member was told "no answer",
   * and the pause would stop everyone again for `ms`. Without the server's clock yet, no deadline.
   */
  async #pauseOnce(
    r: PauseRequest,
  ): Promise<
    { kind: 'done'; remaining: number } | { kind: 'late'; late: unknown; sentAt: number; answeredAt: number }
  > {
    const offset = this.#serverOffset;
    const sentAt = performance.now();
    const deadline =
      offset === undefined ? '' : Math.ceil(sentAt + offset + this.#timeout + this.#offsetSlack);
    const [remaining, repaired, now] = (await this.#call(scripts.pause, [
      r.ms,
      Math.ceil(r.ttl),
      randomUUID(),
      r.maxPause ?? DEFAULT_MAX_PAUSE_MS,
      deadline,
    ])) as [unknown, unknown, unknown];
    // A client with `stringNumbers` answers "-1".
    if (Number(remaining) === -1) return { kind: 'late', late: now, sentAt, answeredAt: performance.now() };
    // A pause answers a number: its repairs go with the next heartbeat's answer.
    this.#pendingRepairs.push(...strings(repaired));
    return { kind: 'done', remaining: Number(remaining) };
  }

  /** The server's clock from an answer's `now` (server ms) to a call sent and answered at these times. */
  #learnClock(now: unknown, sentAt: number, answeredAt: number): void {
    const serverNow = Number(now);
    if (!Number.isFinite(serverNow) || serverNow <= 0) return;
    this.#serverOffset = serverNow - (sentAt + answeredAt) / 2;
    this.#offsetSlack = (answeredAt - sentAt) / 2;
  }

  async leave(id: string): Promise<number> {
    return (await this.#call(scripts.leave, [id])) as number;
  }

  /** A script's list of repairs, with those of the pauses since the last answer that carried them. */
  #repaired(list: unknown): readonly string[] | undefined {
    const repaired = [...this.#pendingRepairs.splice(0), ...strings(list)];
    return repaired.length === 0 ? undefined : repaired;
  }

  /** Closes the client it opened (a client passed in is left open). */
  async close(): Promise<void> {
    if (!this.#ownsClient) return;
    await withTimeout(this.#client.quit(), this.#timeout).catch(() => this.#client.disconnect());
  }

  async #call(s: Script, args: readonly (string | number)[]): Promise<unknown> {
    if (this.#refused !== undefined) throw this.#refused;
    const call: CallTime = { over: false };
    try {
      const answer = await withTimeout(this.#run(s, args, call), this.#timeout, call);
      this.#timeoutsInARow = 0;
      return answer;
    } catch (error) {
      if (error instanceof NoAnswerError) this.#noAnswer();
      // A call queued before the refusal ends with the closed connection: the refusal is why.
      if (this.#refused !== undefined) throw this.#refused;
      // ioredis fails a call made while it cannot connect with "Reached the max retries per
      // request limit (which is 0)", an option this store sets: the connection's own error is why.
      const cause = this.#connectionError;
      if (isGaveUp(error) && cause !== undefined) throw new NotConnectedError(cause);
      throw error;
    }
  }

  /**
   * A call got no answer in time. A connection whose peer vanished without closing it (a failover
   * that moved the primary's address, a partition) takes every call and answers none until TCP
   * gives up on it, minutes later, while a new connection would reach the new primary; the
   * calls queued on it would run late when it heals (a pause paused every member again). So
   * after {@link RECONNECT_AFTER_TIMEOUTS} in a row, a client this store opened is dropped and
   * connected again, its queue failed at once. A client you passed in is yours: it is left as it is.
   */
  #noAnswer(): void {
    this.#timeoutsInARow++;
    if (!this.#ownsClient || this.#timeoutsInARow < RECONNECT_AFTER_TIMEOUTS) return;
    this.#timeoutsInARow = 0;
    this.#client.disconnect(true);
  }

  /**
   * `evalsha`, then `eval` on a script cache miss (a restarted or flushed Redis). The `eval` is not
   * sent once the call's time is over (`call.over`): the caller was told "no answer" and has gone
   * on (a heartbeat's next tick is already on its way), and this one's counts and demand, run a
   * round trip later, would land after that newer call's and be read as the latest.
   */
  async #run(s: Script, args: readonly (string | number)[], call: CallTime): Promise<unknown> {
    const keys = this.#keys;
    this.#roundTrips++;
    try {
      return await this.#client.evalsha(s.sha, keys.length, ...keys, ...args);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      if (call.over) throw error;
      this.#roundTrips++;
      return await this.#client.eval(s.lua, keys.length, ...keys, ...args);
    }
  }
}

/** A client a store opens: one Redis (its socket, `stream`, once connected) or a Cluster. */
type OwnClient = RedisClient & {
  on(event: 'error' | 'ready' | 'connect' | 'close', f: (error: unknown) => void): unknown;
  readonly stream?: { once(event: 'data', f: (chunk: unknown) => void): unknown } | undefined;
};

/**
 * A client for `url`: one Redis, or a Redis Cluster (`redis+cluster://`), failing fast while
 * disconnected (the heartbeat retries, and the local share serves meanwhile).
 */
function openClient(url: string, timeout: number): OwnClient {
  const ioredis = loadIoredis();
  const retryStrategy = (times: number) => Math.min(50 * times, 500);
  // A primary demoted to a replica by a failover answers every write READONLY on the connection
  // that stays open to it, while the address now leads to the new primary: connect again, and
  // send the call once more there (2).
  const reconnectOnError = (error: Error) => (error.message.startsWith('READONLY') ? 2 : false);
  const cluster = parseClusterUrl(url);
  if (cluster === undefined) {
    // The handshake in one write, so a refusal at the server's maxclients is read (connector.ts);
    // an ioredis without AbstractConnector connects as it does.
    const base = ioredis.AbstractConnector as unknown as Parameters<typeof oneWriteConnector>[0] | undefined;
    return new ioredis.Redis(url, {
      ...(base === undefined ? {} : { Connector: oneWriteConnector(base) as never }),
      maxRetriesPerRequest: 0,
      connectTimeout: timeout,
      retryStrategy,
      reconnectOnError,
    });
  }
  // A Cluster's node connections are made without the one-write connector, on purpose. ioredis
  // would take it (`redisOptions.Connector` reaches every node's connection, and the duplicates
  // that learn the slots), but it changes nothing a caller sees: a Cluster reports a node that
  // refused the connection at its `maxclients` as `Connection is closed.` (then `Failed to refresh
  // slots cache`, `None of startup nodes is available`) with or without it, and retries, so a call
  // ends at its timeout (three nodes at maxclients, 30 calls: 30 `no answer from Redis within
  // 2000 ms` either way). Naming the refusal would take reading each node's first reply, the
  // slot refresher's connections included, which the Cluster does not expose (no `stream`, and no
  // `+node` event for those), so `#watchRefusal` reads a single connection's only.
  return new ioredis.Cluster(cluster.nodes, {
    // A call is retried through MOVED/ASK redirections and a failover within the budget's own
    // timeout (redisTimeout); the slots are learned again after a failover or a migration.
    clusterRetryStrategy: retryStrategy,
    retryDelayOnFailover: 100,
    retryDelayOnClusterDown: 100,
    retryDelayOnTryAgain: 100,
    slotsRefreshTimeout: timeout,
    redisOptions: {
      maxRetriesPerRequest: 0,
      connectTimeout: timeout,
      reconnectOnError,
      username: cluster.username,
      password: cluster.password,
      ...(cluster.tls ? { tls: {} } : {}),
    },
  });
}

/** The strings of a script's list (anything else in it is left out). */
function strings(list: unknown): string[] {
  return Array.isArray(list) ? list.filter((x): x is string => typeof x === 'string') : [];
}

/** An optional number as a script argument: `''` for none (an infinite maximum is none too). */
function optional(x: number | undefined): string | number {
  return x === undefined || !Number.isFinite(x) ? '' : x;
}

/** A number as a script argument: not finite (which a script cannot parse) is 0. */
function finite(x: number): number {
  return Number.isFinite(x) ? x : 0;
}

/** The controller's books as a script lists them (scripts.ts: BOOKS). */
function books(list: unknown[]): ControllerBooks {
  const [version, before, measured, sinceCut, pauseSinceCut, sinceIncrease, waited, cuts, random, units] =
    list as [unknown, string, string, string, string, string, unknown, string, string, string];
  return {
    version: integer(version),
    rateBeforeLastDecrease: number(before),
    measuredRateAtLastDecrease: number(measured),
    sinceLastDecrease: Number(sinceCut),
    pauseSinceLastDecrease: Number(pauseSinceCut),
    sinceLastIncrease: Number(sinceIncrease),
    waited: integer(waited) === 1,
    decreases: unpackDecreases(cuts),
    random: number(random),
    acceptedSinceLastDecrease: Number(units),
  };
}

/**
 * A script's integer as the client gives it: a number, or its text from a client made with
 * ioredis' `stringNumbers` (read as the number; anything else is left for the checks to refuse).
 */
function integer(x: unknown): number {
  return (typeof x === 'string' && /^-?\d+$/.test(x) ? Number(x) : x) as number;
}

/** A script's optional number: `''` is none. */
function number(text: string): number | undefined {
  return text === '' ? undefined : Number(text);
}

/** A store's own client is connected again after this many calls in a row got no answer in time. */
const RECONNECT_AFTER_TIMEOUTS = 2;

/** A call that got no answer within `redisTimeout`. */
class NoAnswerError extends Error {}

/** A call failed because the store's client cannot connect: says why (`cause`, its error). */
class NotConnectedError extends Error {
  constructor(cause: unknown) {
    const detail = cause instanceof Error ? cause.message : String(cause);
    super(`not connected to Redis: ${detail}`, { cause });
    this.name = 'NotConnectedError';
  }
}

/** Whether `error` is ioredis's `MaxRetriesPerRequestError`: a call failed while not connected. */
function isGaveUp(error: unknown): boolean {
  return error instanceof Error && error.name === 'MaxRetriesPerRequestError';
}

/** Whether a call's time ran out (its caller was rejected with {@link NoAnswerError}). */
interface CallTime {
  over: boolean;
}

function withTimeout<T>(promise: Promise<T>, ms: number, call?: CallTime): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      if (call !== undefined) call.over = true;
      reject(new NoAnswerError(`no answer from Redis within ${ms} ms`));
    }, ms);
    timer.unref();
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}

/**
 * ioredis is an optional peer dependency, loaded when a store opens its own client: importing
 * `adaptive-rate-limit/redis` for the memory store (or the simulator) does not need it.
 */
function loadIoredis(): typeof import('ioredis') {
  try {
    return createRequire(import.meta.url)('ioredis') as typeof import('ioredis');
  } catch (cause) {
    throw ioredisMissing(cause);
  }
}

/**
 * Throws `ERR_IOREDIS_MISSING` now when ioredis cannot be found, without loading it: a budget
 * that opens its store later (`lazy`) fails where it is made, not at its first request.
 */
export function assertIoredis(): void {
  try {
    createRequire(import.meta.url).resolve('ioredis');
  } catch (cause) {
    throw ioredisMissing(cause);
  }
}

/** Whether `error` is Redis's refusal of ioredis's `SELECT` (`ERR DB index is out of range`). */
function refusedSelect(error: unknown): error is Error {
  const command = (error as { command?: { name?: unknown } } | null)?.command;
  return error instanceof Error && error.name === 'ReplyError' && command?.name === 'select';
}

/** The error of a URL whose database Redis refused, naming `redis`, the database and the reply. */
function databaseRefused(url: string, error: Error): ConfigError {
  const database = /\/(\d+)$/.exec(new URL(url).pathname)?.[1] ?? '?';
  return new ConfigError(
    [
      {
        path: 'redis',
        message: `Redis refused database ${database} (SELECT ${database}: ${error.message}); a server has databases 0 to its \`databases\` setting less 1 (16 by default: 0-15)`,
        received: url,
      },
    ],
    'shared budget',
  );
}

function ioredisMissing(cause: unknown): AdaptiveRateLimitError {
  return new AdaptiveRateLimitError(
    'ERR_IOREDIS_MISSING',
    'adaptive-rate-limit/redis needs the ioredis package to connect to Redis: npm install ioredis',
    { cause },
  );
}
