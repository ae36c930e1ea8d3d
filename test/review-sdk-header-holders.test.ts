import { describe, expect, it } from 'vitest';
import { headerLookup, type ResponseHeaders } from '../src/headers.js';
import { classifyThrown } from '../src/wrap/sdk-errors.js';

// Header holders of odd make on a thrown SDK error (a review of the case-insensitive reading of
// an object with a `get`): a holder whose `get` answers must not lose its wait to a listing that
// fails, and a `keys()` that gives an array (not an iterator) is a listing like any other.

const error429 = (headers: unknown) => Object.assign(new Error('429'), { status: 429, headers });

describe('a thrown error whose header holder has a get that answers', () => {
  it("keeps the wait its get gives when listing its fields throws (a holder's entries() that throws)", () => {
    const fields = new Map([['retry-after', '7']]);
    const headers = {
      get: (name: string) => fields.get(name.toLowerCase()) ?? null,
      entries(): never {
        throw new Error('not listable');
      },
    };
    // Its get alone reads the field: the miss of another name must not throw the wait away.
    expect(headerLookup(headers as ResponseHeaders)('retry-after')).toBe('7');
    expect(classifyThrown(error429(headers))).toEqual({ kind: 'throttled', retryAfterMs: 7_000 });
  });

  it('reads a case-sensitive get listed by a keys() that gives an array', () => {
    const fields = new Map([['Retry-After', '7']]);
    const headers = {
      get: (name: string) => fields.get(name),
      keys: () => [...fields.keys()],
    };
    expect(headerLookup(headers as ResponseHeaders)('retry-after')).toBe('7');
    expect(classifyThrown(error429(headers))).toEqual({ kind: 'throttled', retryAfterMs: 7_000 });
  });

  it('reads a holder of 100,000 fields, listed once', () => {
    let listings = 0;
    const fields = new Map<string, string>();
    for (let i = 0; i < 100_000; i++) fields.set(`X-Field-${i}`, String(i));
    fields.set('Retry-After', '7');
    const headers = {
      get: (name: string) => fields.get(name) ?? null,
      entries() {
        listings++;
        return fields.entries();
      },
    };
    expect(classifyThrown(error429(headers))).toEqual({ kind: 'throttled', retryAfterMs: 7_000 });
    expect(listings).toBe(1);
  });
});
