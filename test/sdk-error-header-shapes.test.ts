import { describe, expect, it } from 'vitest';
import { headerLookup, headerRecord, type ResponseHeaders } from '../src/headers.js';
import { classifyThrown } from '../src/wrap/sdk-errors.js';

// A thrown SDK error's headers come in shapes of the SDK's own: a class whose `get` is
// case-sensitive is no WHATWG `Headers`, and the wait its `Retry-After` asks for was missed when
// the name was stored in another case than the one asked. The two readers (the record the
// callbacks see, the lookup the limiter reads) read odd values by one rule.

const error429 = (headers: unknown) => Object.assign(new Error('429'), { status: 429, headers });

/** Headers kept as given, read by a case-sensitive `get`, listed as `entries()` offers. */
class CaseSensitiveHeaders {
  readonly #fields: Map<string, string>;
  constructor(fields: Record<string, string>) {
    this.#fields = new Map(Object.entries(fields));
  }
  get(name: string): string | null {
    return this.#fields.get(name) ?? null;
  }
  entries(): IterableIterator<[string, string]> {
    return this.#fields.entries();
  }
}

/** The same, listed by `forEach` only. */
class ForEachHeaders {
  readonly #fields: Map<string, string>;
  constructor(fields: Record<string, string>) {
    this.#fields = new Map(Object.entries(fields));
  }
  get(name: string): string | undefined {
    return this.#fields.get(name);
  }
  forEach(each: (value: string, name: string) => void): void {
    this.#fields.forEach(each);
  }
}

/** The same, listed by `keys()` only. */
class KeysHeaders {
  readonly #fields: Map<string, string>;
  constructor(fields: Record<string, string>) {
    this.#fields = new Map(Object.entries(fields));
  }
  get(name: string): string | undefined {
    return this.#fields.get(name);
  }
  keys(): IterableIterator<string> {
    return this.#fields.keys();
  }
}

/** Fields as own properties, beside a case-sensitive `get` on its prototype. */
class OwnKeyHeaders {
  [name: string]: unknown;
  constructor(fields: Record<string, string>) {
    Object.assign(this, fields);
  }
  get(name: string): unknown {
    return Object.hasOwn(this, name) ? this[name] : undefined;
  }
}

const SHAPES: [string, (fields: Record<string, string>) => unknown][] = [
  ['entries()', (f) => new CaseSensitiveHeaders(f)],
  ['forEach', (f) => new ForEachHeaders(f)],
  ['keys()', (f) => new KeysHeaders(f)],
  ['own keys', (f) => new OwnKeyHeaders(f)],
];

describe('headers with a case-sensitive get (no Map, no WHATWG Headers)', () => {
  it.each(SHAPES)('finds Retry-After in any case, listed by %s', (_, make) => {
    for (const stored of ['Retry-After', 'RETRY-AFTER', 'retry-after']) {
      const headers = make({ [stored]: '7' }) as ResponseHeaders;
      expect(headerLookup(headers)('retry-after'), stored).toBe('7');
      expect(headerLookup(headers)('Retry-After'), stored).toBe('7');
      expect(headerRecord(headers)['retry-after'], stored).toBe('7');
      expect(classifyThrown(error429(make({ [stored]: '7' }))), stored).toEqual({
        kind: 'throttled',
        retryAfterMs: 7_000,
      });
    }
  });

  it('asks a WHATWG Headers by its get alone', () => {
    const headers = new Headers({ 'Retry-After': '3' });
    expect(headerLookup(headers)('retry-after')).toBe('3');
    expect(classifyThrown(error429(headers))).toEqual({ kind: 'throttled', retryAfterMs: 3_000 });
  });
});

describe('headerRecord and headerLookup read odd values by one rule', () => {
  const ODD: [string, unknown, string | string[] | undefined][] = [
    ['a string', '5', '5'],
    ['a number', 5, '5'],
    ['true', true, undefined],
    ['false', false, undefined],
    ['an object', { seconds: 5 }, undefined],
    ['null', null, undefined],
    ['a list of strings', ['1', '2'], ['1', '2']],
    ['a list of a number and a string', [1, '2'], ['1', '2']],
    ['a list with an object and true', ['1', { a: 1 }, true, 2], ['1', '2']],
    ['a list of one', ['4'], '4'],
    ['a list of objects only', [{ a: 1 }], undefined],
    ['an empty list', [], undefined],
  ];

  it.each(ODD)('%s', (_, value, read) => {
    const shapes: [string, unknown][] = [
      ['record', { 'x-field': value }],
      ['mixed-case record', { 'X-Field': value, other: '1' }],
      ['map', new Map([['X-Field', value]])],
      ['pairs', [['x-field', value]]],
      ['get and entries', { get: () => null, entries: () => new Map([['X-Field', value]]).entries() }],
    ];
    for (const [shape, headers] of shapes) {
      const looked = headerLookup(headers as ResponseHeaders)('x-field');
      const recorded = headerRecord(headers)['x-field'];
      expect(looked, `lookup over a ${shape}`).toEqual(read);
      expect(recorded, `record over a ${shape}`).toEqual(read);
    }
  });

  it('a name given twice keeps what each gives by the rule, in order', () => {
    const pairs = [
      ['x-field', true],
      ['X-Field', '1'],
      ['x-field', [2, { a: 1 }]],
    ];
    expect(headerLookup(pairs as unknown as ResponseHeaders)('x-field')).toEqual(['1', '2']);
    expect(headerRecord(pairs)['x-field']).toEqual(['1', '2']);
  });
});

describe("classifyThrown reads an error's headers once", () => {
  it('gets `headers` once and lists a get-only shape once, for the refusal mark and the wait', () => {
    let reads = 0;
    let listings = 0;
    const headers = {
      get: () => null,
      entries() {
        listings++;
        return new Map([['Retry-After', '2']]).entries();
      },
    };
    const error = Object.assign(new Error('429'), { status: 429 });
    Object.defineProperty(error, 'headers', {
      get() {
        reads++;
        return headers;
      },
    });
    expect(classifyThrown(error)).toEqual({ kind: 'throttled', retryAfterMs: 2_000 });
    expect(reads).toBe(1);
    expect(listings).toBe(1);
  });
});
