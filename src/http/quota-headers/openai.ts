import type { HeaderLookup } from '../../headers.js';
import { nonNegativeInteger, singleText } from '../../headers.js';
import type { AnnouncedQuota, ReadQuota } from '../../limiter/types.js';

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
  /** No limit was sent: `limit` is `remaining`, a lower bound of it (Azure OpenAI). */
  lowerBound?: true;
}

function budget(headers: HeaderLookup, kind: 'requests' | 'tokens'): Budget | undefined {
  const sent = singleText(headers, `x-ratelimit-limit-${kind}`);
  const limit = nonNegativeInteger(sent);
  const remaining = nonNegativeInteger(singleText(headers, `x-ratelimit-remaining-${kind}`));
  if (remaining === undefined) return undefined;
  const reset = singleText(headers, `x-ratelimit-reset-${kind}`);
  const seconds = nonNegativeInteger(reset);
  const resetMs = parseGoDuration(reset) ?? (seconds === undefined ? undefined : seconds * 1000);
  // Azure OpenAI sends `remaining` alone: a refilling bucket holds at most its limit.
  if (sent === undefined) return { limit: remaining, remaining, resetMs, lowerBound: true };
  if (limit === undefined || limit === 0 || remaining > limit) return undefined;
  return { limit, remaining, resetMs };
}

/**
 * OpenAI's API (profile `'openai'`): `x-ratelimit-limit-requests`, `-remaining-requests`,
 * `-reset-requests` (a duration such as `6m0s`: the time until the budget is full again), and
 * the same for `-tokens`. Each budget is read in its own units and names it (`budget:
 * 'requests'`, `budget: 'tokens'`): a limiter meters the budgets it has (a limiter of one budget
 * counts requests; `api: 'openai'` meters both). Both refill continuously over a minute, so each
 * ceiling is its limit per minute, and with nothing left the limiter pauses for one unit to refill
 * (the reset over the units missing), not for the whole reset. Azure OpenAI's integer-second
 * resets are read as seconds; where it sends `remaining` with no limit, that `remaining` is a lower
 * bound of the limit (`limitIsLowerBound`: the limiter takes the highest read as the limit).
 */
export function readOpenai(headers: HeaderLookup): AnnouncedQuota[] | undefined {
  const out: AnnouncedQuota[] = [];
  for (const kind of ['requests', 'tokens'] as const) {
    const b = budget(headers, kind);
    if (b !== undefined) out.push(refilling(`openai:${kind}`, kind, b));
  }
  return out.length === 0 ? undefined : out;
}

/** A budget that refills continuously over a minute, in its own units. */
export function refilling(policy: string, name: string, b: Budget): ReadQuota {
  if (b.lowerBound === true) {
    // The limit is not known, so neither is one unit's refill: `remaining` and the lower bound
    // (0 when nothing is left: the limiter's highest so far stands, if any) are all it reads.
    const { remaining } = b;
    return {
      policy,
      budget: name,
      remaining,
      limit: remaining,
      windowMs: WINDOW_MS,
      asAnnounced: true,
      limitIsLowerBound: true,
    };
  }
  const missing = b.limit - b.remaining;
  // One unit refills in the reset over the units missing; without a reset, in a minute over the limit.
  const oneUnitMs = b.resetMs !== undefined && missing > 0 ? b.resetMs / missing : WINDOW_MS / b.limit;
  return {
    policy,
    budget: name,
    remaining: b.remaining,
    resetMs: oneUnitMs,
    limit: b.limit,
    windowMs: WINDOW_MS,
    asAnnounced: true,
  };
}
