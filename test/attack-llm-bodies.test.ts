import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { llmAgent } from './helpers/llm-agent.js';
import { serveLocal } from './helpers/llm-clients.js';

// The bodies real users send to `api: 'openai'` / `'anthropic'`, against node:http servers on
// 127.0.0.1 that answer as the APIs do. The limiter's clock stands still, so the tokens a call leaves
// drawn are what it was charged (its estimate, corrected by its answer's `usage`).

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A quota large enough that no call here waits: 1,000,000 tokens a minute, all of them left. */
const OPENAI_QUOTA = {
  'content-type': 'application/json',
  'x-ratelimit-limit-requests': '10000',
  'x-ratelimit-remaining-requests': '9999',
  'x-ratelimit-reset-requests': '6ms',
  'x-ratelimit-limit-tokens': '1000000',
  'x-ratelimit-remaining-tokens': '1000000',
  'x-ratelimit-reset-tokens': '0s',
};

const ANTHROPIC_QUOTA = {
  'content-type': 'application/json',
  'anthropic-ratelimit-requests-limit': '10000',
  'anthropic-ratelimit-requests-remaining': '9999',
  'anthropic-ratelimit-input-tokens-limit': '1000000',
  'anthropic-ratelimit-input-tokens-remaining': '1000000',
  'anthropic-ratelimit-output-tokens-limit': '1000000',
  'anthropic-ratelimit-output-tokens-remaining': '1000000',
};

type Answer = (path: string, method: string, body: Buffer) => { body: unknown } | string;

/** The calls the server has read and not answered yet, by the order they came. */
interface Held {
  /** Resolves when the server has read a held call's whole body. */
  arrived: Promise<void>;
  answer: () => void;
}

/**
 * A server that reads the whole request, then answers with `answer`'s JSON (or its text as an event
 * stream). A call to a path `hold` accepts is answered only when the test says (`held()`), so its
 * estimate can be read while it is in flight, before any answer corrects it.
 */
async function serve(
  api: 'openai' | 'anthropic',
  answer: Answer,
  hold: (path: string) => boolean = () => false,
) {
  /** The call the test waits for: told when it arrives, answered when the test says. */
  let waiting: { arrive: () => void; release: (() => void) | undefined } | undefined;
  const origin = await serveLocal(async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const quota = api === 'openai' ? OPENAI_QUOTA : ANTHROPIC_QUOTA;
    const path = req.url ?? '';
    if (hold(path)) {
      const call = waiting;
      await new Promise<void>((resolve) => {
        if (call === undefined) return resolve();
        call.release = resolve;
        call.arrive();
      });
    }
    const out = answer(path, req.method ?? '', Buffer.concat(chunks));
    if (typeof out === 'string') {
      res.writeHead(200, { ...quota, 'content-type': 'text/event-stream' }).end(out);
      return;
    }
    res.writeHead(200, quota).end(JSON.stringify(out.body));
  }, cleanups);
  return {
    origin,
    held: (): Held => {
      let arrive: () => void = () => {};
      const arrived = new Promise<void>((resolve) => {
        arrive = resolve;
      });
      const call = { arrive, release: undefined as (() => void) | undefined };
      waiting = call;
      return { arrived, answer: () => call.release?.() };
    },
  };
}

type Kind = 'the fetch wrapper' | 'the interceptor';
/**
 * A request body as the SDKs and users hand it: a string, bytes, none, or a `Blob` (a body the
 * limiter does not read: through the interceptor, sent as a stream, as Node's `fetch` sends every body).
 */
type Body = string | Buffer | Blob | undefined;
const KINDS: Kind[] = ['the fetch wrapper', 'the interceptor'];

function client(kind: Kind, origin: string, api: 'openai' | 'anthropic') {
  const clock = new ManualClock();
  const auth: Record<string, string> =
    api === 'openai' ? { authorization: 'Bearer k' } : { 'x-api-key': 'k' };
  if (kind === 'the fetch wrapper') {
    const f = rateLimitedFetch({ limiters: { llm: { origins: [origin], api } }, clock });
    cleanups.push(() => f.close());
    return {
      names: () => f.registry.names(),
      limiter: (which: (name: string) => boolean = (name) => name === 'llm') =>
        f.registry.get(f.registry.names().find(which) ?? '') as AdaptiveRateLimiter,
      send: async (path: string, body: Body, headers: Record<string, string>, method = 'POST') =>
        (
          await f(`${origin}${path}`, {
            method,
            headers: { ...auth, ...headers },
            body: body as BodyInit | undefined,
          })
        ).text(),
    };
  }
  const { interceptor, agent } = llmAgent({ origin, api, rejection: 'error', clock }, cleanups);
  return {
    names: () => interceptor.registry.names(),
    limiter: (which: (name: string) => boolean = (name) => name === 'llm') =>
      interceptor.registry.get(interceptor.registry.names().find(which) ?? '') as AdaptiveRateLimiter,
    send: async (path: string, body: Body, headers: Record<string, string>, method = 'POST') =>
      (
        await agent.request({
          origin,
          path,
          method,
          headers: { ...auth, ...headers },
          body: body instanceof Blob ? Readable.from([Buffer.from(await body.arrayBuffer())]) : body,
        })
      ).body.text(),
  };
}

const JSON_TYPE = { 'content-type': 'application/json' };

/** The level of each token budget of the (only) limiter: what is left to draw. */
function levels(limiter: AdaptiveRateLimiter): Record<string, number> {
  const budgets = limiter.snapshot().budgets ?? {};
  return Object.fromEntries(
    Object.entries(budgets)
      .filter(([name]) => name !== 'requests')
      .map(([name, b]) => [name, b.tokens]),
  );
}

/** What the calls of `run` drew from each token budget, after a first call announced the quota. */
async function drawn(
  c: ReturnType<typeof client>,
  warmUp: () => Promise<unknown>,
  run: () => Promise<unknown>,
): Promise<Record<string, number>> {
  await warmUp();
  const before = levels(c.limiter());
  await run();
  return spent(c, before);
}

function spent(c: ReturnType<typeof client>, before: Record<string, number>): Record<string, number> {
  const after = levels(c.limiter());
  return Object.fromEntries(
    Object.entries(before).map(([name, level]) => [name, level - (after[name] ?? 0)]),
  );
}

/**
 * What one call drew before it was sent (its estimate): read while the server holds it, after a
 * first call announced the quota.
 */
async function estimated(
  c: ReturnType<typeof client>,
  server: { held: () => Held },
  warmUp: () => Promise<unknown>,
  call: () => Promise<unknown>,
): Promise<Record<string, number>> {
  await warmUp();
  const before = levels(c.limiter());
  const held = server.held();
  const sent = call();
  await held.arrived;
  const drew = spent(c, before);
  held.answer();
  await sent;
  return drew;
}

/** A base64 payload of about `bytes` bytes, as an image or a PDF is sent inline. */
const base64 = (bytes: number) => randomBytes(Math.ceil((bytes * 3) / 4)).toString('base64');

/**
 * A chat that names no model: a body whose model cannot be read (bytes that are not text) goes to
 * the credential's limiter of no model, which this chat warms up.
 */
const noModel = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] });

const chat = (content: unknown, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content }], ...extra });

describe('multimodal bodies: an inline image or PDF is not counted as characters/4', () => {
  it.each(KINDS)(
    'OpenAI: a 3 MB image data URL is estimated by its text, then corrected by usage: %s',
    async (kind) => {
      const { origin } = await serve('openai', () => ({
        body: { usage: { prompt_tokens: 1_105, completion_tokens: 20 } },
      }));
      const c = client(kind, origin, 'openai');
      const image = chat([
        { type: 'text', text: 'What is in this image?' },
        {
          type: 'image_url',
          image_url: { url: `data:image/png;base64,${base64(3_000_000)}`, detail: 'high' },
        },
      ]);
      const d = await drawn(
        c,
        () => c.send('/v1/chat/completions', chat('hi'), JSON_TYPE),
        () => c.send('/v1/chat/completions', image, JSON_TYPE),
      );
      // Not 750,000 (the data URL's characters/4): the API's prompt_tokens, 1,105.
      expect(d).toEqual({ tokens: 1_105 });
    },
  );

  it.each(KINDS)('Anthropic: a base64 image and a PDF document: %s', async (kind) => {
    const { origin } = await serve('anthropic', () => ({
      body: { usage: { input_tokens: 4_200, output_tokens: 90 } },
    }));
    const c = client(kind, origin, 'anthropic');
    const message = (content: unknown) =>
      JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 100, messages: [{ role: 'user', content }] });
    const body = message([
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: base64(2_000_000) } },
      {
        type: 'document',
        source: { type: 'base64', media_type: 'application/pdf', data: base64(2_000_000) },
      },
      { type: 'text', text: 'Compare them.' },
    ]);
    const d = await drawn(
      c,
      () => c.send('/v1/messages', message('hi'), JSON_TYPE),
      () => c.send('/v1/messages', body, JSON_TYPE),
    );
    expect(d).toEqual({ input_tokens: 4_200, output_tokens: 90 });
  });
});

/** The paths of the calls held in flight: a chat's or a response's, not the warm-up's. */
const held = (path: string) => path === '/v1/chat/completions?held' || path === '/v1/responses?held';

describe('bodies that are not JSON', () => {
  /** A multipart/form-data body with a 3 MB audio file in it, as bytes. */
  function audioForm(): { body: Buffer; type: string } {
    const boundary = 'form-boundary-7MA4YWxkTrZu0gW';
    const body = Buffer.concat([
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n`),
      Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="call.mp3"\r\nContent-Type: audio/mpeg\r\n\r\n`,
      ),
      randomBytes(3_000_000),
      Buffer.from(`\r\n--${boundary}--\r\n`),
    ]);
    return { body, type: `multipart/form-data; boundary=${boundary}` };
  }

  it.each(KINDS)(
    "an audio file's multipart bytes are charged as a body not seen (the running average), not bytes/4: %s",
    async (kind) => {
      // Whisper's answer has no token usage (`type: 'duration'`): the estimate is what stays.
      const server = await serve(
        'openai',
        (path) =>
          path === '/v1/audio/transcriptions'
            ? { body: { text: 'hello', usage: { type: 'duration', seconds: 31 } } }
            : { body: { usage: { prompt_tokens: 800, completion_tokens: 50 } } },
        (path) => path === '/v1/audio/transcriptions',
      );
      const c = client(kind, server.origin, 'openai');
      const form = audioForm();
      const d = await estimated(
        c,
        server,
        () => c.send('/v1/chat/completions', noModel, JSON_TYPE),
        () => c.send('/v1/audio/transcriptions', form.body, { 'content-type': form.type }),
      );
      // The running average of what the calls answered cost (800), where
      // bytes/4 charged about 710,000: past a 30,000 tokens/min budget, 23 minutes of debt.
      expect(d.tokens).toBe(800);
    },
  );

  /** A multipart/form-data body with a file part of `file`, as an SDK serializes it to bytes. */
  function fileForm(file: Buffer, head: string): { body: Buffer; type: string } {
    const boundary = '----formdata-undici-0123456789';
    const body = Buffer.concat([
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n`),
      Buffer.from(`--${boundary}\r\n${head}\r\n\r\n`),
      file,
      Buffer.from(`\r\n--${boundary}--\r\n`),
    ]);
    return { body, type: `multipart/form-data; boundary=${boundary}` };
  }

  const SILENCE: [string, string][] = [
    ['with a filename', 'Content-Disposition: form-data; name="file"; filename="silence.wav"'],
    [
      'with an audio content type only',
      'Content-Disposition: form-data; name="file"\r\nContent-Type: audio/wav',
    ],
  ];

  it.each(KINDS.flatMap((kind) => SILENCE.map(([named, head]) => [kind, named, head] as const)))(
    'a multipart file part of 1 MB of zero bytes (valid UTF-8) is charged as a body not seen, not bytes/4: %s, %s',
    async (kind, _named, head) => {
      const server = await serve(
        'openai',
        (path) =>
          path === '/v1/audio/transcriptions'
            ? { body: { text: '', usage: { type: 'duration', seconds: 31 } } }
            : { body: { usage: { prompt_tokens: 800, completion_tokens: 50 } } },
        (path) => path === '/v1/audio/transcriptions',
      );
      const c = client(kind, server.origin, 'openai');
      // Digital silence: every byte 0, which decodes as UTF-8 text.
      const form = fileForm(Buffer.alloc(1_000_000), head);
      const d = await estimated(
        c,
        server,
        () => c.send('/v1/chat/completions', noModel, JSON_TYPE),
        () => c.send('/v1/audio/transcriptions', form.body, { 'content-type': form.type }),
      );
      // The running average of what the calls answered cost (800), where its bytes/4 were charged
      // (250,059 tokens).
      expect(d.tokens).toBe(800);
    },
  );

  it.each(KINDS)(
    'a gzip-compressed JSON body is decoded: charged its prompt, in the limiter of its model: %s',
    async (kind) => {
      const { gzipSync } = await import('node:zlib');
      const server = await serve('openai', () => ({ body: { id: 'x' } }), held);
      const c = client(kind, server.origin, 'openai');
      // 600,000 characters of prompt: compressed, a few kilobytes of bytes that are not text.
      const body = gzipSync(chat('hello '.repeat(100_000), { max_tokens: 50 }));
      const gzipped = { ...JSON_TYPE, 'content-encoding': 'gzip' };
      // The credential's call of no model claims the limiter `llm`; the model's limiter is made
      // (and told its quota) by a first call of that model.
      await c.send('/v1/chat/completions', noModel, JSON_TYPE);
      await c.send('/v1/chat/completions', gzipSync(chat('hi')), gzipped);
      const model = (name: string) => name !== 'llm';
      const names = () => c.names();
      expect(names().some(model), names().join()).toBe(true);
      const before = levels(c.limiter(model));
      const held_ = server.held();
      const sent = c.send('/v1/chat/completions?held', body, gzipped);
      await held_.arrived;
      const drew = (before.tokens ?? 0) - (levels(c.limiter(model)).tokens ?? 0);
      held_.answer();
      await sent;
      // Its prompt's 600,000 characters/4, where it was charged the first guess (1,000) in the
      // limiter of no model.
      expect(drew).toBe(150_000);
    },
  );

  it.each(KINDS)(
    'a JSON body sent as a string with no JSON content type is parsed once: %s',
    async (kind) => {
      const server = await serve('openai', () => ({ body: { id: 'x' } }));
      const c = client(kind, server.origin, 'openai');
      const body = chat('parse me once');
      const parse = vi.spyOn(JSON, 'parse');
      try {
        await c.send('/v1/chat/completions', body, { 'content-type': 'text/plain' });
        // The split by model and the estimate read one parse (it was parsed for each).
        expect(parse.mock.calls.filter(([text]) => text === body)).toHaveLength(1);
      } finally {
        parse.mockRestore();
      }
    },
  );

  it('a 3 MB body given as a stream is sent whole and charged as a body not seen (the first guess)', async () => {
    const server = await serve(
      'openai',
      (path, _method, body) =>
        path.endsWith('?held')
          ? { body: { received: body.length, usage: { prompt_tokens: 750_000, completion_tokens: 1 } } }
          : { body: { id: 'x' } },
      held,
    );
    const clock = new ManualClock();
    const f = rateLimitedFetch({ limiters: { llm: { origins: [server.origin], api: 'openai' } }, clock });
    cleanups.push(() => f.close());
    const headers = { authorization: 'Bearer k', 'content-type': 'application/json' };
    await (
      await f(`${server.origin}/v1/chat/completions`, { method: 'POST', headers, body: noModel })
    ).text();
    const limiter = f.registry.get('llm') as AdaptiveRateLimiter;
    const before = levels(limiter);
    const text = chat('x'.repeat(3_000_000));
    const bytes = new TextEncoder().encode(text);
    // In 64 KiB chunks, as a stream the limiter does not read ahead of sending.
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let at = 0; at < bytes.length; at += 65_536) controller.enqueue(bytes.subarray(at, at + 65_536));
        controller.close();
      },
    });
    const held_ = server.held();
    const answer = f(`${server.origin}/v1/chat/completions?held`, {
      method: 'POST',
      headers,
      body,
      duplex: 'half',
    } as RequestInit);
    await held_.arrived;
    // A body not seen: the first guess (the warm-up's answer had no usage), not 0, not the bytes/4.
    expect((before.tokens ?? 0) - (levels(limiter).tokens ?? 0)).toBe(1_000);
    held_.answer();
    const json = (await (await answer).json()) as { received: number };
    expect(json.received).toBe(bytes.length);
  });
});

describe('structured output, tools, n, max_tokens and streams', () => {
  /** A JSON schema of 200 described fields: about 20,000 characters. */
  const schema = {
    type: 'object',
    properties: Object.fromEntries(
      Array.from({ length: 200 }, (_, i) => [
        `field_${i}`,
        {
          type: 'string',
          description: 'What the customer said about this part of the order, in a sentence.',
        },
      ]),
    ),
    required: [],
    additionalProperties: false,
  };

  /** The characters of the keys and strings of `body`'s field `key` (`text`: of its `format`). */
  function keysAndStrings(body: string, key: string): number {
    let value = (JSON.parse(body) as Record<string, unknown>)[key];
    if (key === 'text') value = (value as Record<string, unknown>).format;
    let n = 0;
    JSON.stringify(value, (k, v: unknown) => {
      n += k.length + (typeof v === 'string' ? v.length : 0);
      return v;
    });
    return n;
  }

  it.each(KINDS)(
    "a response_format's JSON schema counts in the estimate, as the API counts it: %s",
    async (kind) => {
      // No usage in the answer: the estimate is the charge.
      const server = await serve('openai', () => ({ body: { id: 'x' } }), held);
      const c = client(kind, server.origin, 'openai');
      const body = chat('Summarize the order.', {
        response_format: { type: 'json_schema', json_schema: { name: 'order', strict: true, schema } },
      });
      const d = await estimated(
        c,
        server,
        () => c.send('/v1/chat/completions', chat('hi'), JSON_TYPE),
        () => c.send('/v1/chat/completions?held', body, JSON_TYPE),
      );
      // The schema's keys and strings, with the prompt's 20 characters: not 5 tokens.
      expect(d.tokens).toBe(Math.ceil((20 + keysAndStrings(body, 'response_format')) / 4));
    },
  );

  it.each(KINDS)("the Responses API's text.format schema counts too: %s", async (kind) => {
    const server = await serve('openai', () => ({ body: { id: 'x' } }), held);
    const c = client(kind, server.origin, 'openai');
    const body = JSON.stringify({
      model: 'gpt-4o',
      input: 'Summarize the order.',
      text: { format: { type: 'json_schema', name: 'order', strict: true, schema } },
      max_output_tokens: 100,
    });
    const d = await estimated(
      c,
      server,
      () => c.send('/v1/responses', JSON.stringify({ model: 'gpt-4o', input: 'hi' }), JSON_TYPE),
      () => c.send('/v1/responses?held', body, JSON_TYPE),
    );
    expect(d.tokens).toBe(Math.ceil((20 + keysAndStrings(body, 'text')) / 4));
  });

  it('without max_tokens an OpenAI call is charged its characters/4, so a small budget sends it', async () => {
    const { origin } = await serve('openai', () => ({ body: { id: 'x' } }));
    const c = client('the fetch wrapper', origin, 'openai');
    const d = await drawn(
      c,
      () => c.send('/v1/chat/completions', chat('hi'), JSON_TYPE),
      () => c.send('/v1/chat/completions', chat('x'.repeat(400), { n: 4 }), JSON_TYPE),
    );
    // OpenAI's admission: the larger of max_tokens (times n) and characters/4; no max_tokens, no default.
    expect(d.tokens).toBe(100);
  });

  it('n times max_tokens is charged, and kept when the answer is larger than the prompt', async () => {
    const { origin } = await serve('openai', () => ({
      body: { usage: { prompt_tokens: 10, completion_tokens: 900 } },
    }));
    const c = client('the fetch wrapper', origin, 'openai');
    const d = await drawn(
      c,
      () => c.send('/v1/chat/completions', chat('hi'), JSON_TYPE),
      () => c.send('/v1/chat/completions', chat('hi', { n: 3, max_tokens: 500 }), JSON_TYPE),
    );
    expect(d.tokens).toBe(1_500);
  });

  it.each(KINDS)(
    'a stream without stream_options.include_usage has no usage: its estimate (OpenAI admission charge) stays: %s',
    async (kind) => {
      const events = [
        'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n',
        'data: {"choices":[{"delta":{"content":"lo"}}]}\n\n',
        'data: [DONE]\n\n',
      ].join('');
      const { origin } = await serve('openai', (_path, _m, body) =>
        body.toString().includes('"stream":true') ? events : { body: { id: 'x' } },
      );
      const c = client(kind, origin, 'openai');
      const d = await drawn(
        c,
        () => c.send('/v1/chat/completions', chat('hi'), JSON_TYPE),
        () => c.send('/v1/chat/completions', chat('hi', { stream: true, max_tokens: 700 }), JSON_TYPE),
      );
      expect(d.tokens).toBe(700);
    },
  );
});

describe('calls that run no model', () => {
  const response = {
    id: 'resp_1',
    object: 'response',
    status: 'completed',
    usage: { input_tokens: 5_000, output_tokens: 300, total_tokens: 5_300 },
  };

  it.each(KINDS)(
    'a background response polled or cancelled is not charged its usage again: %s',
    async (kind) => {
      const server = await serve(
        'openai',
        (path) =>
          path === '/v1/responses'
            ? { body: { ...response, status: 'queued', usage: null } }
            : { body: response },
        (path) => path === '/v1/responses/resp_1/cancel',
      );
      const c = client(kind, server.origin, 'openai');
      // Created with a body the limiter does not read (as Node's fetch sends it through the
      // interceptor): its limiter is the credential's, the one the polls and the cancel draw from.
      const created = JSON.stringify({
        model: 'gpt-4o',
        input: 'hi',
        background: true,
        max_output_tokens: 400,
      });
      await c.send('/v1/responses', new Blob([created]), JSON_TYPE);
      const limiter = c.limiter();
      const charged: unknown[] = [];
      const charge = limiter.charge.bind(limiter);
      limiter.charge = (units) => {
        charged.push(units);
        charge(units);
      };
      for (let i = 0; i < 3; i++) await c.send('/v1/responses/resp_1', undefined, {}, 'GET');
      // The polls' usage (5,000 input tokens each) is the created call's, charged at its admission.
      expect(charged).toEqual([]);
      // A cancel runs no model: it draws no tokens (it drew the running average) and its answer's
      // usage is not charged either.
      const before = levels(limiter);
      const held = server.held();
      const cancelled = c.send('/v1/responses/resp_1/cancel', undefined, {});
      await held.arrived;
      const during = levels(limiter);
      held.answer();
      await cancelled;
      expect(before.tokens).toBeLessThan(1_000_000);
      expect(during).toEqual(before);
      expect(charged).toEqual([]);
    },
  );

  it.each(KINDS)("Anthropic's count_tokens and a batch's results draw no tokens: %s", async (kind) => {
    const { origin } = await serve('anthropic', (path) =>
      path.endsWith('/count_tokens')
        ? { body: { input_tokens: 9_000 } }
        : path.includes('/batches/')
          ? { body: { id: 'b1', processing_status: 'canceling' } }
          : { body: { usage: { input_tokens: 10, output_tokens: 5 } } },
    );
    const c = client(kind, origin, 'anthropic');
    const message = JSON.stringify({
      model: 'c',
      max_tokens: 10,
      messages: [{ role: 'user', content: 'x'.repeat(36_000) }],
    });
    const d = await drawn(
      c,
      () => c.send('/v1/messages', message, JSON_TYPE),
      async () => {
        await c.send('/v1/messages/count_tokens', message, JSON_TYPE);
        await c.send('/v1/messages/batches/b1/cancel', undefined, {});
      },
    );
    expect(d).toEqual({ input_tokens: 0, output_tokens: 0 });
  });

  it.each(KINDS)('embeddings given as token ids count a token per id: %s', async (kind) => {
    const { origin } = await serve('openai', () => ({ body: { id: 'x' } }));
    const c = client(kind, origin, 'openai');
    const input = Array.from({ length: 10 }, () => Array.from({ length: 300 }, (_, i) => i));
    const d = await drawn(
      c,
      () => c.send('/v1/embeddings', JSON.stringify({ model: 'e', input: 'hi' }), JSON_TYPE),
      () => c.send('/v1/embeddings', JSON.stringify({ model: 'e', input }), JSON_TYPE),
    );
    expect(d.tokens).toBe(3_000);
  });
});
