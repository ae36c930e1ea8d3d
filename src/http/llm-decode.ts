import type { Transform } from 'node:stream';
import {
  brotliDecompressSync,
  createBrotliDecompress,
  createGunzip,
  createInflate,
  createInflateRaw,
  gunzipSync,
  inflateRawSync,
  inflateSync,
  type ZlibOptions,
} from 'node:zlib';

/**
 * The longest a compressed body is read once decoded (bytes): an answer (a stream's events, each
 * under 8 MiB) and a request body alike, so that a small body that decodes to gigabytes (a
 * "zip bomb") stops there.
 */
export const MAX_DECODED_BYTES = 64 * 1024 * 1024;

/**
 * A body's bytes as their sender wrote them before its `content-encoding` (`gzip`, `deflate`,
 * `br`, several in the order applied; none or `identity`: as they are), at most `max` bytes once
 * decoded; `undefined` when an encoding is unknown, the bytes do not decode, or decoded they are
 * longer. An LLM API's meter decodes a compressed request body so too (`llm-body.ts`). The interceptor sits below the `fetch` that asked for a compressed answer and decodes
 * it (Node's own sends `accept-encoding: gzip, deflate, br`, and the LLM APIs compress their JSON
 * for it): the `usage` and the 429 bodies it reads are still encoded there. The fetch wrapper
 * reads what `fetch` decoded.
 */
export function decodedBody(
  bytes: Uint8Array,
  encoding: string | readonly string[] | undefined,
  max: number,
): Uint8Array | undefined {
  const codings = codingsOf(encoding);
  let body: Uint8Array = bytes;
  try {
    // Decoded in the reverse of the order they were applied.
    for (let i = codings.length - 1; i >= 0; i--) {
      const decode = DECODERS.get(codings[i] as string);
      if (decode === undefined) return undefined;
      body = decode.sync(body, { maxOutputLength: max });
    }
  } catch {
    return undefined;
  }
  return body.byteLength > max ? undefined : body;
}

/**
 * {@link decodedBody} decoded off the event loop (zlib's streams, on libuv's thread pool, in
 * chunks of 64 KiB): the same bytes, or `undefined` for the same bodies. What a request body is
 * decoded with before it is metered: a "zip bomb" of 100 kB decoded for 1 s to the cap, and the
 * event loop stood still that long. Once `signal` aborts, the decoding stops at its next chunk
 * (its stream destroyed) and gives `undefined`: zlib's one-call forms (`gunzip`) cannot be
 * stopped, and ran on to the cap (0.5 s of a thread pool's thread) for a call aborted at once.
 * Never rejects.
 */
export async function decodedBodyAsync(
  bytes: Uint8Array,
  encoding: string | readonly string[] | undefined,
  max: number,
  signal?: AbortSignal,
): Promise<Uint8Array | undefined> {
  const codings = codingsOf(encoding);
  let body: Uint8Array = bytes;
  try {
    for (let i = codings.length - 1; i >= 0; i--) {
      const decode = DECODERS.get(codings[i] as string);
      if (decode === undefined || signal?.aborted === true) return undefined;
      const options = { chunkSize: 64 * 1024 };
      body = await streamed(decode.stream(body, options), body, max, signal);
    }
  } catch {
    return undefined;
  }
  return body.byteLength > max ? undefined : body;
}

/** `input` through `engine` (a zlib stream), at most `max` bytes out; stopped once `signal` aborts. */
function streamed(
  engine: Transform,
  input: Uint8Array,
  max: number,
  signal?: AbortSignal,
): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let length = 0;
    const stop = (error: unknown): void => {
      signal?.removeEventListener('abort', onAbort);
      // Its work ends at the chunk in progress.
      engine.destroy();
      reject(error);
    };
    const onAbort = (): void => stop(signal?.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    engine.on('data', (chunk: Buffer) => {
      length += chunk.byteLength;
      if (length > max) stop(new RangeError(`decoded body must be at most ${max} bytes`));
      else chunks.push(chunk);
    });
    engine.on('error', stop);
    engine.on('end', () => {
      signal?.removeEventListener('abort', onAbort);
      resolve(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, length));
    });
    engine.end(input);
  });
}

interface Decoder {
  sync(bytes: Uint8Array, options: ZlibOptions): Uint8Array;
  stream(bytes: Uint8Array, options: ZlibOptions): Transform;
}

const GZIP: Decoder = { sync: gunzipSync, stream: (_bytes, options) => createGunzip(options) };

/** The decoders of the codings known, by name. */
const DECODERS: ReadonlyMap<string, Decoder> = new Map([
  ['gzip', GZIP],
  ['x-gzip', GZIP],
  [
    // HTTP's deflate is zlib-wrapped; some servers send it raw.
    'deflate',
    {
      sync: (bytes, options) =>
        isZlibHeader(bytes) ? inflateSync(bytes, options) : inflateRawSync(bytes, options),
      stream: (bytes, options) => (isZlibHeader(bytes) ? createInflate(options) : createInflateRaw(options)),
    },
  ],
  ['br', { sync: brotliDecompressSync, stream: (_bytes, options) => createBrotliDecompress(options) }],
]);

/** Whether an answer with this `content-encoding` is encoded (not none, not `identity`). */
export function isEncoded(encoding: string | readonly string[] | undefined): boolean {
  return codingsOf(encoding).length > 0;
}

function codingsOf(encoding: string | readonly string[] | undefined): string[] {
  if (encoding === undefined) return [];
  const text = typeof encoding === 'string' ? encoding : encoding.join(',');
  return text
    .toLowerCase()
    .split(',')
    .map((coding) => coding.trim())
    .filter((coding) => coding !== '' && coding !== 'identity');
}

/** A zlib stream's first two bytes: CM 8 and a header checksum divisible by 31. */
function isZlibHeader(bytes: Uint8Array): boolean {
  const [cmf, flg] = bytes;
  return cmf !== undefined && flg !== undefined && (cmf & 0x0f) === 8 && ((cmf << 8) | flg) % 31 === 0;
}
