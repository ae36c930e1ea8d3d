import type { HeaderLookup } from '../../headers.js';
import { singleText } from '../../headers.js';
import type { ReadQuota } from '../../limiter/types.js';

/**
 * Shopify documents its buckets as leaking their size every 20 seconds (40 and 2/s, 80 and 4/s,
 * 400 and 20/s), so a bucket's size over 20 s is its leak rate.
 */
const DRAIN_MS = 20_000;

const CALL_LIMIT = /^[ \t]*(\d{1,9})[ \t]*\/[ \t]*(\d{1,9})[ \t]*$/;

/**
 * Shopify's REST Admin API (profile `'shopify'`): `X-Shopify-Shop-Api-Call-Limit: 32/40`, the
 * level and the size of a leaky bucket. The ceiling is the leak rate (size over 20 s); with the
 * bucket full the limiter pauses for one marble to leak (20 s over the size).
 */
export function readShopify(headers: HeaderLookup): ReadQuota[] | undefined {
  const match = CALL_LIMIT.exec(singleText(headers, 'x-shopify-shop-api-call-limit') ?? '');
  if (match === null) return undefined;
  const used = Number(match[1]);
  const size = Number(match[2]);
  if (size === 0 || used > size) return undefined;
  return [
    {
      policy: 'shopify',
      remaining: size - used,
      resetMs: DRAIN_MS / size,
      limit: size,
      windowMs: DRAIN_MS,
      asAnnounced: true,
    } satisfies ReadQuota,
  ];
}
