import { describe, expect, it } from 'vitest';
import { ConcurrencyGate } from '../src/http/concurrency.js';

/** A send that stays in flight until its `answer()` is called. */
function pending() {
  let answer = () => {};
  const promise = new Promise<void>((resolve) => {
    answer = resolve;
  });
  return { promise, answer };
}

const tick = () => new Promise((resolve) => setTimeout(resolve, 0));

describe('ConcurrencyGate', () => {
  it('hands out slots without queueing until the cap, then queues', () => {
    const gate = new ConcurrencyGate(2);
    expect(gate.tryEnter()).toBe(true);
    expect(gate.tryEnter()).toBe(true);
    expect(gate.tryEnter()).toBe(false);
    expect(gate.inFlight).toBe(2);

    let sent = false;
    void gate.run(async () => {
      sent = true;
    });
    expect(sent).toBe(false);
    expect(gate.waiting).toBe(1);
  });

  it('starts a waiting request when a slot taken outside the queue comes back', async () => {
    const gate = new ConcurrencyGate(1);
    expect(gate.tryEnter()).toBe(true);
    const order: string[] = [];
    const queued = gate.run(async () => {
      order.push('queued');
    });

    gate.leave();
    // Nobody jumps the queue meanwhile.
    expect(gate.tryEnter()).toBe(false);
    await queued;
    expect(order).toEqual(['queued']);
  });

  it('never has more than max in flight, mixing slots taken directly and queued ones', async () => {
    const gate = new ConcurrencyGate(3);
    let inFlight = 0;
    let most = 0;
    const sends = Array.from({ length: 10 }, () => pending());
    const done = sends.map((s) =>
      gate.run(async () => {
        inFlight++;
        most = Math.max(most, inFlight);
        await s.promise;
        inFlight--;
      }),
    );
    expect(gate.inFlight).toBe(3);
    expect(gate.waiting).toBe(7);
    for (const s of sends) {
      s.answer();
      await tick();
      expect(gate.inFlight).toBeLessThanOrEqual(3);
    }
    await Promise.all(done);
    expect(most).toBe(3);
    expect(gate.inFlight).toBe(0);
    expect(gate.tryEnter()).toBe(true);
  });

  it('drops a waiting request whose signal aborts, and gives its turn to the next', async () => {
    const gate = new ConcurrencyGate(1);
    const first = pending();
    const running = gate.run(() => first.promise);
    const abort = new AbortController();
    let aborteeSent = false;
    const abortee = gate.run(async () => {
      aborteeSent = true;
    }, abort.signal);
    const next = gate.run(async () => 'next');

    abort.abort(new Error('gone'));
    await expect(abortee).rejects.toThrow('gone');
    first.answer();
    await running;

    expect(await next).toBe('next');
    expect(aborteeSent).toBe(false);
  });

  it('gives the slot back when a send throws', async () => {
    const gate = new ConcurrencyGate(1);
    await expect(
      gate.run(() => {
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(gate.inFlight).toBe(0);
  });
});
