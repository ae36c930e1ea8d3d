import type { HeaderLookup } from '../../headers.js';
import { nonNegativeInteger, singleText } from '../../headers.js';
import type { AnnouncedQuota } from '../../limiter/types.js';

/** OpenAI's limits in these headers are per minute (RPM, TPM). */
const WINDOW_MS = 60_000;

const UNIT_MS: Readonly<Record<string, number>> = {
  h: 3_600_000,
  m: 60_000,
  s: 1000,
  ms: 1,
  us: 1e-3,
  µs: 1e-3,
  ns: 1e-6,
};
const DURATION_PART = /(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)/y;

/**
 * A Go duration as OpenAI writes its resets (`6m0s`, `1s`, `12ms`, `1h2m3.5s`), in ms, or
 * `undefined` for anything else (a sign, a bare number, garbage).
 */
export function parseGoDuration(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const value = text.trim();
  if (value === '') return undefined;
  let ms = 0;
  DURATION_PART.lastIndex = 0;
  while (DURATION_PART.lastIndex < value.length) {
    const at = DURATION_PART.lastIndex;
    const match = DURATION_PART.exec(value);
    if (match === null || match.index !== at) return undefined;
    ms += Number(match[1]) * (UNIT_MS[match[2] as string] as number);
  }
  return Number.isFinite(ms) ? ms : undefined;
}

interface Budget {
  limit: number;
  remaining: number;
  resetMs: number | undefined;
}

function budget(headers: HeaderLookup, kind: 'requests' | 'tokens'): Budget | undefined {
  const limit = nonNegativeInteger(singleText(headers, `x-ratelimit-limit-${kind}`));
  const remaining = nonNegativeInteger(singleText(headers, `x-ratelimit-remaining-${kind}`));
  if (limit === undefined || remaining === undefined || limit === 0 || remaining > limit) return undefined;
  return { limit, remaining, resetMs: parseGoDuration(singleText(headers, `x-ratelimit-reset-${kind}`)) };
}

/**
 * OpenAI's API (profile `'openai'`): `x-ratelimit-limit-requests`, `-remaining-requests`,
 * `-reset-requests` (a duration such as `6m0s`: the time until the budget is full again), and
 * the same for `-tokens`, a second budget. Both refill continuously over a minute, so each
 * ceiling is its limit per minute, and with nothing left the limiter pauses for one unit to
 * refill (the reset over the units missing), not for the whole reset.
 *
 * The token budget is read in requests: tokens per request are taken from this response, as the
 * tokens used over the requests used (both budgets' limit minus what remains); without requests
 * used, it is not read. Charge tokens as units? Give your own `quotaFromHeaders`.
 */
export function readOpenai(headers: HeaderLookup): AnnouncedQuota[] | undefined {
  const requests = budget(headers, 'requests');
  const tokens = budget(headers, 'tokens');
  const out: AnnouncedQuota[] = [];
  if (requests !== undefined) out.push(refilling('openai:requests', requests, 1));
  const requestsUsed = requests === undefined ? 0 : requests.limit - requests.remaining;
  if (tokens !== undefined && requestsUsed > 0 && tokens.limit > tokens.remaining) {
    out.push(refilling('openai:tokens', tokens, (tokens.limit - tokens.remaining) / requestsUsed));
  }
  return out.length === 0 ? undefined : out;
}

/** A budget that refills continuously, in requests of `perRequest` of its units. */
function refilling(policy: string, b: Budget, perRequest: number): AnnouncedQuota {
  const missing = b.limit - b.remaining;
  // One unit refills in the reset over the units missing; without a reset, in a minute over the limit.
  const oneUnitMs = b.resetMs !== undefined && missing > 0 ? b.resetMs / missing : WINDOW_MS / b.limit;
  return {
    policy,
    remaining: b.remaining / perRequest,
    resetMs: oneUnitMs * perRequest,
    limit: b.limit / perRequest,
    windowMs: WINDOW_MS,
  };
}
