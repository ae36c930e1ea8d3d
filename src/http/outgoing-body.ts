import type { HeaderRecord } from '../headers.js';
import { decodedBodyAsync, isEncoded, MAX_DECODED_BYTES } from './llm-decode.js';

/**
 * The body of a request as the callbacks (`units`, `partition`) see it, from what the adapter
 * already holds in memory: with a JSON content type (`application/json`, `application/*+json`), a
 * string or bytes parsed as JSON (a body that does not parse stays the string); otherwise the
 * string or the bytes as they are. A stream, an async iterable, a `Blob`, `FormData` or a
 * `Request`'s body is never read for it: `undefined`. Parsed once, at the first read. A body sent
 * compressed is given here decoded (see {@link decodingOf}).
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
 * A request body sent with a `content-encoding`, decoded before the callbacks and an LLM API's
 * estimate read it: its `bytes` as their sender wrote them, or `undefined` when they do not
 * decode, or decode longer than {@link MAX_DECODED_BYTES}.
 */
export interface DecodedBody {
  readonly bytes: Uint8Array | undefined;
}

/** Whether `body` is bytes (a typed array, a `DataView`, an `ArrayBuffer`): what {@link decodingOf} decodes. */
export function isBytes(body: unknown): body is ArrayBufferView | ArrayBuffer {
  return ArrayBuffer.isView(body) || body instanceof ArrayBuffer;
}

/**
 * The decoding of a body of bytes sent with a `content-encoding` (`gzip`, `deflate`, `br`), off
 * the event loop (see `decodedBodyAsync`), to start (stopped once its signal aborts); `undefined`
 * for a body sent as it is (none to wait for). Asked only for a body of bytes ({@link isBytes}):
 * an adapter that reads the body checks that first, so a body sent as it is costs no more than
 * its headers' record, made anyway.
 */
export function decodingOf(
  body: ArrayBufferView | ArrayBuffer,
  headers: HeaderRecord,
): ((signal?: AbortSignal) => Promise<DecodedBody>) | undefined {
  const encoding = headers['content-encoding'];
  if (!isEncoded(encoding)) return undefined;
  const bytes = ArrayBuffer.isView(body)
    ? new Uint8Array(body.buffer, body.byteOffset, body.byteLength)
    : new Uint8Array(body);
  return (signal) =>
    decodedBodyAsync(bytes, encoding, MAX_DECODED_BYTES, signal).then((decoded) => ({ bytes: decoded }));
}

/**
 * `decode` started, unless its call stops first: rejected at once with `signal`'s reason when it
 * aborts, or with `closed()` when the adapter closes (`onClose`, see `HttpRuntime.onClose`), and
 * the decoding stopped at its next chunk. An aborted call ends at once, as one waiting for its
 * units does; it ended only once its body had decoded (a "zip bomb": 0.5 s).
 */
export function decodedUnlessStopped(
  decode: (signal: AbortSignal) => Promise<DecodedBody>,
  signal: AbortSignal | undefined,
  onClose: (stop: () => void) => () => void,
  closed: () => unknown,
): Promise<DecodedBody> {
  if (signal?.aborted === true) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const halt = new AbortController();
    let forget: (() => void) | undefined;
    const onAbort = (): void => end(() => reject(signal?.reason));
    function end(settle: () => void): void {
      if (halt.signal.aborted) return;
      halt.abort();
      forget?.();
      signal?.removeEventListener('abort', onAbort);
      settle();
    }
    // Closed already: `stop` is called at once, before `forget` is known (nothing to forget).
    forget = onClose(() => end(() => reject(closed())));
    if (halt.signal.aborted) return;
    signal?.addEventListener('abort', onAbort, { once: true });
    decode(halt.signal).then((decoded) => end(() => resolve(decoded)));
  });
}

/** The {@link DecodedBody} a request made by {@link withLazyBody} was given, if any. */
export function decodedOf(request: object): DecodedBody | undefined {
  return decodedBodies.get(request);
}

const decodedBodies = new WeakMap<object, DecodedBody>();

/**
 * Defines `request.body` as a getter that computes {@link outgoingBody} at its first read and
 * keeps it: a `units` callback that never reads the body costs no parse. With `decoded` (a body
 * sent compressed, see {@link decodingOf}), the body is its decoded bytes; bytes that did not
 * decode are seen as sent.
 */
export function withLazyBody<T extends object>(
  request: T,
  body: unknown,
  headers: HeaderRecord,
  decoded?: DecodedBody,
): T & { readonly body: unknown } {
  let parsed: { value: unknown } | undefined;
  if (decoded !== undefined) decodedBodies.set(request, decoded);
  const source = decoded?.bytes ?? body;
  return Object.defineProperty(request, 'body', {
    enumerable: true,
    configurable: true,
    get() {
      parsed ??= { value: outgoingBody(source, headers) };
      return parsed.value;
    },
  }) as T & { readonly body: unknown };
}
