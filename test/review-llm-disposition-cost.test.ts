import { describe, expect, it, vi } from 'vitest';
import { meteredBody } from '../src/http/llm-body.js';

// A multipart part's `Content-Disposition` is parsed (the `content-disposition` package) only when
// it can hold a `filename` parameter (it holds the word). Regression: every part's was parsed, on
// the event loop, in the estimate: 10 to 22 ms a MiB of part heads (long quoted names, many
// parameters), about doubling the estimate of such a form; the word's test takes 0.35 ms.

const parsed = vi.hoisted(() => ({ calls: 0 }));
vi.mock('content-disposition', async (original) => {
  const real = await original<typeof import('content-disposition')>();
  return {
    ...real,
    parse: (...args: Parameters<typeof real.parse>) => {
      parsed.calls++;
      return real.parse(...args);
    },
  };
});

function form(parts: string[]): Buffer {
  return Buffer.from(`${parts.map((p) => `--x\r\n${p}\r\n`).join('')}--x--\r\n`);
}

const TYPE = { 'content-type': 'multipart/form-data; boundary=x' };

describe("a multipart part's Content-Disposition", () => {
  it('is not parsed when it names no filename: text parts, long names', () => {
    parsed.calls = 0;
    const body = form([
      'Content-Disposition: form-data; name="model"\r\n\r\nwhisper-1',
      `Content-Disposition: form-data; name="${'a'.repeat(8000)}"\r\n\r\nv`,
      `Content-Disposition: form-data${'; a=b'.repeat(1600)}\r\n\r\nv`,
    ]);
    expect(meteredBody(body, TYPE)).toEqual({ text: body.toString() });
    expect(parsed.calls).toBe(0);
  });

  it('is parsed when it may: a file part is still found, a quoted "filename=" still text', () => {
    parsed.calls = 0;
    const text = form(['Content-Disposition: form-data; name="a; filename=b"\r\n\r\nhello']);
    expect(meteredBody(text, TYPE)).toEqual({ text: text.toString() });
    const file = form([
      'Content-Disposition: form-data; name="model"\r\n\r\nwhisper-1',
      'Content-Disposition: form-data; name="f"; FileName="a.wav"\r\n\r\n\0\0',
    ]);
    expect(meteredBody(file, TYPE)).toEqual({});
    const extended = form([
      'Content-Disposition: form-data; name="f";filename*=UTF-8\'\'%E2%82%AC.txt\r\n\r\nhi',
    ]);
    expect(meteredBody(extended, TYPE)).toEqual({});
    expect(parsed.calls).toBe(3);
  });
});
