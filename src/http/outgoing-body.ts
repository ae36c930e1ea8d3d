import type { HeaderRecord } from '../headers.js';

/**
 * The body of a request as the callbacks (`units`, `partition`) see it, from what the adapter
 * already holds in memory: with a JSON content type (`application/json`, `application/*+json`), a
 * string or bytes parsed as JSON (a body that does not parse stays the string); otherwise the
 * string or the bytes as they are. A stream, an async iterable, a `Blob`, `FormData` or a
 * `Request`'s body is never read for it: `undefined`. Parsed once, at the first read.
 */
export function outgoingBody(body: unknown, headers: HeaderRecord): unknown {
  if (body == null) return undefined;
  let text: string | undefined;
  let bytes: Uint8Array | undefined;
  if (typeof body === 'string') text = body;
  else if (ArrayBuffer.isView(body)) bytes = new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  else if (body instanceof ArrayBuffer) bytes = new Uint8Array(body);
  else if (body instanceof URLSearchParams) return body.toString();
  else return undefined;
  if (!isJson(headers['content-type'])) return text ?? bytes;
  const source = text ?? new TextDecoder().decode(bytes);
  try {
    return JSON.parse(source) as unknown;
  } catch {
    return text ?? bytes;
  }
}

/** `application/json`, `application/problem+json`, ... with or without parameters. */
export function isJson(contentType: string | string[] | undefined): boolean {
  const value = Array.isArray(contentType) ? contentType[0] : contentType;
  if (value === undefined) return false;
  const type = value.split(';', 1)[0]?.trim().toLowerCase() ?? '';
  return type === 'application/json' || (type.startsWith('application/') && type.endsWith('+json'));
}

/**
 * Defines `request.body` as a getter that computes {@link outgoingBody} at its first read and
 * keeps it: a `units` callback that never reads the body costs no parse.
 */
export function withLazyBody<T extends object>(
  request: T,
  body: unknown,
  headers: HeaderRecord,
): T & { readonly body: unknown } {
  let parsed: { value: unknown } | undefined;
  return Object.defineProperty(request, 'body', {
    enumerable: true,
    configurable: true,
    get() {
      parsed ??= { value: outgoingBody(body, headers) };
      return parsed.value;
    },
  }) as T & { readonly body: unknown };
}
