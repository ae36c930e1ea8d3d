// workerd (test/runtimes.test.ts): one limiter kept in module scope across requests, 60 units/min.
// GET /head gives up waiting after 300 ms without cancelling its call and answers (its request
// ends, its timers with it, its call still in the line); any other GET waits its turn, tells a
// success and answers with what it waited (ms) as JSON; refused, it answers 503 with the refusal.
import { AdaptiveRateLimiter } from 'adaptive-rate-limit/fetch';

const limiter = new AdaptiveRateLimiter({ name: 'gone', initialUnitsPerMinute: 60, maxWait: 20_000 });

export default {
  async fetch(request) {
    const path = new URL(request.url).pathname;
    try {
      if (path === '/head') {
        // Gives up after 300 ms without cancelling its call, and answers: its request ends.
        const late = new Promise((resolve) => setTimeout(() => resolve('gave up'), 300));
        return new Response(await Promise.race([limiter.acquire().then(() => 'served'), late]));
      }
      const permit = await limiter.acquire();
      permit.success();
      return Response.json({ waited: permit.waitedMs });
    } catch (error) {
      return new Response(String(error?.message ?? error), { status: 503 });
    }
  },
};
