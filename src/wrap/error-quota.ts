import type { HeaderProfile } from '../config/types.js';
import { headerRecord } from '../headers.js';
import { onlyQuotaReset } from '../http/classify.js';
import { type QuotaReader, quotaReader } from '../http/quota-headers/index.js';
import { rateLimitWait, serverWait } from '../http/retry-after.js';
import type { AnnouncedQuota, Outcome } from '../limiter/types.js';
import { headersAndLookup } from './sdk-errors.js';

/** A call's outcome with the quotas its thrown error's headers announce added. */
type ErrorQuota = (error: unknown, outcome: Outcome) => Outcome;

/**
 * What `wrap`'s `headers` profile makes of a thrown error: the quotas its response headers
 * announce (`headersOfError`'s: an openai or Anthropic `APIError`'s `headers`, a `Headers`, a
 * record, a `Map` or an array of pairs; `response.headers`; `$response.headers`), read by the same
 * reader as the HTTP adapters' `headers` (`quota-headers/`), added to the outcome `classifyError`
 * gave, before what that outcome carries of its own (as the HTTP adapters put `quotaFromHeaders`'
 * after the profile's). The permit then passes them to the limiter's ceiling as an HTTP answer's.
 * `undefined`: `false` or no profile, nothing read.
 *
 * It never throws: an error without headers, or one whose headers cannot be read (a getter that
 * throws), adds nothing, and the caller gets the SDK's own error. An outcome of no HTTP answer
 * (`noAnswer`, `notSent`) is left as it is: the limiter reads no quota from it.
 *
 * `markQuotaWait`: the outcome's wait was read from the headers (the default `classifyThrown`),
 * so one that is only an exhausted policy's reset is marked `quotaWait`; a wait a `classifyError`
 * of the caller's own asked for stands as asked.
 */
export function errorQuota(
  profile: HeaderProfile | false | undefined,
  markQuotaWait: boolean,
): ErrorQuota | undefined {
  if (profile === undefined || profile === false) return undefined;
  const read = quotaReader(profile, undefined);
  if (read === undefined) return undefined;
  return (error, outcome) => {
    if (noAnswer(outcome)) return outcome;
    try {
      return withErrorQuota(read, error, outcome, markQuotaWait);
    } catch {
      // A header shape no reader expected (a getter, a Proxy that throws): nothing read.
      return outcome;
    }
  };
}

function withErrorQuota(
  read: QuotaReader,
  error: unknown,
  outcome: Outcome,
  markQuotaWait: boolean,
): Outcome {
  // The headers `classifyError` found already, when it looked (`readingHeadersOnce`).
  const { headers, lookup } = headersAndLookup(error);
  if (lookup === undefined) return outcome;
  const nowMs = Date.now();
  const found = read(lookup, () => headerRecord(headers), nowMs);
  if (found === undefined) return outcome;
  const own = outcome.quota;
  const quota: readonly AnnouncedQuota[] = own === undefined ? found : [...found, ...own];
  // A throttle whose only wait is an exhausted `ratelimit` policy's reset, and that policy read:
  // marked as the HTTP adapters mark it (the limiter pauses as the policy's learned shape says).
  if (
    markQuotaWait &&
    outcome.kind === 'throttled' &&
    outcome.pauseOnly !== true &&
    outcome.retryAfterMs !== undefined &&
    outcome.retryAfterMs === rateLimitWait(lookup) &&
    onlyQuotaReset(serverWait(lookup, nowMs), outcome.retryAfterMs, quota)
  )
    return { ...outcome, quota, quotaWait: true };
  return { ...outcome, quota };
}

/** Whether an outcome says no HTTP answer came (`noAnswer`, `notSent`). */
function noAnswer(outcome: Outcome): boolean {
  return outcome.kind === 'failed' && (outcome.noAnswer === true || outcome.notSent === true);
}
