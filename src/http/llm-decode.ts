import { brotliDecompressSync, gunzipSync, inflateRawSync, inflateSync } from 'node:zlib';

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
      const options = { maxOutputLength: max };
      switch (codings[i]) {
        case 'gzip':
        case 'x-gzip':
          body = gunzipSync(body, options);
          break;
        case 'deflate':
          // HTTP's deflate is zlib-wrapped; some servers send it raw.
          body = isZlibHeader(body) ? inflateSync(body, options) : inflateRawSync(body, options);
          break;
        case 'br':
          body = brotliDecompressSync(body, options);
          break;
        default:
          return undefined;
      }
    }
  } catch {
    return undefined;
  }
  return body.byteLength > max ? undefined : body;
}

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
