/**
 * One caller's request for each row of the control bench, as a user of each client would write
 * it: ours through the undici interceptor (Node's `fetch` through the global dispatcher, or
 * undici's `request()`), the AWS SDK's adaptive retry strategy around a plain request, and plain
 * retries without a limiter. Every row's Agent counts each attempt's status with an innermost
 * interceptor, so 429s are counted the same way for every row.
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import { Agent, type Dispatcher, request, setGlobalDispatcher } from 'undici';
import { DIAGNOSTICS_CHANNELS } from '../src/diagnostics.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import type { InterceptorOptions } from '../src/http/options.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { LimiterSnapshot } from '../src/limiter/types.js';
import type { SharedBudget } from '../src/redis/index.js';
import type { AttemptCounts, ClientJob } from './control-protocol.js';

/** How one caller ended. */
type Outcome = 'ok' | 'got429' | 'rejected' | 'failed';

export interface Sender {
  /** Attempts answered so far, by kind. */
  readonly attempts: AttemptCounts;
  /** One caller: every attempt it takes, until its final answer. */
  call(signal: AbortSignal): Promise<Outcome>;
  close(): Promise<void>;
}

/** An interceptor that lets everything through and counts each response's status. */
function counting(attempts: AttemptCounts): Dispatcher.DispatcherComposeInterceptor {
  return (dispatch) => (opts, handler) =>
    dispatch(opts, {
      onRequestStart: (controller, context) => handler.onRequestStart?.(controller, context),
      onRequestUpgrade: (controller, status, headers, socket) =>
        handler.onRequestUpgrade?.(controller, status, headers, socket),
      onResponseStart: (controller, status, headers, message) => {
        if (status === 429) attempts.throttled++;
        else if (status >= 200 && status < 300) attempts.ok++;
        else attempts.other++;
        return handler.onResponseStart?.(controller, status, headers, message);
      },
      onResponseData: (controller, chunk) => handler.onResponseData?.(controller, chunk),
      onResponseEnd: (controller, trailers) => handler.onResponseEnd?.(controller, trailers),
      onResponseError: (controller, error) => handler.onResponseError?.(controller, error),
    });
}

const passThrough: Dispatcher.DispatcherComposeInterceptor = (dispatch) => (opts, handler) =>
  dispatch(opts, handler);

/** A plain GET of `url` through `dispatcher` (or the global one for fetch); answers the status. */
type Get = (signal: AbortSignal) => Promise<{ status: number; retryAfter: string | undefined }>;

function getter(job: ClientJob, dispatcher: Dispatcher): Get {
  if (job.transport === 'fetch') {
    setGlobalDispatcher(dispatcher);
    return async (signal) => {
      const res = await fetch(job.url, { signal });
      await res.arrayBuffer();
      return { status: res.status, retryAfter: res.headers.get('retry-after') ?? undefined };
    };
  }
  return async (signal) => {
    const res = await request(job.url, { dispatcher, signal });
    await res.body.dump();
    const retryAfter = res.headers['retry-after'];
    return { status: res.statusCode, retryAfter: Array.isArray(retryAfter) ? retryAfter[0] : retryAfter };
  };
}

function statusOutcome(status: number): Outcome {
  if (status >= 200 && status < 300) return 'ok';
  return status === 429 ? 'got429' : 'failed';
}

function isRejection(error: unknown): boolean {
  return (
    error instanceof RateLimitRejectedError ||
    (error as { cause?: unknown })?.cause instanceof RateLimitRejectedError
  );
}

export async function makeSender(job: ClientJob): Promise<Sender> {
  const attempts: AttemptCounts = { ok: 0, throttled: 0, other: 0 };
  const agent = new Agent({
    keepAliveTimeout: 60_000,
    ...(job.connections === undefined ? {} : { connections: job.connections }),
  });
  const row = job.row;

  if (row.kind === 'ours' || row.kind === 'shared' || row.kind === 'pass-through') {
    let close = async (): Promise<void> => {};
    let outer = passThrough;
    if (row.kind === 'ours' || row.kind === 'shared') {
      let options: InterceptorOptions | undefined;
      let budget: SharedBudget | undefined;
      if (row.kind === 'shared') {
        // Loaded only where used: every client process starts faster on a busy machine.
        const { createSharedBudget } = await import('../src/redis/index.js');
        budget = createSharedBudget({ redis: row.redisUrl, name: row.name });
        await budget.ready();
        if (process.env.ARL_BENCH_TRACE) traceBudget(budget, attempts);
        options = {
          limiters: { api: { origins: [new URL(job.url).origin], limiter: budget } },
          maxAttempts: job.maxAttempts,
        };
      } else if (row.controller !== undefined) {
        // The controller's name is checked by the build the bench runs in ('probe' may be unknown).
        options = { default: { controller: row.controller as 'aimd' }, maxAttempts: job.maxAttempts };
      } else if (job.maxAttempts !== 4) {
        options = { maxAttempts: job.maxAttempts };
      }
      if (process.env.ARL_BENCH_TRACE && row.kind === 'ours') traceRates();
      const interceptor = options === undefined ? adaptiveRateLimit() : adaptiveRateLimit(options);
      if (process.env.ARL_BENCH_TRACE && budget === undefined) {
        const origin = new URL(job.url).origin;
        traceLimiter(() => interceptor.registry.limiterFor(origin), attempts);
      }
      outer = interceptor;
      close = async () => {
        interceptor.close();
        await budget?.close();
      };
    }
    // Listed first = innermost: the counter sees every attempt the limiter sends.
    const get = getter(job, agent.compose(counting(attempts), outer));
    return {
      attempts,
      async call(signal) {
        try {
          return statusOutcome((await get(signal)).status);
        } catch (error) {
          if (isRejection(error)) return 'rejected';
          throw error;
        }
      },
      async close() {
        await close();
        await agent.close();
      },
    };
  }

  const get = getter(job, agent.compose(counting(attempts)));

  if (row.kind === 'oracle') {
    const pacer = new EvenPacer(row.perMinute);
    const trace = process.env.ARL_BENCH_TRACE ? new Throttles() : undefined;
    return {
      attempts,
      async call(signal) {
        let status = 0;
        trace?.start();
        for (let attempt = 1; attempt <= job.maxAttempts; attempt++) {
          await pacer.slot();
          if (signal.aborted) throw signal.reason;
          status = (await get(signal)).status;
          if (status === 429) trace?.record();
          if (status !== 429) break;
        }
        return statusOutcome(status);
      },
      async close() {
        pacer.close();
        trace?.report(row.perMinute);
        await agent.close();
      },
    };
  }

  if (row.kind === 'none') {
    return {
      attempts,
      async call(signal) {
        let status = 0;
        for (let attempt = 1; attempt <= job.maxAttempts; attempt++) {
          status = (await get(signal)).status;
          if (status !== 429) break;
        }
        return statusOutcome(status);
      },
      close: () => agent.close(),
    };
  }

  // The AWS SDK's adaptive mode, as its retry middleware drives the strategy: a send token
  // before the first attempt; on an error, `refreshRetryTokenForRetry` (it updates the rate
  // limiter with the error, sleeps the backoff, which honours a Retry-After hint, and takes
  // a send token again) or give up; on a success, `recordSuccess` (it updates the limiter).
  const { AdaptiveRetryStrategy } = await import('@smithy/util-retry');
  const strategy = new AdaptiveRetryStrategy(job.maxAttempts);
  // The strategy hands out StandardRetryTokens, typed as the interface's RetryToken.
  type Token = Parameters<typeof strategy.recordSuccess>[0];
  return {
    attempts,
    async call(signal) {
      let token = (await strategy.acquireInitialRetryToken('')) as Token;
      for (;;) {
        const { status, retryAfter } = await get(signal);
        if (status !== 429) {
          if (status >= 200 && status < 300) strategy.recordSuccess(token);
          return statusOutcome(status);
        }
        const seconds =
          retryAfter !== undefined && /^\d+(\.\d+)?$/.test(retryAfter) ? Number(retryAfter) : undefined;
        try {
          token = (await strategy.refreshRetryTokenForRetry(token, {
            errorType: 'THROTTLING',
            error: Object.assign(new Error('TooManyRequests'), { $metadata: { httpStatusCode: 429 } }),
            ...(seconds === undefined ? {} : { retryAfterHint: new Date(Date.now() + seconds * 1000) }),
          } as Parameters<typeof strategy.refreshRetryTokenForRetry>[1])) as Token;
        } catch {
          return 'got429';
        }
        if (signal.aborted) throw signal.reason;
      }
    },
    close: () => agent.close(),
  };
}

/**
 * `ARL_BENCH_TRACE=1`: one line on stderr of a shared budget's member each second since its first
 * answer (the members start together, so their seconds line up within a few ms): the whole rate,
 * its share, its local rate, its members and index, the members' accepted sum, the cut epoch, and
 * the answers it got that second; and one line (`... 429`) at each 429 it got, within 50 ms.
 */
function traceBudget(budget: SharedBudget, attempts: AttemptCounts): void {
  let t0: number | undefined;
  let second = 0;
  let ok = 0;
  let throttled = 0;
  let seen429 = 0;
  const line = (at: string, what: string): void => {
    const s = budget.state;
    const parts = [
      at,
      `${process.pid}`,
      `rate ${Math.round(s.rate ?? -1)}`,
      `share ${Math.round(s.share ?? -1)}`,
      `local ${Math.round(budget.limiter.rate)}`,
      `m ${s.members}#${s.index}`,
      `accepted ${Math.round(s.accepted ?? -1)}`,
      `epoch ${s.epoch}`,
      what,
    ];
    process.stderr.write(`${parts.join(' ')}\n`);
  };
  const timer = setInterval(() => {
    const now = Date.now();
    if (t0 === undefined) {
      if (attempts.ok + attempts.throttled === 0) return;
      t0 = now;
    }
    for (; seen429 < attempts.throttled; seen429++) line(`${((now - t0) / 1000).toFixed(2)}s`, '429');
    if (now - t0 < (second + 1) * 1_000) return;
    second = Math.floor((now - t0) / 1_000);
    line(
      `${second}s`,
      `ok ${attempts.ok - ok} 429 ${attempts.throttled - throttled} q ${budget.limiter.snapshot().queued}`,
    );
    ok = attempts.ok;
    throttled = attempts.throttled;
  }, 50);
  timer.unref();
}

/**
 * `ARL_BENCH_TRACE=1`: each second, one line on stderr of a single limiter: its rate, accepted
 * rate, pause, queue and the answers it got that second.
 */
function traceLimiter(find: () => AdaptiveRateLimiter | undefined, attempts: AttemptCounts): void {
  const start = Date.now();
  let seen: AdaptiveRateLimiter | undefined;
  const at = () => ((Date.now() - start) / 1000).toFixed(2);
  const snapshot = (): LimiterSnapshot | undefined => {
    const limiter = find();
    if (limiter !== undefined && limiter !== seen) {
      seen = limiter;
      const say = (what: string) => (e: object) =>
        process.stderr.write(`${at()}s ${process.pid} ${what} ${JSON.stringify(e)}\n`);
      limiter.on('decreased', say('decreased'));
      limiter.on('increased', say('increased'));
      limiter.on('paused', say('paused'));
    }
    return limiter?.snapshot();
  };
  let ok = 0;
  let throttled = 0;
  const timer = setInterval(() => {
    const s = snapshot();
    const now = Date.now();
    const line = [
      `${((now - start) / 1000).toFixed(0)}s`,
      `${process.pid}`,
      `rate ${Math.round(s?.rate ?? -1)}`,
      `accepted ${Math.round(s?.acceptedRate ?? -1)}`,
      `paused ${s?.pausedUntil === undefined ? 0 : 1}`,
      `cuts ${s?.cuts ?? 0}`,
      `ok ${attempts.ok - ok}`,
      `429 ${attempts.throttled - throttled}`,
      `q ${s?.queued ?? 0}`,
    ];
    ok = attempts.ok;
    throttled = attempts.throttled;
    process.stderr.write(`${line.join(' ')}\n`);
  }, 1_000);
  timer.unref();
}

/** A `Retry-After: 1` the oracle's 429s carry: the pause a client honouring it would take (ms). */
const RETRY_AFTER_MS = 1_000;

/**
 * `ARL_BENCH_TRACE=1`, the oracle's rows: when its 429s came, and what they would cost a client
 * that honours `Retry-After` (the oracle does not). At the end, one line on stderr: the 429s,
 * the "pauses" (a 429 a second or more after the last pause began: one honouring client would
 * have paused for, since a paused client draws no 429), those per minute of the run, and the
 * time such a client would have spent paused, as a part of the run.
 */
class Throttles {
  #first: number | undefined;
  #count = 0;
  #pauses = 0;
  #pauseAt = Number.NEGATIVE_INFINITY;

  start(): void {
    this.#first ??= performance.now();
  }

  record(): void {
    const now = performance.now();
    this.#count++;
    if (now - this.#pauseAt >= RETRY_AFTER_MS) {
      this.#pauses++;
      this.#pauseAt = now;
    }
  }

  report(perMinute: number): void {
    const span = Math.max(1, performance.now() - (this.#first ?? performance.now()));
    const minutes = span / 60_000;
    process.stderr.write(
      `oracle ${process.pid} at ${perMinute}/min: ${this.#count} 429s, ${this.#pauses} pauses ` +
        `(${(this.#pauses / minutes).toFixed(1)}/min over ${(span / 1000).toFixed(1)} s), ` +
        `paused ${((100 * this.#pauses * RETRY_AFTER_MS) / span).toFixed(1)} % of that time under Retry-After\n`,
    );
  }
}

/** How late a slot of the oracle may go and still keep its place (ms): about one timer tick. */
const ORACLE_CATCH_UP_MS = 4;

/**
 * The oracle's pacing: one slot every 60,000 / perMinute ms, first in first out, no credit for
 * idle time. One timer: when it fires, every waiter whose slot is due goes (several per tick when
 * the slots are closer than the timer fires) and the slots stay exact; a timer later than
 * {@link ORACLE_CATCH_UP_MS} loses the slots before that, as a burst would meet the server's.
 */
class EvenPacer {
  readonly #gap: number;
  #tat = performance.now();
  #waiters: (() => void)[] = [];
  #head = 0;
  #timer: NodeJS.Timeout | undefined;

  constructor(perMinute: number) {
    if (!(perMinute > 0)) throw new Error(`oracle: perMinute must be > 0, got ${perMinute}`);
    this.#gap = 60_000 / perMinute;
  }

  /** Resolves at this caller's slot. */
  slot(): Promise<void> {
    const now = performance.now();
    if (this.#head === this.#waiters.length && this.#tat <= now) {
      this.#tat = Math.max(this.#tat, now - ORACLE_CATCH_UP_MS) + this.#gap;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      this.#waiters.push(resolve);
      this.#arm(now);
    });
  }

  #arm(now: number): void {
    if (this.#timer === undefined)
      this.#timer = setTimeout(() => this.#release(), Math.max(0, this.#tat - now));
  }

  #release(): void {
    this.#timer = undefined;
    const now = performance.now();
    if (this.#tat < now - ORACLE_CATCH_UP_MS) this.#tat = now - ORACLE_CATCH_UP_MS;
    const waiters = this.#waiters;
    while (this.#head < waiters.length && this.#tat <= now) {
      this.#tat += this.#gap;
      const resolve = waiters[this.#head]!;
      waiters[this.#head++] = undefined as unknown as () => void;
      resolve();
    }
    if (this.#head === waiters.length) {
      this.#waiters = [];
      this.#head = 0;
    } else {
      if (this.#head > 4_096) {
        this.#waiters = waiters.slice(this.#head);
        this.#head = 0;
      }
      this.#arm(now);
    }
  }

  close(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}

/**
 * `ARL_BENCH_TRACE=1`: each change of rate and each throttle of the library's rows, one line on
 * stderr (seconds since the process's first event, pid, the channel's message).
 */
let tracing = false;

function traceRates(): void {
  if (tracing) return;
  tracing = true;
  let start: number | undefined;
  for (const name of [DIAGNOSTICS_CHANNELS.rate, DIAGNOSTICS_CHANNELS.throttle]) {
    diagnosticsChannel.subscribe(name, (message) => {
      start ??= Date.now();
      const m = message as { from?: number; to?: number; cause?: string; cut?: boolean };
      const what =
        name === DIAGNOSTICS_CHANNELS.rate
          ? `rate ${Math.round(m.from ?? -1)} -> ${Math.round(m.to ?? -1)} (${m.cause})`
          : `429${m.cut ? ', cut' : ''}`;
      process.stderr.write(`${((Date.now() - start) / 1000).toFixed(2)}s ${process.pid} ${what}\n`);
    });
  }
}
