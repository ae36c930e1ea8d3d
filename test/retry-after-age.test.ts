import type { ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { agentWith, get, limit, serve } from './helpers/interceptor-fixtures.js';

const HOUR = 3_600_000;

function answer(status: number, headers: (serverNow: number) => Record<string, string | string[]>, skew = 0) {
  return (_req: unknown, res: ServerResponse) => {
    const serverNow = Math.floor((Date.now() + skew) / 1000) * 1000;
    res.writeHead(status, headers(serverNow)).end('x');
    return true;
  };
}

describe('Retry-After counted from the server clock: Date plus Age, one Date only', () => {
  it('a cached 429 (Age 50) whose Retry-After is Date + 60 s pauses 10 s, not 60', async () => {
    const server = await serve({
      respond: answer(429, (now) => ({
        date: new Date(now - 50_000).toUTCString(),
        age: '50',
        'retry-after': new Date(now + 10_000).toUTCString(),
      })),
    });
    const clock = new ManualClock();
    const rl = limit({ clock, maxAttempts: 1, default: { maxPause: 600_000 } });
    expect((await get(agentWith(rl), `${server.origin}/`)).status).toBe(429);
    expect(rl.registry.get(server.origin)?.snapshot().pausedUntil).toBe(10_000);
  });

  it('a 503 with an HTTP-date Retry-After and a Date an hour ahead pauses 30 s', async () => {
    const server = await serve({
      respond: answer(
        503,
        (now) => ({ date: new Date(now).toUTCString(), 'retry-after': new Date(now + 30_000).toUTCString() }),
        HOUR,
      ),
    });
    const clock = new ManualClock();
    const rl = limit({ clock, maxAttempts: 1, default: { maxPause: 600_000 } });
    expect((await get(agentWith(rl), `${server.origin}/`)).status).toBe(503);
    expect(rl.registry.get(server.origin)?.snapshot().pausedUntil).toBe(30_000);
  });

  it('two Date lines: the interceptor and the fetch wrapper read them alike', async () => {
    const server = await serve({
      respond: answer(
        429,
        (now) => ({
          date: [new Date(now).toUTCString(), new Date(now - HOUR).toUTCString()],
          'retry-after': new Date(now + 30_000).toUTCString(),
        }),
        HOUR,
      ),
    });
    const clock = new ManualClock();
    const rl = limit({ clock, maxAttempts: 1, default: { maxPause: 600_000 } });
    expect((await get(agentWith(rl), `${server.origin}/`)).status).toBe(429);
    const viaInterceptor = rl.registry.get(server.origin)?.snapshot().pausedUntil;
    const clock2 = new ManualClock();
    const limitedFetch = rateLimitedFetch({ clock: clock2, maxAttempts: 1, default: { maxPause: 600_000 } });
    const response = await limitedFetch(`${server.origin}/`);
    await response.text();
    const viaFetch = limitedFetch.registry.get(server.origin)?.snapshot().pausedUntil;
    limitedFetch.close();
    expect({ viaInterceptor }).toEqual({ viaInterceptor: viaFetch });
  });
});
