import type { ServerResponse } from 'node:http';
import { Writable } from 'node:stream';
import { pipeline as pipe } from 'node:stream/promises';
import { interceptors, pipeline, request } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { type AdaptiveRateLimitInterceptor, runtimeOf } from '../src/http/interceptor.js';
import {
  advanceUntil,
  agentWith,
  installGlobal,
  keepGlobalDispatcher,
  limit,
  NEVER_BINDS,
  serve,
} from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';
import { settled } from './helpers/settled.js';
import { failOnUnhandledRejections } from './helpers/unhandled.js';

// Lifecycle attack, second round: no bug was found; these
// pin promised behaviour at phases no other file drives. Real node:http servers, real undici
// agents, a ManualClock for the limiters; state is asserted, never a duration.

failOnUnhandledRejections();

function gateOf(rl: AdaptiveRateLimitInterceptor, origin: string) {
  const gate = runtimeOf(rl).route(origin)?.gate;
  return gate === undefined ? undefined : { inFlight: gate.inFlight, waiting: gate.waiting };
}
const FREE = { inFlight: 0, waiting: 0 };
const CALL = (stream: boolean) =>
  JSON.stringify({ model: 'm', max_tokens: 100, stream, messages: [{ role: 'user', content: 'hi' }] });

describe('interceptors.redirect outside the limiter, maxConcurrent: 1', () => {
  it('a 302 to another origin whose answer is a 429: an abort in its Retry-After wait rejects, nothing held', async () => {
    const clock = new ManualClock();
    const seen: string[] = [];
    const b = await serve({
      respond: (req, res) => {
        seen.push(`B${req.url}`);
        res.writeHead(429, { 'retry-after': '30' }).end('429 b');
        return true;
      },
    });
    const a = await serve({
      respond: (req, res) => {
        seen.push(`A${req.url}`);
        res.writeHead(302, { location: `${b.origin}/b` }).end();
        return true;
      },
    });
    const rl = limit({
      limiters: {
        a: { origins: [a.origin], maxConcurrent: 1, ...NEVER_BINDS },
        b: { origins: [b.origin], maxConcurrent: 1, ...NEVER_BINDS },
      },
      default: false,
      clock,
    });
    const dispatcher = agentWith(rl, interceptors.redirect({ maxRedirections: 3 }));
    const ac = new AbortController();
    const reason = new Error('gave up');
    const answer = settled(request(`${a.origin}/start`, { dispatcher, signal: ac.signal }));
    await until(() => rl.registry.get('b')?.snapshot().queued === 1, "hop 2's retry to queue");
    ac.abort(reason);
    await until(() => answer.done, 'the call to settle');
    expect(answer.error).toBe(reason);
    expect(seen).toEqual(['A/start', 'B/b']);
    expect(gateOf(rl, a.origin)).toEqual(FREE);
    expect(gateOf(rl, b.origin)).toEqual(FREE);
    expect(rl.registry.get('b')?.snapshot().queued).toBe(0);
  });
});

describe("Node's fetch through the interceptor as the global dispatcher (openai, maxConcurrent: 1)", () => {
  keepGlobalDispatcher();

  it('a reset before the headers of attempt 2, and one in the middle of an SSE answer, end the call; nothing held', async () => {
    const clock = new ManualClock();
    let seen = 0;
    let mode: 'reset' | 'sse' = 'reset';
    const open: ServerResponse[] = [];
    const server = await serve({
      respond: (req, res) => {
        seen++;
        if (mode === 'sse') {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write('data: {"id":"1","choices":[{"delta":{"content":"hi"}}]}\n\n');
          open.push(res);
        } else if (seen === 1) {
          res
            .writeHead(429, { 'retry-after': '30', 'content-type': 'application/json' })
            .end('{"error":{"type":"requests","message":"Rate limit"}}');
        } else req.socket.destroy();
        return true;
      },
    });
    const rl = installGlobal({
      limiters: { llm: { origins: [server.origin], api: 'openai', maxConcurrent: 1, ...NEVER_BINDS } },
      default: false,
      clock,
    });
    const init = (stream: boolean) => ({
      method: 'POST',
      body: CALL(stream),
      headers: { 'content-type': 'application/json' },
    });
    const url = `${server.origin}/v1/chat/completions`;

    const reset = settled(fetch(url, init(false)));
    await advanceUntil(clock, () => reset.done, 'the reset retry to settle');
    expect(seen).toBe(2);
    expect(reset.error).toBeInstanceOf(TypeError);
    expect((reset.error as { cause?: { code?: string } }).cause?.code).toBe('UND_ERR_SOCKET');
    expect(gateOf(rl, server.origin)).toEqual(FREE);

    mode = 'sse';
    const response = await fetch(url, init(true));
    expect(response.status).toBe(200);
    const body = settled(response.text());
    await until(() => open.length === 1, 'the stream to start');
    open[0]?.socket?.destroy();
    await until(() => body.done, 'the body to settle');
    expect(body.error).toBeInstanceOf(TypeError);
    expect(gateOf(rl, server.origin)).toEqual(FREE);
    expect(rl.registry.get('llm')?.snapshot().queued).toBe(0);
  });
});

describe("undici's pipeline() through the interceptor", () => {
  it('a streamed POST answered 429 then 200 is sent again with its bytes; the caller gets the 200', async () => {
    const clock = new ManualClock();
    const bodies: string[] = [];
    const server = await serve({
      respond: (_req, res, body) => {
        bodies.push(body);
        if (bodies.length === 1) res.writeHead(429, { 'retry-after': '30' }).end('429');
        else res.writeHead(200).end(`ok ${body}`);
        return true;
      },
    });
    const rl = limit({
      limiters: { x: { origins: [server.origin], ...NEVER_BINDS } },
      default: false,
      clock,
    });
    const out: string[] = [];
    const duplex = pipeline(
      `${server.origin}/up`,
      { dispatcher: agentWith(rl), method: 'POST' },
      ({ statusCode, body }) => {
        out.push(String(statusCode));
        return body;
      },
    );
    const done = settled(
      pipe(
        duplex,
        new Writable({
          write(chunk, _encoding, callback) {
            out.push(String(chunk));
            callback();
          },
        }),
      ),
    );
    duplex.write('hello ');
    duplex.end('world');
    await advanceUntil(clock, () => done.done, 'the pipeline to end');
    expect(done.error).toBeUndefined();
    expect(bodies).toEqual(['hello world', 'hello world']);
    expect(out).toEqual(['200', 'ok hello world']);
    expect(rl.registry.get('x')?.snapshot().queued).toBe(0);
  });
});
