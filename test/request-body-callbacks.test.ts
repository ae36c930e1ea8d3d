import { Readable } from 'node:stream';
import { HttpResponse, http } from 'msw';
import { setupServer } from 'msw/node';
import { request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { OutgoingRequest } from '../src/http/options.js';
import { outgoingBody } from '../src/http/outgoing-body.js';
import { agentWith, limit, NEVER_BINDS, serve } from './helpers/interceptor-fixtures.js';

const JSON_TYPE = { 'content-type': 'application/json' };

describe('outgoingBody', () => {
  it('parses a string or bytes with a JSON content type', () => {
    expect(outgoingBody('{"model":"m","max_tokens":5}', JSON_TYPE)).toEqual({ model: 'm', max_tokens: 5 });
    expect(outgoingBody(Buffer.from('[1,2]'), { 'content-type': 'application/json; charset=utf-8' })).toEqual(
      [1, 2],
    );
    expect(
      outgoingBody(new TextEncoder().encode('{"a":1}').buffer, {
        'content-type': 'application/merge-patch+json',
      }),
    ).toEqual({
      a: 1,
    });
  });

  it('keeps the string or the bytes without a JSON content type, or when they do not parse', () => {
    const bytes = Buffer.from('{"a":1}');
    expect(outgoingBody('{"a":1}', { 'content-type': 'text/plain' })).toBe('{"a":1}');
    expect(outgoingBody(bytes, {})).toEqual(new Uint8Array(bytes));
    expect(outgoingBody('{not json', JSON_TYPE)).toBe('{not json');
    expect(outgoingBody(new URLSearchParams({ q: 'x' }), {})).toBe('q=x');
  });

  it('never reads a body it would have to buffer', () => {
    expect(outgoingBody(Readable.from(['{"a":1}']), JSON_TYPE)).toBeUndefined();
    expect(outgoingBody(new ReadableStream(), JSON_TYPE)).toBeUndefined();
    expect(outgoingBody(new Blob(['{"a":1}']), JSON_TYPE)).toBeUndefined();
    expect(outgoingBody(undefined, JSON_TYPE)).toBeUndefined();
  });
});

describe('the interceptor shows units(request) the body', () => {
  it('parses a JSON string body, keeps a text one, and leaves a stream unread and sent whole', async () => {
    const server = await serve({ capacity: 100 });
    const seen: unknown[] = [];
    const units = vi.fn((r: OutgoingRequest) => {
      seen.push(r.body);
      return 1;
    });
    const agent = agentWith(limit({ default: NEVER_BINDS, units }));
    const send = async (body: string | Buffer | Readable, headers: Record<string, string>) =>
      (
        await request(`${server.origin}/v1/chat`, { dispatcher: agent, method: 'POST', body, headers })
      ).body.text();

    await send('{"model":"gpt-x","max_tokens":100}', JSON_TYPE);
    await send(Buffer.from('{"model":"b"}'), JSON_TYPE);
    await send('plain', { 'content-type': 'text/plain' });
    await send(Readable.from(['{"model":"s"}']), JSON_TYPE);

    expect(seen).toEqual([{ model: 'gpt-x', max_tokens: 100 }, { model: 'b' }, 'plain', undefined]);
    expect(server.received.map((r) => r.body)).toEqual([
      '{"model":"gpt-x","max_tokens":100}',
      '{"model":"b"}',
      'plain',
      '{"model":"s"}',
    ]);
  });
});

describe('the fetch wrapper shows units(request) the body', () => {
  const API = 'https://api.example.com';
  const received: string[] = [];
  const mock = setupServer(
    http.post(`${API}/*`, async ({ request: r }) => {
      received.push(await r.text());
      return HttpResponse.text('ok');
    }),
  );
  beforeAll(() => mock.listen({ onUnhandledRequest: 'error' }));
  afterEach(() => {
    received.length = 0;
  });
  afterAll(() => mock.close());

  it('parses init.body with a JSON content type and never reads a stream or a Request body', async () => {
    const seen: unknown[] = [];
    const f = rateLimitedFetch({
      default: NEVER_BINDS,
      units: (r) => {
        seen.push(r.body);
        return 1;
      },
    });
    const url = `${API}/v1/messages`;

    await f(url, { method: 'POST', headers: JSON_TYPE, body: '{"model":"claude","max_tokens":9}' });
    await f(url, {
      method: 'POST',
      headers: new Headers(JSON_TYPE),
      body: new TextEncoder().encode('{"n":1}'),
    });
    await f(url, { method: 'POST', body: 'text' });
    await f(url, {
      method: 'POST',
      headers: JSON_TYPE,
      body: new ReadableStream({
        start(c) {
          c.enqueue(new TextEncoder().encode('{"s":1}'));
          c.close();
        },
      }),
      duplex: 'half',
    } as RequestInit);
    await f(new Request(url, { method: 'POST', headers: JSON_TYPE, body: '{"r":1}' }));
    f.close();

    expect(seen).toEqual([{ model: 'claude', max_tokens: 9 }, { n: 1 }, 'text', undefined, undefined]);
    expect(received).toEqual(['{"model":"claude","max_tokens":9}', '{"n":1}', 'text', '{"s":1}', '{"r":1}']);
  });
});
