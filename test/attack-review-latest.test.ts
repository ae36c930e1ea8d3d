import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { classifyThrown } from '../src/wrap/sdk-errors.js';
import { wrap } from '../src/wrap/wrap.js';
import { against } from './helpers/refilling-answers.js';
import { flush as tick } from './helpers/unhandled.js';

describe('3ddc7ca: the floor of a cut by a call of more than a second of the rate', () => {
  it('calls of 3 units, maxWait 500 ms, a server of 60 units a minute: the cut stops at the floor: rate held at 5x the server, 3 of 4 sends 429s (calls of 1 unit are not)', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, maxWait: 500, random: () => 0.5 });
    // Calls of 1 unit in the same run: rate 42, 2 429s for 233 successes (the commit's own test).
    // Calls of 3: a cut below 180/min (3 units > a second of it) floors at 3 * 60,000 / 450 = 400,
    // capped by the rate before it: no cut at all. Today: rate 324, 253 429s for 85 successes.
    const counts = await against(limiter, clock, 60, 3, 250, 600_000, 300_000);
    expect(counts.rate).toBeLessThanOrEqual(66);
    // The code before the floor drew 10 429s for some 60 successes here (calls of 3 units with a
    // maxWait of 500 ms pause often): a quarter bounds that, not the floor's 253 for 85.
    expect(counts.throttled).toBeLessThanOrEqual(counts.ok / 4);
  });
});

/** A Stainless-generated SDK's error for a non-LLM API (Cloudflare's `cloudflare` package): `status`, `headers`, `error` the body. */
class CloudflareAPIError extends Error {
  constructor(
    readonly status: number,
    readonly error: Record<string, unknown>,
    readonly headers = new Headers(),
  ) {
    super(`${status} ${JSON.stringify(error)}`);
  }
}
const cloudflareBody = {
  success: false,
  errors: [{ code: 10000, message: 'Authentication error' }],
  messages: [],
  result: null,
};

describe('5bea5b9: classifyThrown reads any 4xx whose error has an `error` object as an LLM refusal', () => {
  it("a non-LLM Stainless SDK's 404 (Cloudflare's APIError: status, headers, error = body) is no LLM refusal: an answer the server processed, as the HTTP adapters count a 404", () => {
    // It was `{ kind: 'success', refused: true }` (its draws given back as an LLM API's refusal).
    // A 4xx other than a throttle is a success, as through the HTTP adapters (their table: "other
    // 4xx: success"), not a refused call.
    expect(classifyThrown(new CloudflareAPIError(404, cloudflareBody))).toEqual({ kind: 'success' });
  });

  it('an AWS throttling error (ThrottlingException, 400) that carries an `error` object is still throttled: retried and cut', async () => {
    const throttle = () =>
      Object.assign(new Error('Rate exceeded'), {
        name: 'ThrottlingException',
        $metadata: { httpStatusCode: 400 },
        // A wrapper that keeps the parsed body as `error`.
        error: { __type: 'ThrottlingException', message: 'Rate exceeded' },
      });
    const kind = classifyThrown(throttle()).kind;
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 600 });
    let attempts = 0;
    const call = wrap(limiter, async () => {
      attempts++;
      if (attempts === 1) throw throttle();
      return 'ok';
    });
    let out: unknown;
    call().then(
      (v) => (out = v),
      (e: unknown) => (out = e),
    );
    for (let i = 0; i < 200 && out === undefined; i++) {
      await tick();
      clock.advance(100);
    }
    const { throttles } = limiter.snapshot();
    limiter.close();
    // Today: the call ends with the ThrottlingException after one attempt, and the limiter counts a success.
    expect({ kind, out, attempts, throttles }).toEqual({
      kind: 'throttled',
      out: 'ok',
      attempts: 2,
      throttles: 1,
    });
  });
});

describe('5bea5b9: wrap refuses a costs promise, and leaves it unhandled', () => {
  it("an async costs function's promise gets a handler: its rejection (a tokenizer that failed to load) is no unhandled rejection", async () => {
    let handled = false;
    // A promise that never settles (so this test leaves no unhandled rejection of its own), told
    // when anyone attaches a handler: a real async costs function that rejects crashes Node 20.
    class Watched<T> extends Promise<T> {
      // biome-ignore lint/suspicious/noThenProperty: a promise that tells when a handler is attached.
      override then<A = T, B = never>(
        onFulfilled?: ((value: T) => A | PromiseLike<A>) | null,
        onRejected?: ((reason: unknown) => B | PromiseLike<B>) | null,
      ): Promise<A | B> {
        handled = true;
        return super.then(onFulfilled, onRejected);
      }
    }
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({
      clock,
      budgets: { requests: { initialUnitsPerMinute: 600 }, tokens: { initialUnitsPerMinute: 60_000 } },
    });
    const call = wrap(limiter, async () => 'answer', {
      costs: (() => new Watched<Record<string, number>>(() => {})) as never,
    });
    const error = await call().then(
      () => undefined,
      (e: unknown) => e,
    );
    limiter.close();
    expect((error as { callback?: string }).callback).toBe('costs');
    expect(handled).toBe(true);
  });
});
