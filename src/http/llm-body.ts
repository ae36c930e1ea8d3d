import { parse as parseDisposition } from 'content-disposition';
import type { HeaderRecord } from '../headers.js';
import { decodedBody, isEncoded, MAX_DECODED_BYTES } from './llm-decode.js';
import { decodedOf, isJson } from './outgoing-body.js';

/**
 * A request's body as an LLM API's meter reads it: a JSON `object`, or `text` that is not one, or
 * neither: a body not seen (none, a stream, bytes that are no text), charged the running average.
 */
export interface MeteredBody {
  readonly object?: Record<string, unknown>;
  readonly text?: string;
}

const NOT_SEEN: MeteredBody = {};

/**
 * `body` as the meter reads it, with the request's `headers` (names in lower case):
 * - an object the adapter parsed (a JSON content type) as it is;
 * - a string or bytes read as JSON whatever the content type says (an LLM API's body is one), else
 *   as text, its characters/4;
 * - bytes with a `content-encoding` (`gzip`, `deflate`, `br`) decoded first, at most
 *   {@link MAX_DECODED_BYTES} once decoded; bytes that do not decode, or decode longer, are a body
 *   not seen;
 * - a multipart body (`multipart/form-data`) with a file part is a body not seen whatever its
 *   bytes: a part is a file by its headers (a `filename`, or a `Content-Type` that is neither text
 *   nor JSON), not by whether its bytes decode (an audio file of silence is all zero bytes, valid
 *   UTF-8: its bytes/4 are no count of tokens); so is one whose parts cannot be found (no boundary);
 * - bytes that are not UTF-8 text are a body not seen.
 */
export function meteredBody(body: unknown, headers: HeaderRecord = {}): MeteredBody {
  if (typeof body !== 'string' && !(body instanceof Uint8Array))
    return isObject(body) && !ArrayBuffer.isView(body) ? { object: body } : NOT_SEEN;
  let source: string | Uint8Array = body;
  const encoding = headers['content-encoding'];
  if (body instanceof Uint8Array && isEncoded(encoding)) {
    const decoded = decodedBody(body, encoding, MAX_DECODED_BYTES);
    if (decoded === undefined) return NOT_SEEN;
    source = decoded;
  }
  const type = first(headers['content-type']) ?? '';
  if (/^\s*multipart\//i.test(type) && hasFilePart(source, type)) return NOT_SEEN;
  const text = typeof source === 'string' ? source : utf8(source);
  if (text === undefined) return NOT_SEEN;
  const object = jsonObject(text);
  return object === undefined ? { text } : { object };
}

/**
 * {@link meteredBody} of a request, read once per request, however many ask (the split by model,
 * the estimate). A body sent compressed was decoded before, off the event loop (see
 * `decodingOf`): read as it decoded, or a body not seen when it did not.
 */
export function requestBody(request: {
  readonly body?: unknown;
  readonly headers?: HeaderRecord;
}): MeteredBody {
  let read = readBodies.get(request);
  if (read === undefined) {
    const decoded = decodedOf(request);
    if (decoded === undefined) read = meteredBody(request.body, request.headers);
    else if (decoded.bytes === undefined) read = NOT_SEEN;
    else read = meteredBody(request.body, withoutEncoding(request.headers ?? {}));
    readBodies.set(request, read);
  }
  return read;
}

/** `headers` but their `content-encoding`: of a body decoded already. */
function withoutEncoding(headers: HeaderRecord): HeaderRecord {
  const { 'content-encoding': _decoded, ...rest } = headers;
  return rest;
}

const readBodies = new WeakMap<object, MeteredBody>();

/** The longest head of a multipart part read for its headers (bytes). */
const MAX_PART_HEAD = 8 * 1024;

/**
 * Whether a multipart body (of content type `type`) has a file part, or parts that cannot be
 * found: no `boundary` in `type`, or no part in the body.
 */
function hasFilePart(body: string | Uint8Array, type: string): boolean {
  const match = /;\s*boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(type);
  const boundary = match?.[1] ?? match?.[2];
  if (boundary === undefined) return true;
  const bytes =
    typeof body === 'string' ? Buffer.from(body) : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  const delimiter = Buffer.from(`--${boundary}`, 'latin1');
  // The last blank line: a part that starts after it has no head (the parts end there).
  const lastBlank = bytes.lastIndexOf('\r\n\r\n');
  let parts = 0;
  let at = bytes.indexOf(delimiter);
  while (at !== -1) {
    // A delimiter starts the body or a line; elsewhere it is a part's content.
    if (at !== 0 && bytes[at - 1] !== 0x0a) {
      at = bytes.indexOf(delimiter, at + delimiter.length);
      continue;
    }
    const start = at + delimiter.length;
    // The close delimiter (`--boundary--`) ends the parts.
    if (bytes[start] === 0x2d && bytes[start + 1] === 0x2d) break;
    if (lastBlank < start) break;
    // Its head: up to its blank line, at most MAX_PART_HEAD bytes, searched there only. The next
    // part is looked for after it, so each byte is read once: a malformed body of 10,000 lines
    // that start with the delimiter (50 kB) had 75 MB read for its heads, in 2 s.
    const blank = bytes.subarray(start, start + MAX_PART_HEAD + 4).indexOf('\r\n\r\n');
    const headEnd = blank === -1 ? start + MAX_PART_HEAD : start + Math.min(blank, MAX_PART_HEAD);
    parts++;
    if (isFileHead(bytes.toString('latin1', start, headEnd))) return true;
    at = bytes.indexOf(delimiter, headEnd);
  }
  return parts === 0;
}

/**
 * Whether a multipart part's headers say it holds a file: a `filename` (or `filename*`) in its
 * `Content-Disposition`, or a `Content-Type` that is neither text (`text/*`) nor JSON. A part with
 * no `Content-Type` is text (`text/plain`, RFC 7578).
 */
function isFileHead(head: string): boolean {
  for (const line of head.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon === -1) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1);
    if (name === 'content-disposition' && isFileDisposition(value)) return true;
    if (name === 'content-type' && !value.trim().toLowerCase().startsWith('text/') && !isJson(value))
      return true;
  }
  return false;
}

/**
 * Whether a part's `Content-Disposition` has a `filename` (or `filename*`) parameter, its
 * parameters parsed as browsers send them (the `content-disposition` package, `multipart`): a
 * quoted `name` that holds `filename=` (`name="a; filename=b"`) is a text field's name. A regular
 * expression over the line took such a field for a file: the whole body was a body not seen.
 */
function isFileDisposition(value: string): boolean {
  // Parsed only when it may hold one: the parser takes 10 to 22 ms a MiB of part heads (long
  // quoted names, many parameters), about what the rest of the estimate does; the word's test 0.35.
  if (!/filename/i.test(value)) return false;
  const { parameters } = parseDisposition(value.trim(), { multipart: true });
  return 'filename' in parameters || 'filename*' in parameters;
}

/** Bytes as UTF-8 text, or `undefined` for bytes that are not (an audio file, a compressed body). */
function utf8(bytes: Uint8Array): string | undefined {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    // Not text: its bytes/4 is no count of tokens (a 3 MB recording was charged 710,000).
    return undefined;
  }
}

/** `text` parsed as a JSON object (an LLM API's body is one, whatever its content type says). */
function jsonObject(text: string): Record<string, unknown> | undefined {
  try {
    const parsed: unknown = JSON.parse(text);
    return isObject(parsed) ? parsed : undefined;
  } catch {
    return undefined;
  }
}

function first(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
