import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { LlmMeter } from '../src/http/llm.js';
import { meteredBody } from '../src/http/llm-body.js';

// How an LLM API's meter reads a request body it holds: a multipart body by its parts' headers, a
// compressed one decoded, anything else as JSON or text.

const BOUNDARY = 'AaB03x';
const FORM = `multipart/form-data; boundary=${BOUNDARY}`;

/** A multipart body of parts, each its head (header lines) and its content. */
function form(parts: [head: string, content: string | Buffer][], boundary = BOUNDARY): Buffer {
  return Buffer.concat([
    ...parts.flatMap(([head, content]) => [
      Buffer.from(`--${boundary}\r\n${head}\r\n\r\n`),
      Buffer.from(content),
      Buffer.from('\r\n'),
    ]),
    Buffer.from(`--${boundary}--\r\n`),
  ]);
}

const MODEL_PART: [string, string] = ['Content-Disposition: form-data; name="model"', 'whisper-1'];

describe('a multipart body', () => {
  it.each<[string, string]>([
    ['a filename', 'Content-Disposition: form-data; name="file"; filename="a.wav"'],
    ['an RFC 5987 filename*', 'Content-Disposition: form-data; name="file"; filename*=UTF-8\'\'a.wav'],
    ['an audio content type', 'Content-Disposition: form-data; name="file"\r\nContent-Type: audio/wav'],
    [
      'a binary content type',
      'Content-Disposition: form-data; name="file"\r\ncontent-type: application/octet-stream',
    ],
  ])('with a part of %s is a body not seen, whatever its bytes', (_, head) => {
    for (const content of [Buffer.alloc(4_096), 'plain words that are text']) {
      const body = form([MODEL_PART, [head, content]]);
      expect(meteredBody(body, { 'content-type': FORM })).toEqual({});
      expect(meteredBody(body.toString('latin1'), { 'content-type': FORM })).toEqual({});
    }
  });

  it('of text fields only (no content type, text/plain, JSON) is read as text', () => {
    const body = form([
      MODEL_PART,
      ['Content-Disposition: form-data; name="prompt"\r\nContent-Type: text/plain; charset=utf-8', 'words'],
      ['Content-Disposition: form-data; name="meta"\r\nContent-Type: application/json', '{"a":1}'],
    ]);
    expect(meteredBody(body, { 'content-type': FORM })).toEqual({ text: body.toString() });
  });

  it('reads a quoted boundary, and finds a file after a text part that mentions the boundary', () => {
    const body = form([
      ['Content-Disposition: form-data; name="prompt"', `see --${BOUNDARY} here`],
      ['Content-Disposition: form-data; name="file"; filename="a.mp3"', Buffer.alloc(100)],
    ]);
    expect(meteredBody(body, { 'content-type': `Multipart/Form-Data; Boundary="${BOUNDARY}"` })).toEqual({});
  });

  it('whose parts cannot be found (no boundary, or none in the body) is a body not seen', () => {
    const body = form([MODEL_PART, ['Content-Disposition: form-data; name="file"; filename="a"', 'x']]);
    expect(meteredBody(body, { 'content-type': 'multipart/form-data' })).toEqual({});
    expect(meteredBody(Buffer.alloc(1_000), { 'content-type': FORM })).toEqual({});
  });

  it('is charged the running average, not its bytes/4', () => {
    const meter = new LlmMeter('openai');
    const body = form([
      MODEL_PART,
      ['Content-Disposition: form-data; name="file"; filename="a.wav"', Buffer.alloc(1_000_000)],
    ]);
    expect(
      meter.estimateOf(() => meteredBody(body, { 'content-type': FORM }), 'POST', '/v1/audio/transcriptions')
        .costs,
    ).toEqual({
      tokens: 1_000,
    });
    // Without its headers: text of 1,000,000 zero bytes and the part heads, at characters/4.
    expect(
      meter.estimateOf(() => meteredBody(body), 'POST', '/v1/audio/transcriptions').costs.tokens,
    ).toBeGreaterThan(250_000);
  });
});

describe('a compressed body', () => {
  const chat = JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x'.repeat(8_000) }] });

  it.each<[string, (b: Buffer) => Buffer]>([
    ['gzip', gzipSync],
    ['deflate', deflateSync],
    ['br', brotliCompressSync],
  ])('%s is decoded and read as JSON: its model and its prompt', (encoding, compress) => {
    const body = compress(Buffer.from(chat));
    const headers = { 'content-type': 'application/json', 'content-encoding': encoding };
    expect(meteredBody(body, headers).object?.model).toBe('gpt-4o');
    // 8,000 characters/4, not the first guess of a body not seen (1,000).
    expect(
      new LlmMeter('openai').estimateOf(() => meteredBody(body, headers), 'POST', '/v1/chat/completions')
        .costs,
    ).toEqual({
      tokens: 2_000,
    });
  });

  it('that does not decode, or in an unknown coding, is a body not seen', () => {
    expect(meteredBody(Buffer.from(chat), { 'content-encoding': 'gzip' })).toEqual({});
    expect(meteredBody(gzipSync(chat), { 'content-encoding': 'zstd' })).toEqual({});
  });
});
