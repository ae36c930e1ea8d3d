import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { headerLookup, headerRecord, type ResponseHeaders } from '../src/headers.js';

// headerLookup over a raw header array, a list of pairs, a Map (or a record with mixed-case names) reads through an index of its
// names made on the first lookup, its values taken by the rule only when asked: it must answer what
// the record the callbacks see holds, for any name in any case, any odd value, a name given more
// than once (in several cases), `Buffer` names and values (bytes 0x80-0x9f included), and names
// that are Object.prototype members.

const NAMES = ['retry-after', 'x-field', 'date', '__proto__', 'constructor', 'tostring', 'hasownproperty'];

/** One of NAMES, each letter in either case. */
const anyCase = fc
  .tuple(fc.constantFrom(...NAMES), fc.array(fc.boolean(), { minLength: 16, maxLength: 16 }))
  .map(([name, upper]) => [...name].map((c, i) => (upper[i] ? c.toUpperCase() : c)).join(''));

const bytes = fc.uint8Array({ maxLength: 6 }).map((b) => Buffer.from(b));
const scalar = fc.oneof(
  fc.string({ maxLength: 4 }),
  fc.integer({ min: -5, max: 500 }),
  fc.double({ noNaN: false }),
  fc.boolean(),
  fc.constant(null),
  fc.constant(undefined),
  fc.constant({ seconds: 5 }),
  bytes,
);
const value = fc.oneof(
  scalar,
  fc.array(fc.oneof(scalar, fc.array(scalar, { maxLength: 2 })), { maxLength: 3 }),
);
const fields = fc.array(
  fc.tuple(
    fc.oneof(
      anyCase,
      anyCase.map((n) => Buffer.from(n, 'latin1')),
    ),
    value,
  ),
  {
    maxLength: 8,
  },
);

/** What the record holds under `name` (own keys only). */
function recorded(headers: unknown, name: string) {
  const record = headerRecord(headers);
  const key = name.toLowerCase();
  return Object.hasOwn(record, key) ? record[key] : undefined;
}

function sameAnswers(headers: unknown, asked: string[]) {
  const lookup = headerLookup(headers as ResponseHeaders);
  for (const name of asked) expect(lookup(name), name).toEqual(recorded(headers, name));
}

describe('headerLookup over an array or a Map answers what headerRecord holds', () => {
  it('a raw array of names and values', () => {
    fc.assert(
      fc.property(fields, fc.array(anyCase, { maxLength: 6 }), (given, asked) => {
        sameAnswers(given.flat(), asked);
      }),
      { numRuns: 500 },
    );
  });

  it('a list of [name, value] pairs', () => {
    fc.assert(
      fc.property(fields, fc.array(anyCase, { maxLength: 6 }), (given, asked) => {
        sameAnswers(given, asked);
      }),
      { numRuns: 500 },
    );
  });

  it('a Map', () => {
    fc.assert(
      fc.property(fields, fc.array(anyCase, { maxLength: 6 }), (given, asked) => {
        sameAnswers(new Map(given), asked);
      }),
      { numRuns: 500 },
    );
  });

  it('a record with names in several cases (read through the same index)', () => {
    const stringNames = fc.array(fc.tuple(anyCase, value), { maxLength: 8 });
    fc.assert(
      fc.property(stringNames, fc.array(anyCase, { maxLength: 6 }), (given, asked) => {
        sameAnswers(Object.fromEntries(given), asked);
      }),
      { numRuns: 500 },
    );
  });

  it('reads a raw array of Buffers as undici hands it: latin1 bytes, a repeated name as its list', () => {
    const raw = [
      Buffer.from('Retry-After'),
      Buffer.from('2'),
      Buffer.from('X-Note'),
      Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x80]),
      Buffer.from('retry-after'),
      Buffer.from('3'),
    ];
    const lookup = headerLookup(raw);
    expect(lookup('RETRY-AFTER')).toEqual(['2', '3']);
    expect(lookup('x-note')).toBe(headerRecord(raw)['x-note']);
    expect(lookup('x-note')).toBe(new TextDecoder('latin1').decode(raw[3]));
    expect(lookup('missing')).toBeUndefined();
  });
});
