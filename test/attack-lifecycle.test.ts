import type { ServerResponse } from 'node:http';
import { request } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { runtimeOf } from '../src/http/interceptor.js';
import { agentWith, cleanups, limit, serve, NEVER_BINDS } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';
import { settled } from './helpers/settled.js';

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown) => unhandled.push(reason);
beforeEach(() => {
  unhandled.length = 0;
  process.on('unhandledRejection', onUnhandled);
});
afterEach(async () => {
  await flush();
  process.off('unhandledRejection', onUnhandled);
  expect(unhandled).toEqual([]);
});

const CALL = JSON.stringify({ model: 'm', max_tokens: 10, stream: true, messages: [{ role: 'user', content: 'hi' }] });

describe('explore', () => {
  it('S1 interceptor LLM stream abort mid-body, maxConcurrent 1', async () => {
    const clock = new ManualClock();
    const open: ServerResponse[] = [];
    const server = await serve({
      respond: (req, res) => {
        if (req.url === '/v1/chat/completions/stream') {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write('data: {"choices":[]}\n\n');
          open.push(res);
          return true;
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}');
        return true;
      },
    });
    cleanups.push(() => { for (const r of open) r.destroy(); });
    const rl = limit({ limiters: { llm: { origins: [server.origin], api: 'openai', maxConcurrent: 1, ...NEVER_BINDS } }, default: false, clock });
    const agent = agentWith(rl);
    const ac = new AbortController();
    const res = await request(`${server.origin}/v1/chat/completions/stream`, { dispatcher: agent, method: 'POST', body: CALL, headers: { 'content-type': 'application/json' }, signal: ac.signal });
    const body = settled(res.body.text());
    await until(() => open.length === 1);
    ac.abort(new Error('bye'));
    await until(() => body.done);
    const gate = runtimeOf(rl).route(server.origin)?.gate;
    console.log('S1 gate', gate?.inFlight, gate?.waiting, rl.registry.get('llm')?.snapshot().queued);
  });

  const state = (rl: ReturnType<typeof limit>, origin: string, name = 'x') => {
    const gate = runtimeOf(rl).route(origin)?.gate;
    const snap = rl.registry.get(name)?.snapshot();
    return { gateIn: gate?.inFlight, gateWait: gate?.waiting, queued: snap?.queued, tokens: snap?.tokens };
  };

  for (const op of ['remove', 'replace', 'close'] as const) {
    it(`S2 interceptor ${op} while waiting for a slot`, async () => {
      const clock = new ManualClock();
      const held: ServerResponse[] = [];
      const server = await serve({ respond: (req, res) => { if (req.url === '/slow') { held.push(res); return true; } res.writeHead(200).end('ok'); return true; } });
      const rl = limit({ limiters: { x: { origins: [server.origin], maxConcurrent: 1, ...NEVER_BINDS } }, default: false, clock });
      const agent = agentWith(rl);
      const a = settled(request(`${server.origin}/slow`, { dispatcher: agent }).then((r) => r.body.text()));
      await until(() => held.length === 1);
      const b = settled(request(`${server.origin}/b`, { dispatcher: agent }).then((r) => r.body.text()));
      await flush();
      console.log(op, 'before', state(rl, server.origin));
      if (op === 'remove') rl.registry.remove('x');
      else if (op === 'replace') rl.registry.replace('x', { origins: [server.origin], maxConcurrent: 1, ...NEVER_BINDS });
      else rl.registry.close();
      await flush(); await flush();
      console.log(op, 'b after op', b.done, String(b.error), b.value);
      held[0]?.writeHead(200).end('slow');
      await until(() => a.done, 'a', 2000).catch(() => {});
      await until(() => b.done, 'b', 2000).catch(() => {});
      console.log(op, 'end', a.done, a.value, String(a.error), b.done, b.value, String(b.error), state(rl, server.origin));
    });

    it(`S3 interceptor ${op} during a Retry-After wait`, async () => {
      const clock = new ManualClock();
      let n = 0;
      const server = await serve({ respond: (_req, res) => { n++; if (n === 1) res.writeHead(429, { 'retry-after': '30' }).end('429 #1'); else res.writeHead(200).end('ok'); return true; } });
      const rl = limit({ limiters: { x: { origins: [server.origin], maxConcurrent: 1, ...NEVER_BINDS } }, default: false, clock });
      const agent = agentWith(rl);
      const a = settled(request(`${server.origin}/a`, { dispatcher: agent }).then(async (r) => `${r.statusCode} ${await r.body.text()}`));
      await until(() => n === 1);
      await flush(); await flush();
      console.log(op, 'S3 before', state(rl, server.origin));
      if (op === 'remove') rl.registry.remove('x');
      else if (op === 'replace') rl.registry.replace('x', { origins: [server.origin], maxConcurrent: 1, ...NEVER_BINDS });
      else rl.registry.close();
      await flush(); await flush();
      console.log(op, 'S3 after op', a.done, a.value, String(a.error), state(rl, server.origin));
      for (let i = 0; i < 40 && !a.done; i++) { clock.advance(1000); await flush(); }
      await until(() => a.done, 'a', 1000).catch(() => {});
      console.log(op, 'S3 end', a.done, a.value, String(a.error), n, state(rl, server.origin));
    });
  }
});
