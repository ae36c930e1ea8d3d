import type { ServerResponse } from 'node:http';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { runtimeOf } from '../src/http/interceptor.js';
import { agentWith, cleanups, limit, NEVER_BINDS, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';
import { settled } from './helpers/settled.js';
import { failOnUnhandledRejections, flush } from './helpers/unhandled.js';

// Lifecycle attack (see /work/runs/attack-lifecycle.md): no bug was found; these pin promised
// behaviour at phases no other file drives through both adapters. Real node:http servers, real
// undici agents, a ManualClock for the limiters; state is asserted, never a duration.

failOnUnhandledRejections();

const CALL = JSON.stringify({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] });

describe('registry.remove() during a Retry-After wait, under maxConcurrent: 1', () => {
  for (const kind of ['interceptor', 'fetch'] as const) {
    it(`${kind}: the caller gets the held 429 at once, nothing left in the gate`, async () => {
      const clock = new ManualClock();
      let seen = 0;
      const server = await serve({
        respond: (_req, res) => {
          seen++;
          res.writeHead(429, { 'retry-after': '30' }).end('429 #1');
          return true;
        },
      });
      const options = {
        limiters: { x: { origins: [server.origin], maxConcurrent: 1, ...NEVER_BINDS } },
        default: false as const,
        clock,
      };
      let answer: ReturnType<typeof settled<string>>;
      let registry: ReturnType<typeof limit>['registry'];
      let gateOf: () => { inFlight: number; waiting: number } | undefined;
      if (kind === 'interceptor') {
        const rl = limit(options);
        registry = rl.registry;
        const gate = runtimeOf(rl).route(server.origin)?.gate;
        gateOf = () => gate;
        answer = settled(
          request(`${server.origin}/a`, { dispatcher: agentWith(rl) }).then(
            async (r) => `${r.statusCode} ${await r.body.text()}`,
          ),
        );
      } else {
        const f = rateLimitedFetch(options);
        cleanups.push(() => f.close());
        registry = f.registry;
        gateOf = () => undefined;
        answer = settled(f(`${server.origin}/a`).then(async (r) => `${r.status} ${await r.text()}`));
      }
      await until(() => seen === 1, 'the first attempt');
      await until(() => registry.get('x')?.snapshot().queued === 1, 'the retry to queue');
      registry.remove('x');
      await until(() => answer.done, 'the caller to get its answer');
      expect(answer.value).toBe('429 429 #1');
      expect(seen).toBe(1);
      expect(gateOf()?.inFlight ?? 0).toBe(0);
      expect(gateOf()?.waiting ?? 0).toBe(0);
    });
  }
});

describe('an LLM 429 whose body never ends: the caller aborts while it is read', () => {
  for (const kind of ['interceptor', 'fetch'] as const) {
    it(`${kind}: rejects with the abort reason, the slot is free, nothing queued`, async () => {
      const clock = new ManualClock();
      const open: ServerResponse[] = [];
      const server = await serve({
        respond: (_req, res) => {
          res.writeHead(429, { 'retry-after': '0', 'content-type': 'application/json' });
          res.write('{"error":{"type":"requests","message":"Rate limit');
          open.push(res);
          return true;
        },
      });
      cleanups.push(() => {
        for (const r of open) r.destroy();
      });
      const options = {
        limiters: {
          llm: { origins: [server.origin], api: 'openai' as const, maxConcurrent: 1, ...NEVER_BINDS },
        },
        default: false as const,
        clock,
      };
      const ac = new AbortController();
      const reason = new Error('caller gave up');
      const init = {
        method: 'POST',
        body: CALL,
        headers: { 'content-type': 'application/json' },
        signal: ac.signal,
      };
      let answer: ReturnType<typeof settled<unknown>>;
      let registry: ReturnType<typeof limit>['registry'];
      let gate: { inFlight: number; waiting: number } | undefined;
      if (kind === 'interceptor') {
        const rl = limit(options);
        registry = rl.registry;
        gate = runtimeOf(rl).route(server.origin)?.gate;
        answer = settled(
          request(`${server.origin}/v1/chat/completions`, {
            ...init,
            method: 'POST',
            dispatcher: agentWith(rl),
          }),
        );
      } else {
        const f = rateLimitedFetch(options);
        cleanups.push(() => f.close());
        registry = f.registry;
        answer = settled(f(`${server.origin}/v1/chat/completions`, init));
      }
      await until(() => open.length === 1, 'the 429 to start');
      await flush();
      ac.abort(reason);
      await until(() => answer.done, 'the call to settle');
      expect(answer.error).toBe(reason);
      expect(open.length).toBe(1);
      expect(gate?.inFlight ?? 0).toBe(0);
      expect(gate?.waiting ?? 0).toBe(0);
      expect(registry.get('llm')?.snapshot().queued).toBe(0);
    });
  }
});
