// workerd (test/runtimes.test.ts): one limiter kept in module scope across requests, its rate
// rising with each success from 60 units/min. GET / waits its turn, tells a success and answers
// at once, with what it waited (ms) as JSON; refused, it answers 503 with the refusal's message.
import { AdaptiveRateLimiter } from 'adaptive-rate-limit/fetch';

const limiter = new AdaptiveRateLimiter({ name: 'rising', initialUnitsPerMinute: 60, maxWait: 35_000 });

export default {
  async fetch() {
    try {
      const permit = await limiter.acquire();
      permit.success();
      return Response.json({ waited: permit.waitedMs });
    } catch (error) {
      return new Response(String(error?.message ?? error), { status: 503 });
    }
  },
};
