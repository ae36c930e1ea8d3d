// workerd (test/runtimes.test.ts): one fetch wrapper in module scope, kept across requests and
// shared by those the Worker serves at once. GET /?origin=ORIGIN&name=NAME&calls=N makes N calls
// to ORIGIN/NAME/i through it, one after the other, and answers their statuses as JSON; with
// tell=1 it GETs ORIGIN/queued (plain fetch) once its second call waits for its turn.
import { rateLimitedFetch } from 'adaptive-rate-limit/fetch';

/** 60 units/min: a call a second; a call behind another waits for its turn. */
const limited = rateLimitedFetch({ default: { initialUnitsPerMinute: 60, maxUnitsPerMinute: 60 } });

export default {
  async fetch(request) {
    const params = new URL(request.url).searchParams;
    const origin = params.get('origin');
    const calls = Number(params.get('calls'));
    const statuses = [];
    for (let i = 1; i <= calls; i++) {
      const call = limited(`${origin}/${params.get('name')}/${i}`);
      if (i === 2 && params.get('tell') === '1') await (await fetch(`${origin}/queued`)).text();
      const response = await call;
      await response.text();
      statuses.push(response.status);
    }
    return Response.json({ statuses });
  },
};
