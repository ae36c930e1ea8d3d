import { brotliCompressSync, gzipSync } from 'node:zlib';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { meteredBody } from '../src/http/llm-body.js';

// A review of how an LLM API's meter reads a request body by its headers: odd boundaries, odd
// encodings, and a malformed multipart body whose lines start with its delimiter.

const CHAT = { model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] };
const JSON_CHAT = JSON.stringify(CHAT);

function form(boundary: string, parts: string[]): Buffer {
  return Buffer.from(`${parts.map((p) => `--${boundary}\r\n${p}\r\n`).join('')}--${boundary}--\r\n`);
}

describe('a multipart body, odd', () => {
  it('finds a file part under a quoted boundary with a space', () => {
    const body = form('a b', [
      'Content-Disposition: form-data; name="file"; filename="x.wav"\r\n\r\n\0\0\0\0',
    ]);
    expect(meteredBody(body, { 'content-type': 'multipart/form-data; boundary="a b"' })).toEqual({});
  });

  it('takes a part of filename="" (an empty file input) for a file', () => {
    const body = form('xyz', [
      'Content-Disposition: form-data; name="file"; filename=""\r\nContent-Type: application/octet-stream\r\n\r\n',
      'Content-Disposition: form-data; name="model"\r\n\r\nwhisper-1',
    ]);
    expect(meteredBody(body, { 'content-type': 'multipart/form-data; boundary=xyz' })).toEqual({});
  });

  it('reads a text part whose quoted name holds "filename=" as text, not as a file', () => {
    const body = form('xyz', [
      'Content-Disposition: form-data; name="a; filename=b"\r\n\r\nhello',
      'Content-Disposition: form-data; name="model"\r\n\r\nwhisper-1',
    ]);
    expect(meteredBody(body, { 'content-type': 'multipart/form-data; boundary=xyz' })).toEqual({
      text: body.toString(),
    });
  });

  it('reads a form of text parts only as its text, its parameter in any case', () => {
    const body = form('xyz', ['Content-Disposition: form-data; name="model"\r\n\r\nwhisper-1']);
    expect(meteredBody(body, { 'content-type': 'Multipart/Form-Data;BOUNDARY=xyz' })).toEqual({
      text: body.toString(),
    });
  });

  describe('whose lines start with its delimiter, with no blank line after them but at the end', () => {
    afterEach(() => vi.restoreAllMocks());

    it('reads each byte of it at most once for the parts heads (10,000 such lines: 80 MB read, 1 s)', () => {
      const body = Buffer.from(`${'--b\r\n'.repeat(10_000)}\r\n\r\n`);
      let read = 0;
      const original = Buffer.prototype.toString;
      vi.spyOn(Buffer.prototype, 'toString').mockImplementation(function (this: Buffer, ...args: unknown[]) {
        const [encoding, start, end] = args as [
          BufferEncoding | undefined,
          number | undefined,
          number | undefined,
        ];
        if (encoding === 'latin1') read += (end ?? this.length) - (start ?? 0);
        return original.call(this, encoding, start, end);
      });
      const metered = meteredBody(body, { 'content-type': 'multipart/form-data; boundary=b' });
      expect(metered).toEqual({ text: body.toString('utf8') });
      expect(read).toBeLessThanOrEqual(body.length);
    });
  });
});

describe('a compressed body, odd', () => {
  it.each<[string, Buffer | Uint8Array, string | string[]]>([
    ['gzip then br (gzip, br)', brotliCompressSync(gzipSync(JSON_CHAT)), 'gzip, br'],
    ['identity', Buffer.from(JSON_CHAT), 'identity'],
    ['a list of one, upper case', gzipSync(JSON_CHAT), ['GZIP']],
    ['gzip, identity', gzipSync(JSON_CHAT), 'gzip, identity'],
    [
      'two gzip members',
      Buffer.concat([gzipSync(JSON_CHAT.slice(0, 9)), gzipSync(JSON_CHAT.slice(9))]),
      'gzip',
    ],
  ])('decodes %s', (_, body, encoding) => {
    expect(meteredBody(body, { 'content-encoding': encoding })).toEqual({ object: CHAT });
  });

  it.each<[string, Uint8Array, string]>([
    ['the codings in the wrong order', brotliCompressSync(gzipSync(JSON_CHAT)), 'br, gzip'],
    ['a truncated gzip', gzipSync(JSON_CHAT).subarray(0, -5), 'gzip'],
    ['a gzip with bytes after it', Buffer.concat([gzipSync(JSON_CHAT), Buffer.from('xx')]), 'gzip'],
    ['plain JSON that claims gzip', Buffer.from(JSON_CHAT), 'gzip'],
    ['an unknown coding', Buffer.from(JSON_CHAT), 'zstd'],
    ['nothing, claimed gzip', new Uint8Array(0), 'gzip'],
  ])('takes %s for a body not seen, without a throw', (_, body, encoding) => {
    expect(meteredBody(body, { 'content-encoding': encoding })).toEqual({});
  });

  it('stops a gzip that decodes beyond 64 MiB (100 MiB of zeros in 100 kB) at the cap', () => {
    const bomb = gzipSync(Buffer.alloc(100 * 1024 * 1024));
    expect(bomb.length).toBeLessThan(200_000);
    expect(meteredBody(bomb, { 'content-encoding': 'gzip' })).toEqual({});
  });
});
