import type { HeaderProfile, QuotaFromHeaders } from '../../config/types.js';
import { InvalidCallbackValueError } from '../../errors.js';
import type { HeaderLookup, HeaderRecord } from '../../headers.js';
import { checkedQuotas, describeValue, quotaProblem, validQuotaFields } from '../../limiter/permit.js';
import type { AnnouncedQuota } from '../../limiter/types.js';
import { answeredLater, promiseAnswer } from '../../thenable.js';
import { readAnthropic } from './anthropic.js';
import { readGithub } from './github.js';
import { readIetf } from './ietf.js';
import { readOpenai } from './openai.js';
import { readShopify } from './shopify.js';

export { parseGoDuration } from './openai.js';

/** Reads the quotas a response announces; `nowMs` is the wall clock when it arrived. */
export type QuotaReader = (
  headers: HeaderLookup,
  record: () => HeaderRecord,
  nowMs: number,
) => AnnouncedQuota[] | undefined;

const VENDORS: Readonly<
  Record<Exclude<HeaderProfile, 'standard'>, (h: HeaderLookup, nowMs: number) => AnnouncedQuota[] | undefined>
> = {
  anthropic: readAnthropic,
  github: readGithub,
  openai: (h) => readOpenai(h),
  shopify: (h) => readShopify(h),
};

/**
 * The reader of a limiter's `headers` profile and `quotaFromHeaders`, or `undefined` when it
 * reads nothing. What `quotaFromHeaders` returns is added to what the profile reads. Its list is
 * checked here, once (the profile's quotas without the numbers no quota has, `quotaFromHeaders`'
 * refused by name), and marked so (`checkedQuotas`): the permit it settles does not check it again.
 */
export function quotaReader(
  profile: HeaderProfile | false | undefined,
  quotaFromHeaders: QuotaFromHeaders | undefined,
): QuotaReader | undefined {
  const chosen = profile ?? 'standard';
  const vendor = chosen === false || chosen === 'standard' ? undefined : VENDORS[chosen];
  if (chosen === false && quotaFromHeaders === undefined) return undefined;
  return (headers, record, nowMs) => {
    let out = chosen === false ? undefined : readIetf(headers);
    const more = vendor?.(headers, nowMs);
    if (more !== undefined) out = out === undefined ? more : [...out, ...more];
    if (out !== undefined) out = withValidFields(out);
    if (quotaFromHeaders !== undefined) {
      const own = ownQuota(quotaFromHeaders(record()));
      // Copied: the list is the reader's own, which the user's code no longer holds.
      if (own !== undefined) out = out === undefined ? [...own] : [...out, ...own];
    }
    return out === undefined ? undefined : checkedQuotas(out);
  };
}

/**
 * The quotas a server's headers announced, each without a number no announced quota has (a
 * `limit` of 0, say): the readers take what the headers say, and a permit refuses such a quota.
 */
function withValidFields(quotas: AnnouncedQuota[]): AnnouncedQuota[] {
  let out: AnnouncedQuota[] | undefined;
  for (let i = 0; i < quotas.length; i++) {
    const q = quotas[i] as AnnouncedQuota;
    const valid = validQuotaFields(q);
    if (valid === q) continue;
    out ??= [...quotas];
    out[i] = valid;
  }
  return out ?? quotas;
}

/**
 * What `quotaFromHeaders` returned, checked as `classify`'s answer is.
 * @throws {InvalidCallbackValueError} for anything but a quota (its numbers finite, `remaining`
 * and `resetMs` >= 0, `limit` and `windowMs` > 0, `policy` a string), a list of them, or `undefined`.
 */
function ownQuota(value: unknown): AnnouncedQuota[] | undefined {
  if (value === undefined) return undefined;
  // A promise (an `async` quotaFromHeaders) was read as a quota with no fields.
  if (answeredLater(value))
    throw new InvalidCallbackValueError(
      'quotaFromHeaders',
      `quotaFromHeaders returned ${promiseAnswer('quotaFromHeaders')}`,
      'Promise',
    );
  const list: unknown[] = Array.isArray(value) ? value : [value];
  for (const q of list) {
    const problem = quotaProblem(q);
    if (problem !== undefined) {
      throw new InvalidCallbackValueError(
        'quotaFromHeaders',
        `quotaFromHeaders returned ${describeValue(value)}: ${problem}; it must return { policy, remaining, resetMs, limit, windowMs }, a list of them, or undefined`,
        value,
      );
    }
  }
  return list as AnnouncedQuota[];
}
