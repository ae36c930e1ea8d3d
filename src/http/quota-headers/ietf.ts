import { type BareItem, type Item, parseDictionary, parseList } from 'structured-headers';
import type { HeaderLookup } from '../../headers.js';
import { fieldText, fromCache } from '../../headers.js';
import type { AnnouncedQuota } from '../../limiter/types.js';

/**
 * The IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers), parsed with
 * `structured-headers` (RFC 9651):
 *
 * - draft-08 and later (-10 is the reference): two Lists whose items are policy names (Strings),
 *   `RateLimit-Policy: "burst";q=100;w=60,"daily";q=1000;w=86400` (`q` quota, `w` window in
 *   seconds, `qu` quota unit, `pk` partition key) and `RateLimit: "burst";r=50;t=30` (`r` what
 *   is left, `t` seconds until it is restored). The two are joined by policy name.
 * - draft-07: `RateLimit: limit=100, remaining=50, reset=5` (a Dictionary) with
 *   `RateLimit-Policy: 100;w=10, 1000;w=3600` (Integer items).
 *
 * A field that does not parse, or holds a value of the wrong type (a negative, a decimal, a
 * Token for a name, a String for a number), is ignored whole, as the draft requires. A policy
 * whose `qu` is not `"requests"` (`"content-bytes"`, `"concurrent-requests"`) is not read: the
 * limiter meters requests (or your units), not bytes or requests in flight. Fields of a cached
 * response (`Age` > 0) are ignored. The draft-06 fields (`RateLimit-Limit`, `-Remaining`,
 * `-Reset`) are not read: GitLab sends the same names with an epoch reset.
 */
export function readIetf(headers: HeaderLookup): AnnouncedQuota[] | undefined {
  const current = fieldText(headers, 'ratelimit');
  const policies = fieldText(headers, 'ratelimit-policy');
  if (current === undefined && policies === undefined) return undefined;
  if (fromCache(headers)) return undefined;
  // A draft-08+ List starts with a policy name (a String); only a field that does not is tried as
  // the draft-07 Dictionary (a parse that fails throws, which costs more than the parse).
  const draft07 = current === undefined || /^[ \t]*"/.test(current) ? undefined : parseDraft07(current);
  if (draft07 !== undefined) return joinDraft07(draft07, policies);
  const byName = new Map<string, { -readonly [K in keyof AnnouncedQuota]: AnnouncedQuota[K] }>();
  const skipped = new Set<string>();
  // A name given twice in one field (a gateway's line and the app's) keeps its stricter item: the
  // smaller quota per window, the lower `r` (the same `r`: the later restore), as a 429 reads it.
  const policyOf = new Map<string, PolicyItem>();
  for (const policy of policies === undefined ? [] : (parsePolicies(policies) ?? [])) {
    const had = policyOf.get(policy.name);
    if (had === undefined || stricterPolicy(policy, had)) policyOf.set(policy.name, policy);
  }
  for (const policy of policyOf.values()) {
    if (policy.unit !== 'requests') skipped.add(policy.name);
    else byName.set(policy.name, { policy: policy.name, limit: policy.q, windowMs: policy.windowMs });
  }
  const itemOf = new Map<string, RateLimitItem>();
  for (const item of current === undefined ? [] : (parseRateLimit(current) ?? [])) {
    const had = itemOf.get(item.name);
    if (had === undefined || stricterItem(item, had)) itemOf.set(item.name, item);
  }
  for (const item of itemOf.values()) {
    if (skipped.has(item.name)) continue;
    const quota = byName.get(item.name) ?? { policy: item.name };
    quota.remaining = item.r;
    quota.resetMs = item.t === undefined ? undefined : item.t * 1000;
    byName.set(item.name, quota);
  }
  return byName.size === 0 ? undefined : [...byName.values()];
}

/** Whether `a` allows fewer units per window than `b` (without both windows: the smaller quota). */
function stricterPolicy(a: PolicyItem, b: PolicyItem): boolean {
  if (a.unit !== b.unit) return a.unit === 'requests';
  if (a.windowMs === undefined || b.windowMs === undefined) return a.q < b.q;
  return a.q * b.windowMs < b.q * a.windowMs;
}

/** Whether `a` leaves less than `b`: a lower `r`, or the same `r` restored later. */
function stricterItem(a: RateLimitItem, b: RateLimitItem): boolean {
  if (a.r !== b.r) return a.r < b.r;
  return (a.t ?? 0) > (b.t ?? 0);
}

/** One item of a draft-08+ `RateLimit`. */
export interface RateLimitItem {
  name: string;
  /** What is left (units). */
  r: number;
  /** Seconds until it is restored. */
  t: number | undefined;
}

/**
 * The last field text parsed and its result: an API sends the same `RateLimit-Policy` (and often
 * the same `RateLimit`) on answer after answer, and a parse costs about a microsecond. Results
 * are never changed by their readers.
 */
function lastOf<T>(parse: (field: string) => T): (field: string) => T {
  let lastField: string | undefined;
  let last: T;
  return (field) => {
    if (field !== lastField) {
      last = parse(field);
      lastField = field;
    }
    return last;
  };
}

/** A draft-08+ `RateLimit` List, or `undefined` when any of it is malformed. */
export const parseRateLimit: (field: string) => readonly RateLimitItem[] | undefined =
  lastOf(parseRateLimitList);

function parseRateLimitList(field: string): RateLimitItem[] | undefined {
  if (holdsDecimal(field)) return undefined;
  const list = tryParse(() => parseList(field));
  if (list === undefined) return undefined;
  const out: RateLimitItem[] = [];
  for (const member of list) {
    if (!isNamedItem(member)) return undefined;
    const [name, params] = member;
    const r = params.get('r');
    const t = params.get('t');
    if (!isCount(r) || (t !== undefined && !isCount(t)) || !validKey(params.get('pk'))) return undefined;
    out.push({ name, r, t });
  }
  return out;
}

interface PolicyItem {
  name: string;
  q: number;
  windowMs: number | undefined;
  unit: string;
}

/** A draft-08+ `RateLimit-Policy` List, or `undefined` when any of it is malformed. */
const parsePolicies = lastOf(parsePolicyList);

function parsePolicyList(field: string): PolicyItem[] | undefined {
  if (holdsDecimal(field)) return undefined;
  const list = tryParse(() => parseList(field));
  if (list === undefined) return undefined;
  const out: PolicyItem[] = [];
  for (const member of list) {
    if (!isNamedItem(member)) return undefined;
    const [name, params] = member;
    const q = params.get('q');
    const w = params.get('w');
    const qu = params.get('qu') ?? 'requests';
    if (!isCount(q) || typeof qu !== 'string' || !validKey(params.get('pk'))) return undefined;
    if (w !== undefined && !(isCount(w) && w > 0)) return undefined;
    out.push({ name, q, windowMs: w === undefined ? undefined : w * 1000, unit: qu });
  }
  return out;
}

interface Draft07 {
  limit: number;
  remaining: number;
  reset: number;
}

/** A draft-07 `RateLimit` Dictionary (`limit`, `remaining`, `reset`), or `undefined`. */
function parseDraft07(field: string): Draft07 | undefined {
  if (holdsDecimal(field)) return undefined;
  const dict = tryParse(() => parseDictionary(field));
  const value = (key: string) => {
    const member = dict?.get(key);
    return Array.isArray(member) && !Array.isArray(member[0]) ? (member[0] as BareItem) : undefined;
  };
  const limit = value('limit');
  const remaining = value('remaining');
  const reset = value('reset');
  if (!isCount(limit) || !isCount(remaining) || !isCount(reset)) return undefined;
  return { limit, remaining, reset };
}

/** The draft-07 reading: its window from the policy whose quota is the current limit. */
function joinDraft07(current: Draft07, policies: string | undefined): AnnouncedQuota[] {
  let windowMs: number | undefined;
  const list =
    policies === undefined || holdsDecimal(policies) ? undefined : tryParse(() => parseList(policies));
  for (const member of list ?? []) {
    const [q, params] = member as Item;
    const w = params.get('w');
    if (q === current.limit && isCount(w) && w > 0) {
      windowMs = w * 1000;
      break;
    }
  }
  return [
    {
      policy: 'default',
      remaining: current.remaining,
      resetMs: current.reset * 1000,
      limit: current.limit,
      windowMs,
    },
  ];
}

function tryParse<T>(parse: () => T): T | undefined {
  try {
    return parse();
  } catch {
    return undefined;
  }
}

/**
 * Whether a field gives a number it is read for as a Decimal (`r=5.0`, `q=1.5`, a draft-07 policy
 * `100.0;w=60`): the parser returns a Decimal as a number, so `r=5.0` would read as the Integer 5.
 * Strings and Byte Sequences are skipped; a parameter the draft does not define may be a Decimal.
 */
function holdsDecimal(field: string): boolean {
  const bare = field.replace(/"(?:[^"\\]|\\.)*"|:[^:]*:/g, '""');
  return (
    /(?:^|[;,])[ \t]*(?:q|w|r|t|limit|remaining|reset)=-?\d+\.\d/.test(bare) ||
    /(?:^|,)[ \t]*-?\d+\.\d/.test(bare)
  );
}

/** A List member that is an Item whose value is a String (a policy name), not an Inner List or a Token. */
function isNamedItem(member: unknown): member is [string, Map<string, BareItem>] {
  return Array.isArray(member) && typeof member[0] === 'string';
}

/** A non-negative Integer (RFC 9651 Integers have at most 15 digits). */
function isCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0;
}

/** `pk`, when present, is a Byte Sequence. */
function validKey(value: unknown): boolean {
  return value === undefined || value instanceof ArrayBuffer;
}
