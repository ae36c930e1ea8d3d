import { AsyncLocalStorage } from 'node:async_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { expect, it } from 'vitest';
import { type Clock, ManualClock } from '../src/clock.js';
import type { AcquireOptions, Permit } from '../src/limiter/types.js';
import { callsEndingWhenServed, type Kind, limitersInWorker } from './helpers/worker-limiters.js';

// A limiter kept across requests in a Cloudflare Worker (workerd), as test/worker-timers.test.ts
// models it, and further: a request that ended (it answered, or its client went away) arms no
// timer that fires again, and each timer runs with every microtask before the next one, as in a
// runtime. Each scenario runs twice: with every timer alive (as on Node), and with each request
// ended as soon as its call is settled, or when its client goes away: a live call must be served
// (or refused) at the same time in both.

interface Timer {
  at: number;
  seq: number;
  fn: () => void;
  request: string;
  live: boolean;
}

/** A clock whose timers belong to the request running when they were armed. */
class RequestClock implements Clock {
  #now = 0;
  #seq = 0;
  #timers: Timer[] = [];
  readonly #current = new AsyncLocalStorage<string>();
  readonly #ended = new Set<string>();
  armed = 0;

  constructor(readonly endsRequests: boolean) {}

  now(): number {
    return this.#now;
  }

  setTimeout(fn: () => void, ms: number): unknown {
    this.armed++;
    const request = this.#current.getStore() ?? 'module';
    const timer: Timer = { at: this.#now + Math.max(0, ms), seq: this.#seq++, fn, request, live: true };
    // A request that ended runs nothing again (workerd runs none of its continuations either).
    if (this.#ended.has(request)) timer.live = false;
    else this.#timers.push(timer);
    return timer;
  }

  clearTimeout(handle: unknown): void {
    const timer = handle as Timer | undefined;
    if (timer === undefined || !timer.live) return;
    timer.live = false;
    this.#timers.splice(this.#timers.indexOf(timer), 1);
  }

  in<T>(request: string, fn: () => T): T {
    return this.#current.run(request, fn);
  }

  /** Request `request` ended: its timers end with it (only where requests end). */
  end(request: string): void {
    if (!this.endsRequests) return;
    this.#ended.add(request);
    this.#timers = this.#timers.filter((t) => {
      if (t.request !== request) return true;
      t.live = false;
      return false;
    });
  }

  pending(request: string): number {
    return this.#timers.filter((t) => t.request === request).length;
  }

  get pendingTimers(): number {
    return this.#timers.length;
  }

  /** Runs each timer due by `time` in order, every microtask (and `after`) after each, as a runtime does. */
  async advanceTo(time: number, after: () => void = () => {}): Promise<void> {
    for (;;) {
      let next: Timer | undefined;
      for (const t of this.#timers)
        if (t.at <= time && (next === undefined || t.at < next.at || (t.at === next.at && t.seq < next.seq)))
          next = t;
      if (next === undefined) break;
      this.#timers.splice(this.#timers.indexOf(next), 1);
      next.live = false;
      this.#now = next.at;
      this.in(next.request, next.fn);
      await flush();
      after();
    }
    if (time > this.#now) this.#now = time;
    await flush();
    after();
  }
}

function flush(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** The limiters as a Worker loads them (in `beforeAll`). */
const worker = limitersInWorker();
const { oneASecond } = worker;

interface Outcome {
  at?: number;
  served?: boolean;
}

/** A call of request `request`: settles `outcome` when it is, and the request answers then. */
function call(clock: RequestClock, request: string, acquire: () => Promise<Permit>, outcome: Outcome): void {
  clock.in(request, acquire).then(
    (permit) => {
      outcome.at = clock.now();
      outcome.served = true;
      clock.in(request, () => permit.success());
      clock.end(request);
    },
    () => {
      outcome.at = clock.now();
      outcome.served = false;
      clock.end(request);
    },
  );
}

/**
 * A line of 4 calls, each a request of its own, behind a first served at once; the head's request
 * ends while its call waits (it answered without it, or its client went away: nothing aborts the
 * call, which stays in the line; its timers end with the request, and its continuations never run).
 */
async function headGone(kind: Kind, endsRequests: boolean, headUnits = 1): Promise<Outcome[]> {
  const clock = new RequestClock(endsRequests);
  const limiter = oneASecond(kind, clock, 60_000);
  try {
    await clock.in('first', () => limiter.acquire());
    clock.end('first');
    const outcomes: Outcome[] = Array.from({ length: 4 }, () => ({}));
    for (const [i, outcome] of outcomes.entries())
      call(clock, `r${i}`, () => limiter.acquire(i === 0 ? headUnits : 1), outcome);
    await flush();
    clock.end('r0');
    const alive = (): void => {
      for (let i = 1; i < outcomes.length; i++)
        if (outcomes[i]?.at === undefined) expect(clock.pending(`r${i}`), `r${i}`).toBeGreaterThan(0);
    };
    await clock.advanceTo(70_000, alive);
    return outcomes.slice(1);
  } finally {
    limiter.close();
  }
}

it.each(['line', 'window'] as const)(
  "serves the calls behind a head whose request ended while its call waits (it answered without it) at their turns, not at the next one's deadline (%s)",
  async (kind) => {
    // With every timer alive: each in turn, from 1 s after the head's (about a second each).
    const expected = await headGone(kind, false);
    expect(expected.every((o) => o.served === true && (o.at as number) < 5000)).toBe(true);
    expect((await headGone(kind, true)).map((o) => [o.served, o.at])).toEqual(
      expected.map((o) => [o.served, o.at]),
    );
  },
);

it('serves the calls behind a head of more units than theirs whose request ended while its call waits at their turns', async () => {
  // The head (3 units) goes at the first second, in debt; the calls of 1 behind it at 3.99 s,
  // 4.49 s and 4.99 s (its answer raised the rate). Each call behind it woke at its turn as if a
  // call of its own size ahead had left, after the head's: the head went late, and each behind
  // it half a second late (4.485 s, 4.985 s, 5.485 s).
  const expected = await headGone('line', false, 3);
  expect(expected.every((o) => o.served === true && (o.at as number) < 10_000)).toBe(true);
  expect((await headGone('line', true, 3)).map((o) => [o.served, o.at])).toEqual(
    expected.map((o) => [o.served, o.at]),
  );
});

/**
 * Five calls of a fixed window of one grant a second whose calls may wait 5 s, queued at once
 * behind one served at once (one a cycle: at 1 s, ..., 5 s), each a request of its own; the
 * requests of the first two end at once (they answered without them: their calls stay in the
 * line, their timers and continuations end).
 */
async function twoGoneInWindow(endsRequests: boolean): Promise<Outcome[]> {
  const clock = new RequestClock(endsRequests);
  const limiter = oneASecond('window', clock, 5000);
  try {
    await clock.in('first', () => limiter.acquire());
    clock.end('first');
    const outcomes: Outcome[] = Array.from({ length: 5 }, () => ({}));
    for (const [i, outcome] of outcomes.entries()) call(clock, `r${i}`, () => limiter.acquire(), outcome);
    await flush();
    clock.end('r0');
    clock.end('r1');
    await clock.advanceTo(20_000);
    return outcomes.slice(2);
  } finally {
    limiter.close();
  }
}

it('never serves a call of a fixed window past its timeoutDuration when the requests of the two calls ahead of it ended while they waited', async () => {
  // Nobody woke the window at the first one's cycle (1 s): the calls behind were woken at the
  // start of the cycle before their own, 2 s, and packed again from there, each a cycle later
  // than planned: the last served at 6 s, 1 s past its timeoutDuration. It is refused then
  // (reason timeout), as a call that cannot be served by its timeoutDuration is at once.
  const alive = await twoGoneInWindow(false);
  expect(alive.map((o) => [o.served, o.at])).toEqual([
    [true, 3000],
    [true, 4000],
    [true, 5000],
  ]);
  const ended = await twoGoneInWindow(true);
  for (const o of ended) expect(o.at as number).toBeLessThanOrEqual(5000);
  expect(ended.map((o) => o.served)).toEqual([true, true, false]);
});

/**
 * A call told by callbacks (as an interceptor's request is: no promise of its own to wait on),
 * behind a call served at 1 s whose request ends as it answers, the limiter's timer for the
 * other's turn with it.
 */
async function toldBehind(endsRequests: boolean): Promise<Outcome[]> {
  const clock = new RequestClock(endsRequests);
  const limiter = oneASecond('line', clock, 60_000);
  try {
    await clock.in('first', () => limiter.acquire());
    clock.end('first');
    const a: Outcome = {};
    call(clock, 'a', () => limiter.acquire(), a);
    const c: Outcome = {};
    const told = {
      waitingIn: undefined,
      waitSeq: 0,
      granted(permit: Permit) {
        c.at = clock.now();
        c.served = true;
        clock.in('c', () => permit.success());
        clock.end('c');
      },
      refused() {
        c.at = clock.now();
        c.served = false;
        clock.end('c');
      },
    };
    clock.in('c', () => limiter.acquire(1, { [worker.kWaitCancel]: told } as AcquireOptions));
    await flush();
    const alive = (): void => {
      if (endsRequests && c.at === undefined)
        expect(clock.pending('c'), `c at ${clock.now()} ms`).toBeGreaterThan(0);
    };
    await clock.advanceTo(10_000, alive);
    return [a, c];
  } finally {
    limiter.close();
  }
}

it("serves a call told by callbacks (the interceptor's way) at its turn once the request that armed the limiter's timer has ended", async () => {
  // It kept no timer of its own request's: it waited on none (workerd cancels such a request as
  // hung), and was never served.
  const expected = await toldBehind(false);
  expect(expected.map((o) => o.served)).toEqual([true, true]);
  expect(await toldBehind(true)).toEqual(expected);
});

/** A seeded pseudo-random number in [0, 1) (mulberry32). */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Plan {
  arrive: number;
  units: number;
  abortAt?: number;
  goneAt?: number;
  throttle?: number;
}

function plans(seed: number, gone: boolean, kind: Kind): Plan[] {
  const next = random(seed);
  return Array.from({ length: 16 }, () => {
    const plan: Plan = {
      arrive: Math.floor(next() * 4000),
      units: kind === 'line' ? 1 + Math.floor(next() * 3) : 1,
    };
    if (next() < 0.15) plan.abortAt = plan.arrive + Math.floor(next() * 8000);
    if (gone && next() < 0.15) plan.goneAt = plan.arrive + Math.floor(next() * 8000);
    if (kind === 'line' && next() < 0.1) plan.throttle = 500 + Math.floor(next() * 3000);
    return plan;
  });
}

/** Runs `plan` on a limiter; every request's timers alive, or each request ending as it answers. */
async function runPlan(
  kind: Kind,
  plan: Plan[],
  endsRequests: boolean,
  maxWait = 20_000,
): Promise<Outcome[]> {
  const clock = new RequestClock(endsRequests);
  const limiter = oneASecond(kind, clock, maxWait);
  const outcomes: Outcome[] = plan.map(() => ({}));
  const gone = new Set<number>();
  try {
    plan.forEach((p, i) => {
      const request = `r${i}`;
      const controller = p.abortAt === undefined ? undefined : new AbortController();
      clock.in(request, () =>
        clock.setTimeout(() => {
          const outcome = outcomes[i] as Outcome;
          clock
            .in(request, () => limiter.acquire(p.units, { signal: controller?.signal }))
            .then(
              (permit) => {
                outcome.at = clock.now();
                outcome.served = true;
                if (p.throttle !== undefined) permit.throttled(p.throttle);
                else permit.success();
                clock.end(request);
              },
              () => {
                outcome.at = clock.now();
                outcome.served = false;
                clock.end(request);
              },
            );
        }, p.arrive),
      );
      if (controller !== undefined)
        clock.in(request, () =>
          clock.setTimeout(() => controller.abort(new Error('gave up')), p.abortAt as number),
        );
      if (p.goneAt !== undefined)
        clock.in('driver', () =>
          clock.setTimeout(() => {
            gone.add(i);
            clock.end(request);
          }, p.goneAt as number),
        );
    });
    const alive = (): void => {
      if (!endsRequests) return;
      plan.forEach((p, i) => {
        const o = outcomes[i] as Outcome;
        if (o.at === undefined && !gone.has(i) && clock.now() > p.arrive)
          expect(clock.pending(`r${i}`), `r${i} at ${clock.now()} ms`).toBeGreaterThan(0);
      });
    };
    await clock.advanceTo(40_000, alive);
    return outcomes.map((o, i) => (plan[i]?.goneAt === undefined ? o : {}));
  } finally {
    limiter.close();
  }
}

it.each(['line', 'window'] as const)(
  'serves each call of random lines (units, aborts, 429s) at the same time whether or not each request ends as it answers (%s)',
  async (kind) => {
    for (let seed = 1; seed <= 40; seed++) {
      const plan = plans(seed, false, kind);
      const expected = await runPlan(kind, plan, false);
      expect(await runPlan(kind, plan, true), `seed ${seed}`).toEqual(expected);
    }
  },
);

it.each(['line', 'window'] as const)(
  'serves each call of random lines behind a call whose request ended while it waited at the same time as with every request alive (%s)',
  async (kind) => {
    // One call of each line gone (its request answered without it, its call left in the line):
    // while it headed the line, the calls behind it woke at their turns as the rate predicted
    // them when they last woke, not as it rose since (up to 8.5 s late in these lines), and a
    // fixed window's served what it planned for a cycle nobody woke at a cycle later (1 s late).
    for (let seed = 1; seed <= 40; seed++) {
      const plan = plans(seed, false, kind);
      const next = random(seed * 7919);
      const gone = plan[Math.floor(next() * plan.length)] as Plan;
      gone.goneAt = gone.arrive + Math.floor(next() * 8000);
      // Aborted by nobody: its timers end with its request.
      delete gone.abortAt;
      const expected = await runPlan(kind, plan, false);
      expect(await runPlan(kind, plan, true), `seed ${seed}`).toEqual(expected);
    }
  },
);

it.each(['line', 'window'] as const)(
  'serves or refuses each call of random lines behind two calls next to each other whose requests ended while they waited by its deadline, never past it (%s)',
  async (kind) => {
    // Two calls next to each other gone (their requests answered without them, their calls left in
    // the line): the calls behind them wake at their turns as the rate predicted them at their last
    // wake, not as it rose since, so they may go later than with every request alive (a fixed
    // window: a cycle later for each cycle nobody woke at); but each is served by its deadline
    // (maxWait, timeoutDuration) or refused by it (a fixed window's: up to 1 s past it before).
    const maxWait = 5000;
    let moved = 0;
    for (let seed = 1; seed <= 40; seed++) {
      const plan = plans(seed, false, kind);
      const order = plan.map((_, i) => i).sort((a, b) => (plan[a] as Plan).arrive - (plan[b] as Plan).arrive);
      const next = random(seed * 104_729);
      const at = Math.floor(next() * (order.length - 2));
      const first = plan[order[at] as number] as Plan;
      const second = plan[order[at + 1] as number] as Plan;
      for (const gone of [first, second]) {
        delete gone.abortAt;
        gone.goneAt = second.arrive + Math.floor(next() * 3000);
      }
      const alive = await runPlan(kind, plan, false, maxWait);
      const ended = await runPlan(kind, plan, true, maxWait);
      ended.forEach((o, i) => {
        const p = plan[i] as Plan;
        if (p.goneAt !== undefined || p.abortAt !== undefined) return;
        expect(o.at, `seed ${seed}, r${i}`).toBeDefined();
        expect(
          o.at as number,
          `seed ${seed}, r${i} (${o.served ? 'served' : 'refused'})`,
        ).toBeLessThanOrEqual(p.arrive + maxWait + 1);
        const a = alive[i] as Outcome;
        if (o.at !== a.at || o.served !== a.served) moved++;
      });
    }
    // Some went otherwise than with every request alive (the lines tell nothing if none did).
    expect(moved).toBeGreaterThan(0);
  },
);

it('keeps at most two timers of each waiting call while a line drains as its rate rises at each grant, and none once closed', async () => {
  const clock = new RequestClock(true);
  const limiter = new worker.AdaptiveRateLimiter({
    name: 'worker',
    initialUnitsPerMinute: 600,
    maxWait: 600_000,
    clock,
  });
  const n = 300;
  let most = 0;
  try {
    clock.in('first', () => limiter.tryAcquire())?.success();
    clock.end('first');
    // Each success raises the rate: the limiter's timer moves at each grant (a nudge each).
    const calls = callsEndingWhenServed(clock, limiter, n);
    await flush();
    const bounded = (): void => {
      const waiting = n - calls.served;
      most = Math.max(most, clock.pendingTimers - 2 * waiting);
    };
    for (let t = 100; calls.served < n && t < 120_000; t += 100) await clock.advanceTo(t, bounded);
    expect(calls.served).toBe(n);
    // One keep-alive a call, one at the limiter's timer for the head, and the limiter's own.
    expect(most).toBeLessThanOrEqual(1);
    // 1,202: each move of the limiter's timer sets the timers of the head and of the one behind
    // it again (924 when only the head's was).
    expect(clock.armed).toBeLessThanOrEqual(4.1 * n);
    // A line closed with calls in it leaves no timer behind.
    const left = Array.from({ length: 50 }, (_, i) =>
      clock.in(`c${i}`, () => limiter.acquire()).catch(() => 'closed'),
    );
    await flush();
    expect(clock.pendingTimers).toBeGreaterThan(50);
    limiter.close();
    // The first granted at once (the bucket filled meanwhile), every other refused.
    expect((await Promise.all(left)).slice(1)).toEqual(left.slice(1).map(() => 'closed'));
    await flush();
    expect(clock.pendingTimers).toBe(0);
  } finally {
    limiter.close();
  }
});

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

async function collected(refs: WeakRef<object>[]): Promise<number> {
  for (let i = 0; i < 3; i++) {
    await flush();
    gc();
  }
  return refs.filter((ref) => ref.deref() === undefined).length;
}

it.each(['line', 'window'] as const)(
  'keeps nothing of 10,000 calls served from a line in a Worker (%s)',
  async (kind) => {
    const clock = new ManualClock();
    const n = 10_000;
    const limiter =
      kind === 'line'
        ? new worker.AdaptiveRateLimiter({
            name: 'worker',
            initialUnitsPerMinute: 600_000,
            slowStart: false,
            maxWait: 600_000,
            clock,
          })
        : new worker.FixedWindowRateLimiter({
            name: 'worker',
            limitForPeriod: 100,
            limitRefreshPeriod: 10,
            timeoutDuration: 600_000,
            clock,
          });
    try {
      while (limiter.tryAcquire() !== undefined);
      const refs: WeakRef<object>[] = [];
      let served = 0;
      for (let i = 0; i < n; i++) {
        // What names a call of the fetch wrapper's while it waits (line), or its promise (window).
        const cancel = { waitingIn: undefined, waitSeq: 0 };
        const options = (kind === 'line' ? { [worker.kWaitCancel]: cancel } : {}) as AcquireOptions;
        const promise = limiter.acquire(1, options);
        refs.push(new WeakRef(kind === 'line' ? cancel : promise));
        promise.then((permit) => {
          permit.success();
          served++;
        });
      }
      for (let t = 0; served < n && t < 100_000; t += 10) {
        clock.advance(10);
        await flush();
      }
      expect(served).toBe(n);
      expect(await collected(refs)).toBeGreaterThanOrEqual(n - 1);
    } finally {
      limiter.close();
    }
  },
  // 7 s on a quiet machine, 21 s beside other suites (10,000 calls drained, then collected).
  60_000,
);

it.each([
  [
    'cancelled',
    (cancel: { waitingIn?: { cancel(seq: number, reason: unknown): void }; waitSeq: number }) =>
      cancel.waitingIn?.cancel(cancel.waitSeq, new Error('gone')),
  ],
  ['closed out', () => {}],
] as const)(
  "leaves no timer and keeps nothing of 500 calls told by callbacks (the interceptor's way) in a Worker's line, %s",
  async (how, leave) => {
    const clock = new ManualClock();
    const limiter = new worker.AdaptiveRateLimiter({
      name: 'worker',
      initialUnitsPerMinute: 60,
      maxWait: 600_000,
      clock,
    });
    const n = 500;
    const refs: WeakRef<object>[] = [];
    let left = 0;
    try {
      limiter.tryAcquire()?.success();
      const cancels = Array.from({ length: n }, () => {
        const cancel = {
          waitingIn: undefined,
          waitSeq: 0,
          granted: (permit: Permit) => {
            left++;
            permit.success();
          },
          refused: () => {
            left++;
          },
        };
        limiter.acquire(1, { [worker.kWaitCancel]: cancel } as AcquireOptions);
        refs.push(new WeakRef(cancel));
        return cancel;
      });
      await flush();
      // Each keeps a timer of its own while it waits.
      expect(clock.pendingTimers).toBeGreaterThan(n);
      if (how === 'cancelled') for (const cancel of cancels) leave(cancel);
      else limiter.close();
      cancels.length = 0;
      await flush();
      // Each told it left (the last cancels may let one go: the units of those before came back).
      expect(left).toBe(n);
      // Its own timers ended as it left (none held its request on to its deadline).
      expect(clock.pendingTimers).toBe(0);
      expect(await collected(refs)).toBeGreaterThanOrEqual(n - 1);
    } finally {
      limiter.close();
    }
  },
);
