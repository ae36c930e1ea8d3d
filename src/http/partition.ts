import { createHmac, randomBytes } from 'node:crypto';
import type { HeaderProfile } from '../config/types.js';
import { InvalidCallbackValueError } from '../errors.js';
import { API_CREDENTIAL_HEADERS, VENDOR_CREDENTIAL_HEADERS } from '../redact.js';
import { answeredLater } from '../thenable.js';

/**
 * What a partition function returns: a key (or the parts of one, such as a credential and a
 * model), or `undefined` when the request belongs to no partition and shares its origin's limiter.
 */
export type PartitionKey = string | readonly (string | undefined)[] | undefined;

/** The partition of one request: its short id (never the key) and, lazily, the name the user gives it. */
export interface RequestPartition {
  /** A keyed hash of the key: 12 characters of base64url, the same in this process for the same key. */
  readonly id: string;
  /** The name `partitionName` gives the request, asked only when its limiter is made. */
  readonly name: (() => string | undefined) | undefined;
}

/**
 * The request headers that carry a credential, partitioned by default: `authorization` (bearer
 * tokens: GitHub, OpenAI, most APIs), `x-api-key` (Anthropic, many gateways), `api-key` (Azure
 * OpenAI). The list `redact` masks (one list for both), as is each vendor's own credential header.
 */
export const PARTITION_HEADERS: readonly string[] = API_CREDENTIAL_HEADERS;

/** The header names a limiter partitions by when its config does not say (`partitionBy` unset). */
export function defaultPartitionHeaders(profile: HeaderProfile | false | undefined): readonly string[] {
  const vendor = profile === undefined || profile === false ? undefined : VENDOR_CREDENTIAL_HEADERS[profile];
  return vendor === undefined ? PARTITION_HEADERS : [...PARTITION_HEADERS, vendor];
}

/**
 * The key that hashes partition keys: random, drawn once per process, never shown. Partition ids
 * are stable for the process's life and mean nothing in another process.
 */
let hashKey: Buffer | undefined;

/**
 * The short id of a partition key: an HMAC-SHA-256 of its parts under `secret` (the same in every
 * process that is given it) or else a per-process random key, 72 bits in base64url. The key itself
 * (a credential) is neither kept nor shown.
 */
export function partitionId(parts: readonly string[], secret?: string | Uint8Array): string {
  hashKey ??= randomBytes(32);
  const hmac = createHmac('sha256', secret ?? hashKey);
  // Each part with its length first: ['ab', 'c'] and ['a', 'bc'] are different keys.
  for (const part of parts) hmac.update(`${part.length}:`).update(part);
  return hmac.digest('base64url').slice(0, 12);
}

/**
 * The names and values of those of `names` present in `headers` (any header shape undici or
 * fetch takes: a plain object, a flat `[name, value, ...]` array (undici's), `Headers`, an
 * array or iterable of `[name, value]` pairs (fetch's)), in the order of `names`:
 * `[name, value, name, value, ...]`; `undefined` when none is present. `names` in lower case.
 * Reads only what it needs: no header record is built.
 */
export function credentialParts(headers: unknown, names: readonly string[]): string[] | undefined {
  if (headers == null || typeof headers !== 'object' || names.length === 0) return undefined;
  let found: Found | undefined;
  if (typeof (headers as Headers).get === 'function' && typeof (headers as Headers).append === 'function') {
    // WHATWG Headers (any realm's: Node's, the undici package's, a polyfill): names in any case.
    for (let i = 0; i < names.length; i++) {
      const value: unknown = (headers as Headers).get(names[i] as string);
      if (typeof value === 'string') found = note(found, names.length, i, value);
    }
  } else if (Array.isArray(headers) && !Array.isArray(headers[0])) {
    // A flat `[name, value, ...]` list (undici's); fetch's `[[name, value], ...]` is read below.
    for (let i = 0; i + 1 < headers.length; i += 2) {
      const at = nameIndex(headers[i], names);
      if (at >= 0) found = noteValue(found, names.length, at, headers[i + 1]);
    }
  } else if (typeof (headers as Iterable<unknown>)[Symbol.iterator] === 'function') {
    for (const pair of headers as Iterable<unknown>) {
      if (!Array.isArray(pair)) continue;
      const at = nameIndex(pair[0], names);
      if (at >= 0) found = noteValue(found, names.length, at, pair[1]);
    }
  } else {
    for (const name in headers) {
      if (!Object.hasOwn(headers, name)) continue;
      const at = nameIndex(name, names);
      if (at >= 0) found = noteValue(found, names.length, at, (headers as Record<string, unknown>)[name]);
    }
  }
  if (found === undefined) return undefined;
  // The header's name goes with its value: `x-api-key: k` and `api-key: k` are not one partition.
  const parts: string[] = [];
  for (let i = 0; i < names.length; i++) {
    const value = found[i];
    if (value !== undefined)
      parts.push(names[i] as string, names[i] === 'authorization' ? signer(value) : value);
  }
  return parts;
}

/** The values found so far, by the index of their name; made at the first one found. */
type Found = (string | undefined)[];

/**
 * The index of the header `name` in `names` (lower case), or -1. Most header names differ in
 * length from every one of `names`: those are told apart without lowering their case.
 */
function nameIndex(name: unknown, names: readonly string[]): number {
  const text = typeof name === 'string' ? name : String(name);
  for (let i = 0; i < names.length; i++) {
    const wanted = names[i] as string;
    if (text.length === wanted.length && (text === wanted || text.toLowerCase() === wanted)) return i;
  }
  return -1;
}

function noteValue(found: Found | undefined, size: number, at: number, value: unknown): Found | undefined {
  if (value === undefined || value === null) return found;
  const text = Array.isArray(value) ? value.map(sent).join(', ') : sent(value);
  return note(found, size, at, text);
}

/**
 * A header value as it is sent and read: without the white space around it (fetch's `Headers`
 * strips it, a server reads none), so that `'Bearer t '` and `'Bearer t'` are one partition.
 */
function sent(value: unknown): string {
  const text = String(value);
  let start = 0;
  let end = text.length;
  while (start < end && isHttpSpace(text.charCodeAt(start))) start++;
  while (end > start && isHttpSpace(text.charCodeAt(end - 1))) end--;
  return start === 0 && end === text.length ? text : text.slice(start, end);
}

/** Tab, line feed, carriage return, space: the white space fetch strips around a header value. */
function isHttpSpace(code: number): boolean {
  return code === 32 || code === 9 || code === 10 || code === 13;
}

function note(found: Found | undefined, size: number, at: number, text: string): Found {
  const values = found ?? new Array<string | undefined>(size);
  const had = values[at];
  values[at] = had === undefined ? text : `${had}, ${text}`;
  return values;
}

/**
 * Schemes that sign each request (the `authorization` value changes with every request): the
 * auth-params that name who signs, which is what the API counts by.
 */
const SIGNED_SCHEMES: Readonly<Record<string, readonly string[]>> = {
  'aws4-hmac-sha256': ['credential'],
  'aws4-ecdsa-p256-sha256': ['credential'],
  oauth: ['oauth_consumer_key', 'oauth_token'],
  // RFC 7616's `username*` names a user that `username` cannot (not ASCII).
  digest: ['username', 'username*', 'realm'],
  signature: ['keyid'],
};

/**
 * What identifies the caller in an `authorization` value: the value itself, but for schemes
 * that sign each request, who signs: AWS Signature V4's access key id (`Credential=AKID/...`),
 * V2's (`AWS AKID:signature`), Azure's account (`SharedKey account:signature`), OAuth 1's consumer
 * key and token, Digest's user name and realm, HTTP Signatures' `keyId`. Otherwise every
 * request would be a partition of its own.
 */
function signer(value: string): string {
  const space = value.indexOf(' ');
  if (space < 0) return value;
  const scheme = value.slice(0, space).toLowerCase();
  const rest = value.slice(space + 1).trim();
  if (scheme === 'aws' || scheme === 'sharedkey' || scheme === 'sharedkeylite') {
    const colon = rest.indexOf(':');
    return colon < 0 ? value : `${scheme} ${rest.slice(0, colon)}`;
  }
  const params = SIGNED_SCHEMES[scheme];
  if (params === undefined) return value;
  const values = new Map<string, string>();
  for (const [name, text] of authParams(rest)) if (params.includes(name)) values.set(name, text);
  // In the order of `params`, whatever the value's order: one signer, one key.
  const found: string[] = [scheme];
  for (const name of params) {
    let text = values.get(name);
    if (text === undefined) continue;
    // AWS's Credential is the key id, then the date, region and service of the signing key.
    if (name === 'credential') text = text.split('/')[0] ?? text;
    found.push(`${name}=${text}`);
  }
  // A value that names no signer (malformed) is keyed by its scheme, not by the value, which changes
  // with every request: each would be a partition of its own, unpaused and at full rate.
  return found.join(' ');
}

/**
 * The auth-params of a credential (`name=token` or `name="quoted, string"`, comma-separated):
 * names in lower case, quoted values unquoted (a comma in them is part of the value).
 */
function* authParams(text: string): Generator<[string, string]> {
  let at = 0;
  // The next `=` is looked for again only once passed: linear in the value's length.
  let eq = -1;
  while (at < text.length) {
    if (eq < at) eq = text.indexOf('=', at);
    if (eq < 0) return;
    const comma = text.indexOf(',', at);
    if (comma >= 0 && comma < eq) {
      at = comma + 1; // a part without `=`
      continue;
    }
    const name = text.slice(at, eq).trim().toLowerCase();
    let i = eq + 1;
    while (text[i] === ' ' || text[i] === '\t') i++;
    let value = '';
    if (text[i] === '"') {
      for (i++; i < text.length && text[i] !== '"'; i++) {
        if (text[i] === '\\') i++;
        value += text[i] ?? '';
      }
      const next = text.indexOf(',', i);
      at = next < 0 ? text.length : next + 1;
    } else {
      const next = text.indexOf(',', i);
      const end = next < 0 ? text.length : next;
      value = text.slice(i, end).trim();
      at = end + 1;
    }
    yield [name, value];
  }
}

/**
 * The parts of what a `partition` function returned, checked: a string, or a list of strings
 * (`undefined` members are left out); `undefined` (or an empty list) for no partition.
 * @throws {InvalidCallbackValueError} for anything else. The message never shows the value.
 */
export function partitionParts(key: unknown, describe: () => string): string[] | undefined {
  if (key === undefined) return undefined;
  if (typeof key === 'string') return [key];
  if (Array.isArray(key)) {
    const parts: string[] = [];
    for (const part of key) {
      if (part === undefined) continue;
      if (typeof part !== 'string') throw badKey(part, describe);
      parts.push(part);
    }
    return parts.length === 0 ? undefined : parts;
  }
  throw badKey(key, describe);
}

function badKey(value: unknown, describe: () => string): InvalidCallbackValueError {
  // The value may be a credential: only its type is told.
  const promise = answeredLater(value);
  const type = value === null ? 'null' : Array.isArray(value) ? 'array' : promise ? 'Promise' : typeof value;
  const hint = promise ? ' (partition runs as the request is sent: it cannot be async)' : '';
  return new InvalidCallbackValueError(
    'partition',
    `partition(${describe()}) returned ${aType(type)}${hint}; it must return a string, a list of strings, or undefined`,
    type,
  );
}

/** A type's name with its article: `an object`, `a null`. */
function aType(type: string): string {
  return `${/^[aeiou]/.test(type) ? 'an' : 'a'} ${type}`;
}

/** The least length of `partitionSecret` (characters or bytes). */
export const MIN_SECRET_LENGTH = 16;

/** Whether `value` can be a `partitionSecret`: a string or bytes of {@link MIN_SECRET_LENGTH} at least. */
export function isPartitionSecret(value: unknown): value is string | Uint8Array {
  return (typeof value === 'string' || value instanceof Uint8Array) && value.length >= MIN_SECRET_LENGTH;
}

/** What `partitionName` returned, checked: a non-empty string or `undefined`. */
export function partitionNameOf(name: unknown, describe: () => string): string | undefined {
  if (name === undefined) return undefined;
  if (typeof name === 'string' && name !== '') return name;
  // An `async` partitionName: its rejection handled, and told as a promise.
  const type = name === null ? 'null' : typeof name;
  const what = answeredLater(name)
    ? 'a promise (partitionName runs as the request is sent: it cannot be async)'
    : type === 'string'
      ? 'an empty string'
      : aType(type);
  throw new InvalidCallbackValueError(
    'partitionName',
    `partitionName(${describe()}) returned ${what}; it must return a non-empty string or undefined`,
    typeof name,
  );
}

/**
 * The default partition key of a request: its credential headers' names and values (see
 * {@link PARTITION_HEADERS}; `extra` adds names), or `undefined` when it carries none. For a
 * `partition` function that splits a credential's partition further:
 * `partition: (r) => [...(credentialPartition(r) ?? []), r.body?.model ?? 'any']` (a JSON body's model).
 */
export function credentialPartition(
  request: { readonly headers: unknown },
  extra: readonly string[] = [],
): string[] | undefined {
  const names =
    extra.length === 0 ? PARTITION_HEADERS : [...PARTITION_HEADERS, ...extra.map((h) => h.toLowerCase())];
  return credentialParts(request.headers, names);
}
