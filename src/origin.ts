import { ConfigError, type ConfigIssue } from './errors.js';

/** The schemes an origin may have, with their default ports. */
const DEFAULT_PORTS: Readonly<Record<string, string>> = { 'http:': '80', 'https:': '443' };
const SCHEMES = new Set(Object.keys(DEFAULT_PORTS));

/**
 * The origin of an http(s) URL as `scheme://host[:port]`: scheme and host in lower case, the
 * default port (80 for http, 443 for https) dropped, an IPv6 host in brackets, no path and no
 * trailing slash. A path, query or credentials in the input are dropped, so a request URL works too.
 * International host names come out in punycode, as undici sends them.
 *
 * @param path where the value came from, for the error.
 * @throws {ConfigError} when `input` is not an absolute http or https URL.
 */
export function normalizeOrigin(input: string | URL, path = 'origin'): string {
  const url = parseHttpUrl(input);
  if (url === undefined) throw new ConfigError([{ path, message: EXPECTED_ORIGIN, received: input }]);
  return originText(url);
}

/**
 * `scheme://host[:port]` of a parsed URL, without a host's trailing dot (`api.github.com.`, the DNS
 * root): it names the same server, and with it a request had a per-origin limiter of its own,
 * past the named limiter's cap.
 */
function originText(url: URL): string {
  if (!url.hostname.endsWith('.')) return `${url.protocol}//${url.host}`;
  return `${url.protocol}//${url.hostname.slice(0, -1)}${url.port === '' ? '' : `:${url.port}`}`;
}

const EXPECTED_ORIGIN = 'must be an http or https origin such as "https://api.example.com"';
const EXPECTED_PATTERN =
  'must be an origin such as "https://api.example.com" or a wildcard such as "*.example.com" or "https://*.example.com"';
const NO_PATH = 'an origin has no path, query or fragment: a limiter covers a whole origin';
const NO_CREDENTIALS = 'an origin has no user name or password';

function parseHttpUrl(input: unknown): URL | undefined {
  if (input instanceof URL) return SCHEMES.has(input.protocol) ? input : undefined;
  if (typeof input !== 'string') return undefined;
  const url = parseUrl(input.trim());
  return url !== undefined && SCHEMES.has(url.protocol) && url.host !== '' ? url : undefined;
}

// `URL.parse` would do, but it is newer than some Node 20 releases.
function parseUrl(text: string): URL | undefined {
  return URL.canParse(text) ? new URL(text) : undefined;
}

/** The port an origin connects to: its own, or its scheme's default. */
function effectivePort(url: URL): string {
  return url.port || (DEFAULT_PORTS[url.protocol] ?? '');
}

/** A `*.example.com` pattern: the host suffix (`.example.com`), and scheme and port when given. */
interface Wildcard {
  /** `'https:'`, or `undefined` for any scheme. */
  protocol: string | undefined;
  /** `'.example.com'`: a matching host ends with it and has at least one more label. */
  suffix: string;
  /**
   * The port connected to (`'443'` for `https://*.example.com`), or `undefined` for any port:
   * a pattern without a scheme matches any port unless it names one.
   */
  port: string | undefined;
}

const WILDCARD = /^(?:([A-Za-z][A-Za-z0-9+.-]*):\/\/)?\*\.([^/?#*:@\\\s[\]]+)(?::(\d{1,5}))?\/?$/;

/**
 * A predicate over origins, for a limiter's `origins` list. Each pattern is one of:
 *
 * - an exact origin, `https://api.example.com` or `http://127.0.0.1:8080` (normalized as by
 *   {@link normalizeOrigin}; without a port it means the scheme's default port);
 * - `*.example.com`: any subdomain of example.com (`a.example.com`, `a.b.example.com`, not
 *   `example.com` itself), any scheme and any port;
 * - `https://*.example.com` or `*.example.com:8443`: the same, limited to that scheme (then, as
 *   for an exact origin, no port means the default port) and/or that port.
 *
 * A pattern with a path, query, credentials or a `*` elsewhere is refused, since limiters are per
 * origin. Every bad pattern is reported at once.
 *
 * The predicate accepts an origin in any form {@link normalizeOrigin} does and returns `false`
 * for a string that is not an http(s) URL.
 *
 * @param path where the list came from, for the error; issues name `${path}.${index}`.
 * @throws {ConfigError} naming each bad pattern.
 */
export function originMatcher(patterns: readonly string[], path = 'origins'): (origin: string) => boolean {
  const exact = new Set<string>();
  const wildcards: Wildcard[] = [];
  const issues: ConfigIssue[] = [];
  patterns.forEach((pattern, index) => {
    const result = typeof pattern === 'string' ? parsePattern(pattern) : EXPECTED_PATTERN;
    if (typeof result === 'string')
      issues.push({ path: `${path}.${index}`, message: result, received: pattern });
    else if ('origin' in result) exact.add(result.origin);
    else wildcards.push(result);
  });
  if (issues.length > 0) throw new ConfigError(issues);

  return (origin) => {
    if (exact.has(origin)) return true;
    const url = parseHttpUrl(origin);
    if (url === undefined) return false;
    if (exact.has(originText(url))) return true;
    return wildcards.some((w) => wildcardRank(w, url) >= 0);
  };
}

/**
 * How closely the best of `patterns`, all wildcards (checked as by {@link originMatcher}), matches
 * `origin`, or -1 when none does. A longer host suffix ranks higher (`*.api.example.com` above
 * `*.example.com`, whatever the scheme or port), then a named scheme, then a named port; the
 * registry gives an origin to the limiter whose wildcard ranks highest, as nginx's `server_name`
 * takes the longest wildcard.
 */
export function wildcardRanker(patterns: readonly string[]): (origin: string) => number {
  originMatcher(patterns);
  const wildcards = patterns
    .map(parsePattern)
    .filter((p): p is Wildcard => typeof p !== 'string' && !('origin' in p));
  return (origin) => {
    const url = parseHttpUrl(origin);
    if (url === undefined) return -1;
    return Math.max(-1, ...wildcards.map((w) => wildcardRank(w, url)));
  };
}

function wildcardRank(w: Wildcard, url: URL): number {
  const host = hostOf(url);
  const matches =
    (w.protocol === undefined || w.protocol === url.protocol) &&
    (w.port === undefined || w.port === effectivePort(url)) &&
    host.length > w.suffix.length &&
    host.endsWith(w.suffix);
  return matches
    ? w.suffix.length * 4 + (w.protocol === undefined ? 0 : 2) + (w.port === undefined ? 0 : 1)
    : -1;
}

/**
 * An exact origin given as an option (the HTTP adapters' `origin`), normalized as by
 * {@link normalizeOrigin}; as in a limiter's `origins`, a path, query, fragment, user name,
 * password or wildcard is refused: the issue naming `path` and the value.
 */
export function exactOriginOption(input: unknown, path: string): { origin: string } | ConfigIssue {
  const text = input instanceof URL ? input.href : input;
  const result = typeof text === 'string' && !text.includes('*') ? parsePattern(text) : EXPECTED_ORIGIN;
  if (typeof result === 'string') return { path, message: result, received: input };
  return 'origin' in result ? result : { path, message: EXPECTED_ORIGIN, received: input };
}

/** A URL's host name without its trailing dot (see {@link originText}). */
function hostOf(url: URL): string {
  return url.hostname.endsWith('.') ? url.hostname.slice(0, -1) : url.hostname;
}

/**
 * A valid origin pattern in one spelling, so that two patterns that match the same origins
 * compare equal: an exact origin normalized (as {@link normalizeOrigin}), a wildcard as
 * `*.example.com`, `https://*.example.com` or `*.example.com:8443` (host in lower case and
 * punycode, no trailing dot, a scheme's default port dropped). `undefined`: not a valid pattern.
 */
export function patternKey(pattern: string): string | undefined {
  const result = typeof pattern === 'string' ? parsePattern(pattern) : EXPECTED_PATTERN;
  if (typeof result === 'string') return undefined;
  if ('origin' in result) return result.origin;
  const { protocol, suffix, port } = result;
  const shownPort =
    port === undefined || (protocol !== undefined && DEFAULT_PORTS[protocol] === port) ? '' : `:${port}`;
  return `${protocol === undefined ? '' : `${protocol}//`}*${suffix}${shownPort}`;
}

/**
 * Whether a host name has an empty label but the DNS root's trailing dot (`a..com`, `.a.com`,
 * `a.com..`): it names no host, so a pattern with one would match nothing.
 */
function hasEmptyLabel(hostname: string): boolean {
  return !hostname.startsWith('[') && hostname.replace(/\.$/, '').split('.').includes('');
}

/** An exact origin (normalized), a wildcard, or the message for a bad pattern. */
function parsePattern(pattern: string): { origin: string } | Wildcard | string {
  const text = pattern.trim();
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(text)?.[1]?.toLowerCase();
  if (scheme !== undefined && !SCHEMES.has(`${scheme}:`))
    return `must be an http or https origin, not ${scheme}`;
  if (!text.includes('*')) {
    const url = scheme === undefined ? undefined : parseHttpUrl(text);
    if (url === undefined) return EXPECTED_PATTERN;
    if (url.pathname !== '/' || url.search || url.hash) return NO_PATH;
    if (url.username || url.password) return NO_CREDENTIALS;
    if (hasEmptyLabel(url.hostname)) return EXPECTED_PATTERN;
    return { origin: originText(url) };
  }
  const match = WILDCARD.exec(text);
  if (!match) return /^[^/]*:\/\/[^/]+\/./.test(text) ? NO_PATH : EXPECTED_PATTERN;
  const [, , host = '', port] = match;
  const protocol = scheme === undefined ? undefined : `${scheme}:`;
  // Let WHATWG URL validate and normalize the host (case, punycode) and the port.
  const url = parseUrl(`${protocol ?? 'http:'}//x.${host}${port === undefined ? '' : `:${port}`}`);
  if (url === undefined || !url.hostname.startsWith('x.')) return EXPECTED_PATTERN;
  // Without its trailing dot, as hosts are matched (hostOf): `*.example.com.` matched no host.
  const suffix = url.hostname.slice(1).replace(/\.$/, '');
  // An empty label (`*..`, `*.example.com..`) names no host: such a pattern matched nothing.
  if (hasEmptyLabel(url.hostname)) return EXPECTED_PATTERN;
  if (protocol === undefined && port === undefined) return { protocol, suffix, port: undefined };
  return { protocol, suffix, port: port === undefined ? effectivePort(url) : String(Number(port)) };
}
