// workerd (test/runtimes.test.ts), at a compatibility date whose timers are numbers, as a
// browser's are: GET /?origin=ORIGIN answers as JSON how a pause nobody waits for went (the
// limiter's idle timer), told by a permit and by a fetch whose one attempt was answered 429.
import { AdaptiveRateLimiter, rateLimitedFetch } from 'adaptive-rate-limit/fetch';

async function outcome(step) {
  try {
    return await step();
  } catch (error) {
    return `${error?.name}: ${error?.message}`;
  }
}

export default {
  async fetch(request) {
    const origin = new URL(request.url).searchParams.get('origin');
    const limiter = new AdaptiveRateLimiter({ name: 'idle', initialUnitsPerMinute: 600 });
    const permit = await outcome(async () => {
      (await limiter.acquire()).throttled(1000);
      return limiter.snapshot().pausedUntil !== undefined ? 'paused' : 'not paused';
    });
    limiter.close();
    const limited = rateLimitedFetch({ maxAttempts: 1, default: { initialUnitsPerMinute: 600 } });
    // The quota server answers the third request of a path prefix 429.
    const statuses = [];
    const fetched = await outcome(async () => {
      for (const i of [1, 2, 3]) statuses.push((await limited(`${origin}/idle/${i}`)).status);
      return statuses;
    });
    limited.close();
    return Response.json({ timer: typeof setTimeout(() => {}, 0), permit, fetched });
  },
};
