import { describe, expect, it } from 'vitest';
import { dispatcherClosed, errorOutcome, neverSent } from '../src/http/classify.js';

// Which errors say a request never reached the server: an LLM call's token draws are given back
// for those alone (a reset may come after the request was sent, and the API may have done the work).

const coded = (code: string) => Object.assign(new Error(code), { code });

describe('neverSent', () => {
  it.each([
    'ECONNREFUSED',
    'ENOTFOUND',
    'EAI_AGAIN',
    'EHOSTUNREACH',
    'ENETUNREACH',
    'UND_ERR_CONNECT_TIMEOUT',
  ])('a connection that was never made: %s', (code) => {
    expect(neverSent(coded(code))).toBe(true);
    // fetch's own error wraps it
    expect(neverSent(new TypeError('fetch failed', { cause: coded(code) }))).toBe(true);
  });

  it.each(['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_ABORTED'])(
    'an error after the connection may come after the request was sent: %s',
    (code) => {
      expect(neverSent(coded(code))).toBe(false);
      expect(neverSent(new TypeError('fetch failed', { cause: coded(code) }))).toBe(false);
    },
  );

  it('an AggregateError of the addresses tried: only when every one was never reached', () => {
    const all = new AggregateError([coded('ECONNREFUSED'), coded('ENETUNREACH')], 'connect');
    expect(neverSent(all)).toBe(true);
    const mixed = new AggregateError([coded('ECONNREFUSED'), coded('ECONNRESET')], 'connect');
    expect(neverSent(mixed)).toBe(false);
    expect(neverSent(new AggregateError([], 'none'))).toBe(false);
  });

  it('no code, not an object, or a cause loop: false', () => {
    expect(neverSent(new Error('boom'))).toBe(false);
    expect(neverSent('ECONNREFUSED')).toBe(false);
    expect(neverSent(undefined)).toBe(false);
    const looped: Error & { cause?: unknown } = new Error('a');
    looped.cause = looped;
    expect(neverSent(looped)).toBe(false);
  });

  it('errorOutcome: failed, marked not sent only when it was not', () => {
    expect(errorOutcome(coded('ECONNREFUSED'))).toEqual({ kind: 'failed', notSent: true });
    expect(errorOutcome(coded('ECONNRESET'))).toEqual({ kind: 'failed' });
  });
});

describe('dispatcherClosed', () => {
  it.each(['UND_ERR_CLOSED', 'UND_ERR_DESTROYED'])('an undici dispatcher closed or destroyed: %s', (code) => {
    expect(dispatcherClosed(coded(code))).toBe(true);
    expect(dispatcherClosed(new TypeError('fetch failed', { cause: coded(code) }))).toBe(true);
  });

  it.each(['ECONNREFUSED', 'UND_ERR_SOCKET', 'UND_ERR_ABORTED'])('any other error: %s', (code) => {
    expect(dispatcherClosed(coded(code))).toBe(false);
    expect(dispatcherClosed(new TypeError('fetch failed', { cause: coded(code) }))).toBe(false);
  });
});
