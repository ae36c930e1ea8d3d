import * as util from 'node:util';
import { redactText } from '../redact.js';
import type { AdaptiveRateLimiter } from './adaptive.js';
import { addLimiterWatcher, limiterOrigins, limiterPartition } from './watch.js';

/**
 * `NODE_DEBUG=adaptive-rate-limit`: Node's `util.debuglog` (as undici's `NODE_DEBUG=undici`)
 * writes one line to stderr per cut, pause, rate change and refusal, naming the limiter and its
 * origin, every value through `redact()`. Read once, when the module loads (as Node reads
 * `NODE_DEBUG`); nothing is watched without it. Runtimes without `util.debuglog` get nothing.
 */
const debug = typeof util.debuglog === 'function' ? util.debuglog('adaptive-rate-limit') : undefined;

if (debug?.enabled) {
  const log = (format: string, ...values: unknown[]) =>
    debug('%s', redactText(util.format(format, ...values)));
  const watched = new WeakSet<AdaptiveRateLimiter>();
  addLimiterWatcher({
    watch(limiter: AdaptiveRateLimiter) {
      if (watched.has(limiter)) return;
      watched.add(limiter);
      /** The limiter, its origin, controller and partition, and the event's budget (of several). */
      const who = (e?: { budget?: string | undefined }) => {
        const origins = limiterOrigins(limiter);
        const parts = [
          origins.length === 0 ? 'no origin' : `origin ${origins.join(', ')}`,
          limiter.controllerName,
        ];
        const partition = limiterPartition(limiter);
        if (partition !== undefined) parts.push(`partition ${partition}`);
        if (e?.budget !== undefined) parts.push(`budget ${JSON.stringify(e.budget)}`);
        return `limiter ${JSON.stringify(limiter.name)} (${parts.join(', ')})`;
      };
      // A cut that moved the rate says itself (`decreased`, told before its `throttled`); one at
      // the floor leaves the rate as it is and tells no `decreased`: its `throttled` line says it.
      let cutTold = false;
      limiter.on('decreased', (e) => {
        if (e.cause === 'throttle') {
          cutTold = true;
          log('%s: cut %s -> %s units/min after a throttle', who(e), rate(e.from), rate(e.to));
        } else log('%s: rate %s -> %s units/min (%s)', who(e), rate(e.from), rate(e.to), e.cause);
      });
      limiter.on('increased', (e) => {
        log('%s: rate %s -> %s units/min (%s)', who(e), rate(e.from), rate(e.to), e.cause);
      });
      limiter.on('throttled', (e) => {
        const told = cutTold;
        cutTold = false;
        if (e.cut && told) return; // the cut's own line says it
        const after = e.retryAfterMs === undefined ? 'no Retry-After' : `Retry-After ${e.retryAfterMs} ms`;
        if (e.cut) {
          const snapshot = limiter.snapshot();
          const of = e.budget === undefined ? snapshot : (snapshot.budgets?.[e.budget] ?? snapshot);
          // At its floor, or a controller that kept the rate (a custom one that only pauses).
          const why = of.rate <= of.minRate ? 'at the floor' : 'the controller kept it';
          log('%s: throttled (%s), cut %s: the rate stays %s units/min', who(e), after, why, rate(of.rate));
        } else log('%s: throttled (%s), no cut (cooldown, or sent before the last cut)', who(e), after);
      });
      limiter.on('paused', (e) => {
        const asked = e.requestedMs === e.ms ? '' : ` (the server asked for ${e.requestedMs} ms; maxPause)`;
        log('%s: paused %d ms%s', who(e), e.ms, asked);
      });
      limiter.on('rejected', (e) => {
        log('%s: rejected %d units (%s): %s', who(e), e.units, e.reason, e.message);
      });
      limiter.on('canceled', (e) => {
        log('%s: wait of %d units canceled after %d ms (aborted)', who(e), e.units, e.waited);
      });
    },
  });
}

function rate(value: number): string {
  return Number.isFinite(value) ? String(Math.round(value * 100) / 100) : 'unlimited';
}
