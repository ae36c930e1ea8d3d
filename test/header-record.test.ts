import { describe, expect, it } from 'vitest';
import { headerRecord } from '../src/headers.js';

describe('headerRecord with header names that are Object.prototype members', () => {
  it('keeps `constructor`, `toString` and `__proto__` headers as ordinary headers', () => {
    const record = headerRecord(['Constructor', 'a', '__proto__', 'b', 'toString', 'c', 'x-ok', '1']);

    expect(Object.keys(record)).toEqual(['constructor', '__proto__', 'tostring', 'x-ok']);
    expect(record.constructor).toBe('a');
    expect(Object.getOwnPropertyDescriptor(record, '__proto__')?.value).toBe('b');
    expect(Object.getPrototypeOf(record)).toBe(Object.prototype);
    expect(record['x-ok']).toBe('1');
  });

  it('joins a repeated `constructor` header into an array of its own values only', () => {
    expect(headerRecord(['constructor', 'a', 'constructor', 'b']).constructor).toEqual(['a', 'b']);
  });
});
