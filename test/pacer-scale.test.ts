// A pacer at 150,000/min whose line's timer wakes every 3 ms (an event loop whose turns take 3 ms)
// keeps its rate: a wake may send what the time since the last one earned, up to the 4 ms tick.
import { describe, expect, it } from 'vitest';
import { Pacer } from '../src/limiter/pacer.js';

describe('pacer: a busy event loop at 60,000-240,000 units/min', () => {
  it('keeps the rate when every wake comes 3 ms after the last (not 2 ms of it per wake)', () => {
    const pacer = new Pacer(150_000, 0);
    let sent = 0;
    for (let t = 3; t <= 6_000; t += 3) {
      while (pacer.canTake(1, t)) {
        pacer.take(1, t, true);
        sent++;
      }
    }
    // 6 s at 150,000/min: 15,000 (main: 12,000, 80 %; wakes 4 ms apart: 60 %).
    expect(sent).toBeGreaterThanOrEqual(0.99 * 15_000);
  });
});
