import { type HeaderLookup, nonNegativeInteger, parseRfc3339, serverNow, singleText } from '../../headers.js';
import type { AnnouncedQuota } from '../../limiter/types.js';
import { refilling } from './openai.js';

/** Anthropic's header names and the budgets they describe. */
const BUDGETS = [
  ['requests', 'requests'],
  ['input-tokens', 'input_tokens'],
  ['output-tokens', 'output_tokens'],
] as const;

/**
 * Anthropic's API (profile `'anthropic'`): `anthropic-ratelimit-{requests,input-tokens,
 * output-tokens}-{limit,remaining,reset}`, `reset` an RFC 3339 time when the budget is full again
 * (read against the response's `Date`), token `remaining` rounded to the nearest thousand. Each
 * budget in its own units, named (`requests`, `input_tokens`, `output_tokens`); each refills
 * continuously over a minute, so its ceiling is its limit per minute. `tokens-*` (the most
 * restrictive of the others) adds nothing and is not read.
 */
export function readAnthropic(headers: HeaderLookup, nowMs: number): AnnouncedQuota[] | undefined {
  const out: AnnouncedQuota[] = [];
  const now = serverNow(headers, nowMs);
  for (const [header, name] of BUDGETS) {
    const limit = nonNegativeInteger(singleText(headers, `anthropic-ratelimit-${header}-limit`));
    const remaining = nonNegativeInteger(singleText(headers, `anthropic-ratelimit-${header}-remaining`));
    if (limit === undefined || remaining === undefined || limit === 0) continue;
    const reset = singleText(headers, `anthropic-ratelimit-${header}-reset`);
    // An RFC 3339 instant, as Anthropic documents it; anything else is no reset.
    const at = reset === undefined ? undefined : parseRfc3339(reset);
    const resetMs = at === undefined ? undefined : Math.max(0, at - now);
    out.push(refilling(`anthropic:${name}`, name, { limit, remaining: Math.min(remaining, limit), resetMs }));
  }
  return out.length === 0 ? undefined : out;
}
