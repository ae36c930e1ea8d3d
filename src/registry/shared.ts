import type { Clock } from '../clock.js';
import { API_WITH_SHARED } from '../config/api.js';
import { issuesOf } from '../config/rules.js';
import type { LimiterConfig } from '../config/schema.js';
import { sharedConfigSchema, sharedLimiterIssues } from '../config/shared.js';
import { ConfigError, configErrorFrom } from '../errors.js';
import { kWaitBound } from '../internal.js';
import { issueMessage } from '../issue-message.js';
import { untilAborted } from '../limiter/abortable.js';
import type { AdaptiveRateLimiter } from '../limiter/adaptive.js';
import { resolveLimiterOptions } from '../limiter/options.js';
import type { AcquireOptions, Permit, RateLimiter, WaitBound } from '../limiter/types.js';

/** What the registry uses of a `SharedBudget` (`src/redis/shared-budget.ts`). */
interface Budget extends RateLimiter {
  readonly limiter: AdaptiveRateLimiter;
  close(): Promise<void>;
}

/**
 * The `SharedBudget` a named limiter declares with `shared` (config.shared set): the limiter's
 * options are the whole budget's, `shared` says where and how it is shared. Its options are
 * checked now: throws `ConfigError` with paths under the limiter (`shared.redis`, `maxWait`).
 * The Redis code is loaded now, in the background (a dynamic `import()`, the registry's one door
 * to `src/redis/`), so an application that declares no `shared` never loads it; the budget is made
 * `lazy`, so it joins (connects to Redis) at its first request.
 */
export function makeSharedBudget(name: string, config: LimiterConfig, clock: Clock): LazySharedBudget {
  const {
    origins: _o,
    maxConcurrent: _m,
    maxConcurrentPer: _mp,
    partitionBy: _pb,
    limiter: _l,
    // The adapters read the answers' quota headers; the budget's local limiter is capped by them.
    headers: _h,
    quotaFromHeaders: _q,
    api,
    shared,
    ...options
  } = config;
  const parsed = sharedConfigSchema.safeParse(shared, { error: issueMessage });
  // The limiter's own options are checked too: every bad field at once.
  const issues = [
    ...(parsed.success
      ? []
      : configErrorFrom(parsed.error, shared, 'shared budget', 'shared', sharedConfigSchema).issues),
    ...issuesOf(() => resolveLimiterOptions(options)),
  ];
  issues.unshift(...sharedLimiterIssues(options));
  if (api !== undefined) {
    // A shared budget meters one budget of units: `api`'s token budgets would not be metered.
    issues.unshift({
      path: 'api',
      message: API_WITH_SHARED,
      received: api,
    });
  }
  if (!parsed.success || issues.length > 0) throw new ConfigError(issues, 'shared budget');
  const budgetOptions = { ...options, ...parsed.data, name: parsed.data.name ?? name, clock, lazy: true };
  return new LazySharedBudget(budgetOptions.name, async () => {
    const { createSharedBudget } = await import('../redis/shared-budget.js');
    return createSharedBudget(budgetOptions);
  });
}

/**
 * A `SharedBudget` whose code is still loading: acquires wait for it, `tryAcquire` finds no units
 * until it is there, and `limiter` (the budget's local limiter, which the registry answers) is
 * `undefined` until then. A failure to make it (ioredis not installed: `ERR_IOREDIS_MISSING`)
 * rejects every acquire with that error.
 */
export class LazySharedBudget implements RateLimiter {
  #budget: Budget | undefined;
  readonly #made: Promise<Budget>;
  /** Acquires not settled yet: waiting for the code, for Redis (`failClosed`), or in the line. */
  #pending = 0;
  /** Requests of the HTTP adapters in progress through it (see {@link hold}). */
  #holds = 0;
  /** Called each time the last pending acquire settles or the last hold ends (see `retireSharedBudget`). */
  #onIdle: (() => void) | undefined;

  readonly name: string;

  constructor(name: string, make: () => Promise<Budget>) {
    this.name = name;
    this.#made = make().then((budget) => {
      this.#budget = budget;
      return budget;
    });
    this.#made.catch(() => undefined); // told to every acquire
  }

  /** The budget's local limiter, once its code has loaded. */
  get limiter(): AdaptiveRateLimiter | undefined {
    return this.#budget?.limiter;
  }

  /** Calls `fn` with the budget's local limiter once its code has loaded. */
  onLimiter(fn: (limiter: AdaptiveRateLimiter) => void): void {
    this.#made.then(
      (budget) => fn(budget.limiter),
      () => undefined,
    );
  }

  acquire(units?: number, options?: AcquireOptions): Promise<Permit> {
    // While the code loads, an abort ends the wait at once (and opens no Redis connection after).
    const acquired =
      this.#budget?.acquire(units, options) ??
      untilAborted(this.#made, options?.signal).then((b) => b.acquire(units, options));
    this.#pending++;
    acquired.then(this.#settled, this.#settled);
    return acquired;
  }

  readonly #settled = (): void => {
    if (--this.#pending === 0) this.#onIdle?.();
  };

  /**
   * @internal An HTTP adapter's request is in progress through the budget, from its route to its
   * last answer judged: a request in flight, or one whose 429 waits for its retry's slot, is in
   * no line and no acquire. A budget `replace` took out closes only once every hold has ended,
   * so such a request's retry is still served by it. Returns the end of the hold (once).
   */
  hold(): () => void {
    this.#holds++;
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      if (--this.#holds === 0) this.#onIdle?.();
    };
  }

  /**
   * Whether an acquire is not settled yet (the line counts it only once it is there), or a
   * request holds the budget (see {@link hold}).
   */
  get busy(): boolean {
    return this.#pending > 0 || this.#holds > 0;
  }

  /** @internal Calls `fn` each time the last pending acquire settles or the last hold ends. */
  set onIdle(fn: (() => void) | undefined) {
    this.#onIdle = fn;
  }

  tryAcquire(units?: number): Permit | undefined {
    return this.#budget?.tryAcquire(units);
  }

  /**
   * @internal See {@link WaitBound}: the budget's local limiter's; while the budget's code loads,
   * the promise of it, so that a request waiting for a `maxConcurrent` slot then is bounded by the
   * budget's `maxWait`, counted in its `queueLimit` and refused with its errors as any other (the
   * gate holds it back until the bound is known: `ConcurrencyGate.enter`). Never a rejection
   * (a gate that finds a slot free drops the promise): a budget that failed to load has no bound,
   * and its acquire rejects every request with the load's error.
   */
  [kWaitBound](): WaitBound | Promise<WaitBound | undefined> {
    return (
      this.#budget?.limiter[kWaitBound]() ??
      this.#made.then(
        (budget) => budget.limiter[kWaitBound](),
        () => undefined,
      )
    );
  }

  close(): Promise<void> {
    return this.#made.then(
      (budget) => budget.close(),
      () => undefined,
    );
  }
}

/**
 * Closes a budget `replace` took out of the registry once nothing waits in it and no request of
 * the HTTP adapters holds it: the requests queued or in flight through it are still served, their
 * retries too (as by any replaced limiter), then it leaves the budget and closes its connection,
 * instead of staying a member for as long as the process lives.
 */
export function retireSharedBudget(budget: LazySharedBudget): void {
  const limiter = budget.limiter;
  if (limiter === undefined) {
    // Its code still loads: a request already on its way waits for it, then for its line.
    if (budget.busy) budget.onLimiter(() => retireSharedBudget(budget));
    else void budget.close();
    return;
  }
  const closeWhenIdle = (): void => {
    // An acquire on its way to the line (waiting for Redis with failClosed) is not in it yet; a
    // request in flight is in neither.
    if (limiter.snapshot().queued > 0 || budget.busy) return;
    limiter.off('acquired', closeWhenIdle);
    limiter.off('rejected', closeWhenIdle);
    limiter.off('canceled', closeWhenIdle);
    budget.onIdle = undefined;
    void budget.close().catch(() => undefined);
  };
  // Every wait in the line ends in one of these three, every acquire of the budget settles, every
  // hold ends: the last one to leave closes the budget.
  limiter.on('acquired', closeWhenIdle);
  limiter.on('rejected', closeWhenIdle);
  limiter.on('canceled', closeWhenIdle);
  budget.onIdle = closeWhenIdle;
  closeWhenIdle();
}
