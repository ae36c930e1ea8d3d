import { describe, expect, it, vi } from 'vitest';
import {
  installedUndici,
  UNSUPPORTED_UNDICI_WARNING,
  unsupportedPair,
  warnOnUnsupportedUndici,
} from '../src/http/undici-support.js';
import { undiciMajor } from './helpers/undici-version.js';

describe('supported undici and Node pairs', () => {
  it('accepts undici 7 on Node >= 20.18.1 and undici 8 on Node >= 22.19', () => {
    expect(unsupportedPair('7.30.2', '20.18.1')).toBeUndefined();
    expect(unsupportedPair('7.30.2', '24.22.3')).toBeUndefined();
    expect(unsupportedPair('8.13.1', '22.19.0')).toBeUndefined();
    expect(unsupportedPair('8.13.1', '24.22.3')).toBeUndefined();
    expect(unsupportedPair(undefined, '20.0.0')).toBeUndefined();
  });

  it('names undici 8 on Node 20 (or an early 22), the Node it needs and the fix', () => {
    expect(unsupportedPair('8.13.1', '20.20.2')).toBe(
      'undici 8.13.1 needs Node >= 22.19.0 and this process runs Node 20.20.2 (undici 8 fails to load on Node 20): npm install undici@7, or run Node >= 22.19',
    );
    expect(unsupportedPair('8.0.0', '22.14.0')).toContain('needs Node >= 22.19.0');
  });

  it('names an undici major other than 7 and 8, and a Node too old for undici 7', () => {
    expect(unsupportedPair('6.21.0', '20.20.2')).toContain(
      'supports undici 7 and 8; undici 6.21.0 is installed',
    );
    expect(unsupportedPair('9.0.0', '24.0.0')).toContain('undici 9.0.0 is installed');
    expect(unsupportedPair('7.30.2', '20.17.0')).toContain('needs Node >= 20.18.1');
  });

  it('reads the installed undici', () => {
    expect(Number(installedUndici()?.split('.')[0])).toBe(undiciMajor);
  });

  it('warns once, synchronously, with its code', () => {
    const listener = vi.fn();
    process.on('warning', listener);
    try {
      warnOnUnsupportedUndici('7.30.2', '24.0.0');
      expect(listener).not.toHaveBeenCalled();
      warnOnUnsupportedUndici('8.13.1', '20.20.2');
      warnOnUnsupportedUndici('8.13.1', '20.20.2');
    } finally {
      process.off('warning', listener);
    }
    expect(listener).toHaveBeenCalledOnce();
    expect(listener.mock.calls[0]![0]).toMatchObject({ name: 'Warning', code: UNSUPPORTED_UNDICI_WARNING });
  });
});
