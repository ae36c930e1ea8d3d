import diagnosticsChannel from 'node:diagnostics_channel';
import type { AdaptiveRateLimiter } from './limiter/adaptive.js';
import type { LimiterEventMap } from './limiter/events.js';

/**
 * `node:diagnostics_channel` channels, for APMs and loggers that watch a process without
 * holding its limiters. A message is published only while a channel has subscribers, so an
 * unwatched channel costs one boolean check per event.
 *
 * | channel | published when | payload |
 * | --- | --- | --- |
 * | `adaptive-rate-limit:throttle` | a response was throttled | `{ limiter, retryAfterMs, cut }`: `retryAfterMs` is the wait the server asked for (ms, before `maxPause`) or `undefined`; `cut` whether the rate was cut |
 * | `adaptive-rate-limit:rate` | the rate changed | `{ limiter, from, to, cause }`: units/min of this process; `cause` is `'throttle'`, `'success'` or `'update'` |
 * | `adaptive-rate-limit:pause` | sends paused after a Retry-After | `{ limiter, until, ms, requestedMs }`: `until` on the limiter's clock, `ms` the pause after `maxPause`, `requestedMs` what the server asked for |
 * | `adaptive-rate-limit:reject` | a request was refused unsent | `{ limiter, units, reason, message }`: `reason` is `'queue-full'`, `'max-wait'`, `'timeout'` or `'closed'` |
 *
 * `limiter` is the limiter's name, its secrets masked (`redactText`) as everything the library
 * echoes back. Payloads are the limiter's own event objects (see `LimiterEventMap`), so the same
 * fields reach `limiter.on(...)` listeners.
 *
 * ```ts
 * import diagnosticsChannel from 'node:diagnostics_channel';
 * diagnosticsChannel.subscribe('adaptive-rate-limit:throttle', (message) => console.log(message));
 * ```
 */
export const DIAGNOSTICS_CHANNELS = {
  throttle: 'adaptive-rate-limit:throttle',
  rate: 'adaptive-rate-limit:rate',
  pause: 'adaptive-rate-limit:pause',
  reject: 'adaptive-rate-limit:reject',
} as const;

const throttle = diagnosticsChannel.channel(DIAGNOSTICS_CHANNELS.throttle);
const rate = diagnosticsChannel.channel(DIAGNOSTICS_CHANNELS.rate);
const pause = diagnosticsChannel.channel(DIAGNOSTICS_CHANNELS.pause);
const reject = diagnosticsChannel.channel(DIAGNOSTICS_CHANNELS.reject);

const attached = new WeakSet<AdaptiveRateLimiter>();

function publisher<K extends keyof LimiterEventMap>(channel: diagnosticsChannel.Channel) {
  return (...[message]: LimiterEventMap[K]) => {
    if (channel.hasSubscribers) channel.publish(message);
  };
}

const onThrottled = publisher<'throttled'>(throttle);
const onRate = publisher<'decreased' | 'increased'>(rate);
const onPaused = publisher<'paused'>(pause);
const onRejected = publisher<'rejected'>(reject);

/**
 * Publishes a limiter's throttle, rate, pause and reject events on the
 * {@link DIAGNOSTICS_CHANNELS}. Idempotent per limiter; the HTTP adapters call it for every
 * limiter they use.
 */
export function attachDiagnostics(limiter: AdaptiveRateLimiter): void {
  if (attached.has(limiter)) return;
  attached.add(limiter);
  limiter.on('throttled', onThrottled);
  limiter.on('decreased', onRate);
  limiter.on('increased', onRate);
  limiter.on('paused', onPaused);
  limiter.on('rejected', onRejected);
}
