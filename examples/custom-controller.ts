/**
 * Your own rate controller: RateLimiting.Adaptive's StepController as a `RateController` object. It halves the
 * rate on a throttle; on a success, when requests had to wait and `interval` has passed since the
 * last change, it adds `step` units/min (for the whole budget, so divided among the instances).
 * The limiter does the rest: clock, min and max, cooldown, pauses, instance share.
 *
 *   node --import tsx examples/custom-controller.ts
 */
import { Agent } from 'undici';
import { adaptiveRateLimit, type RateController } from '../src/index.js';
import { startServer } from './server.js';

/** RateLimiting.Adaptive uses `interval: 30_000`; this demo steps every 250 ms to fit in a few seconds. */
function stepController({ step, interval }: { step: number; interval: number }): RateController {
  return {
    onThrottled: (state) => Math.max(state.rate / 2, state.minRate),
    onSuccess: (state) =>
      !state.waited || state.sinceLastIncrease < interval
        ? undefined
        : state.rate + step / state.instanceCount,
  };
}

const server = await startServer({ perMinute: 600 });
const initialUnitsPerMinute = 300;
const rateLimit = adaptiveRateLimit({
  default: {
    controller: stepController({ step: 180, interval: 250 }),
    initialUnitsPerMinute,
    maxWait: 10_000,
  },
});
const agent = new Agent().compose(rateLimit);

// Watch the limiter's rate move: its events name each change.
const rates = [String(initialUnitsPerMinute)];
rateLimit.registry.on('added', ({ limiter }) => {
  limiter.on('decreased', ({ to }) => rates.push(`${Math.round(to)} (cut)`));
  limiter.on('increased', ({ to }) => rates.push(String(Math.round(to))));
});

// Eight workers send requests back to back for 2.5 s: they always wait, so the rate steps up
// until the server answers 429, and the controller halves it.
const statuses: number[] = [];
const end = performance.now() + 2_500;
await Promise.all(
  Array.from({ length: 8 }, async () => {
    while (performance.now() < end) {
      const { statusCode, body } = await agent.request({
        origin: server.origin,
        method: 'GET',
        path: '/items',
      });
      await body.dump();
      statuses.push(statusCode);
    }
  }),
);

const ok = statuses.filter((s) => s === 200).length;
const limiter = rateLimit.registry.limiterFor(server.origin)!.snapshot();
console.log(`step controller: ${ok} of ${statuses.length} requests answered 200`);
console.log(
  `server (quota ${server.perMinute}/min): saw ${server.stats.requests} requests, answered ${server.stats.throttled} with 429`,
);
console.log(`rate (units/min): ${rates.join(' -> ')}`);
console.log(`limiter ends at ${Math.round(limiter.rate)} units/min after ${limiter.cuts} cut(s)`);

rateLimit.close();
await agent.close();
await server.close();
