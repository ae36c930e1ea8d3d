import { brotliCompressSync, deflateRawSync, gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { decodingOf } from '../src/http/outgoing-body.js';

// How a request body sent compressed is decoded before its draw (`decodingOf`), by its
// `content-encoding`: a list, in any case, identity, an unknown coding, bytes cut mid-way, and the
// shapes of bytes a caller may send. Pinned in a review: each as the synchronous decoder read it.

const RAW = Buffer.from(JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] }));

const decoded = async (body: ArrayBufferView | ArrayBuffer, encoding: string) => {
  const decoding = decodingOf(body, { 'content-encoding': encoding });
  if (decoding === undefined) return 'not decoded';
  const { bytes } = await decoding();
  return bytes === undefined ? undefined : Buffer.from(bytes).toString();
};

describe('a request body sent compressed, decoded before its draw', () => {
  it('decodes a list of codings in the reverse of their order, in any case', async () => {
    expect(await decoded(brotliCompressSync(gzipSync(RAW)), 'GZIP, Br')).toBe(RAW.toString());
    expect(await decoded(gzipSync(RAW), ' identity , gzip ')).toBe(RAW.toString());
    expect(await decoded(deflateRawSync(RAW), 'deflate')).toBe(RAW.toString());
  });

  it('is not decoded for identity or no coding; an unknown coding or bytes cut mid-way do not decode', async () => {
    expect(await decoded(RAW, 'identity')).toBe('not decoded');
    expect(await decoded(RAW, '')).toBe('not decoded');
    expect(await decoded(gzipSync(RAW), 'zstd')).toBeUndefined();
    expect(await decoded(gzipSync(RAW), 'gzip, zstd')).toBeUndefined();
    const gzipped = gzipSync(RAW);
    expect(await decoded(gzipped.subarray(0, gzipped.length - 6), 'gzip')).toBeUndefined();
    expect(await decoded(Buffer.concat([gzipped, Buffer.from('junk')]), 'gzip')).toBeUndefined();
  });

  it('reads any shape of bytes: a slice of a pooled Buffer, an ArrayBuffer, a DataView', async () => {
    const gzipped = gzipSync(RAW);
    const pooled = Buffer.concat([Buffer.from('xx'), gzipped, Buffer.from('yy')]).subarray(
      2,
      2 + gzipped.length,
    );
    expect(await decoded(pooled, 'gzip')).toBe(RAW.toString());
    const buffer = gzipped.buffer.slice(gzipped.byteOffset, gzipped.byteOffset + gzipped.byteLength);
    expect(await decoded(buffer, 'gzip')).toBe(RAW.toString());
    expect(await decoded(new DataView(buffer), 'gzip')).toBe(RAW.toString());
  });
});
