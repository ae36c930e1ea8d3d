import { describe, expect, it } from 'vitest';
import { answerAt, pauseFrom } from './helpers/server-clock.js';

const HOUR = 3_600_000;

describe('Retry-After counted from the server clock: Date plus Age, one Date only', () => {
  it('a cached 429 (Age 50) whose Retry-After is Date + 60 s pauses 10 s, not 60', async () => {
    const respond = answerAt(429, (now) => ({
      date: new Date(now - 50_000).toUTCString(),
      age: '50',
      'retry-after': new Date(now + 10_000).toUTCString(),
    }));
    expect(await pauseFrom(respond)).toEqual({ status: 429, pausedUntil: 10_000 });
  });

  it('a 503 with an HTTP-date Retry-After and a Date an hour ahead pauses 30 s', async () => {
    const respond = answerAt(
      503,
      (now) => ({ date: new Date(now).toUTCString(), 'retry-after': new Date(now + 30_000).toUTCString() }),
      HOUR,
    );
    expect(await pauseFrom(respond)).toEqual({ status: 503, pausedUntil: 30_000 });
  });

  it('two Date lines: the interceptor and the fetch wrapper read them alike', async () => {
    const respond = answerAt(
      429,
      (now) => ({
        date: [new Date(now).toUTCString(), new Date(now - HOUR).toUTCString()],
        'retry-after': new Date(now + 30_000).toUTCString(),
      }),
      HOUR,
    );
    const viaInterceptor = await pauseFrom(respond, 'interceptor');
    expect(viaInterceptor.status).toBe(429);
    expect(await pauseFrom(respond, 'fetch wrapper')).toEqual(viaInterceptor);
  });
});
