import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';

const servers: Server[] = [];
afterEach(() => { for (const s of servers.splice(0)) { s.closeAllConnections(); s.close(); } });
async function serve(handler: Parameters<typeof createServer>[1]): Promise<string> {
  const server = createServer(handler);
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}
const hdrs = { 'content-type': 'application/json', 'x-ratelimit-limit-requests': '500', 'x-ratelimit-remaining-requests': '499', 'x-ratelimit-reset-requests': '120ms', 'x-ratelimit-limit-tokens': '1000', 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-reset-tokens': '60s' };
it('races: abort a waiting LLM call, close with a stream mid-body, close with waiters', async () => {
  let n = 0;
  const pending: import('node:http').ServerResponse[] = [];
  const origin = await serve((req, res) => {
    n++;
    req.resume();
    req.on('end', () => {
      if (req.url?.includes('stream')) {
        res.writeHead(200, { ...hdrs, 'content-type': 'text/event-stream' });
        res.write('data: {"choices":[{"delta":{"content":"x"}}]}\n\n');
        pending.push(res);
      } else res.writeHead(200, hdrs).end('{"usage":{"prompt_tokens":5,"completion_tokens":5}}');
    });
  });
  const clock = new ManualClock();
  const f = rateLimitedFetch({ clock, limiters: { llm: { origins: [origin], api: 'openai' } } });
  const body = (stream = false) => JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 300, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) });
  const send = (path: string, signal?: AbortSignal, stream = false) => f(`${origin}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(stream), signal });
  // first call: announces 0 tokens left for 60 s
  const s = await send('/stream', undefined, true);
  const reader = s.body!.getReader();
  console.log('first chunk', new TextDecoder().decode((await reader.read()).value).slice(0, 30));
  const ac = new AbortController();
  const waiting = send('/x', ac.signal).then((r) => `resolved ${r.status}`, (e) => `rejected ${e?.name} ${e?.message?.slice(0, 60)}`);
  await new Promise((r) => setTimeout(r, 50));
  console.log('tokens snapshot while waiting', JSON.stringify(f.registry.get('llm')?.snapshot().budgets?.tokens).slice(0, 600));
  ac.abort();
  console.log('abort ->', await waiting);
  console.log('after abort', JSON.stringify(f.registry.get('llm')?.snapshot().budgets?.tokens).slice(0, 600));
  const waiting2 = send('/y').then((r) => `resolved ${r.status}`, (e) => `rejected ${e?.name} ${e?.code} ${e?.message?.slice(0, 80)}`);
  await new Promise((r) => setTimeout(r, 50));
  f.close();
  console.log('close ->', await waiting2);
  // finish the stream after close
  for (const res of pending) { res.write('data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7}}\n\ndata: [DONE]\n\n'); res.end(); }
  let rest = '';
  try { for (;;) { const { value, done } = await reader.read(); if (done) break; rest += new TextDecoder().decode(value); } console.log('stream after close read ok', rest.length); } catch (e: any) { console.log('stream after close ERR', e?.name, e?.message); }
  const after = await send('/z').then((r) => `resolved ${r.status}`, (e) => `rejected ${e?.name} ${e?.code}`);
  console.log('after close ->', after, 'server saw', n);
});
