import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { WaiterQueue } from '../src/limiter/waiter-queue.js';

// The waiter queue against a model (a plain array of live waiters): pushes, waiters leaving from
// anywhere by an abort or a holder's cancel (which may come after the queue numbered its waiters
// again), and the head served. Each waiter's units are its id, so a cancel that reached the wrong
// waiter, or an order that changed, shows.

type Op =
  | { kind: 'push'; how: 'plain' | 'signal' | 'holder' }
  | { kind: 'leave'; pick: number }
  | { kind: 'serve' }
  | { kind: 'late'; pick: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.constantFrom('plain', 'signal', 'holder').map((how) => ({ kind: 'push', how }) as Op),
  },
  { weight: 4, arbitrary: fc.nat().map((pick) => ({ kind: 'leave', pick }) as Op) },
  { weight: 1, arbitrary: fc.constant({ kind: 'serve' } as Op) },
  { weight: 1, arbitrary: fc.nat().map((pick) => ({ kind: 'late', pick }) as Op) },
);

interface Handle {
  readonly id: number;
  readonly controller?: AbortController;
  readonly holder?: { waitSeq: number; waitingIn: unknown };
}

describe('WaiterQueue against a model', () => {
  it('serves in order and takes out exactly the waiter asked for, through every renumbering', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 400 }), (ops) => {
        const line = {};
        const queue = new WaiterQueue<number>(line);
        const taken: number[] = [];
        const cancel = (seq: number) => {
          if (!queue.alive(seq)) return;
          taken.push(queue.units(seq));
          queue.remove(seq);
        };
        const live: Handle[] = [];
        const gone: Handle[] = [];
        let next = 0;
        let peak = 0;
        const leave = (h: Handle) => {
          if (h.controller !== undefined) h.controller.abort();
          else if (h.holder !== undefined) {
            if (h.holder.waitingIn === line) cancel(h.holder.waitSeq);
          }
        };
        for (const o of ops) {
          if (o.kind === 'push') {
            const id = next++;
            const seq = queue.push(id, 0, 0, () => {});
            const h: Handle =
              o.how === 'signal'
                ? { id, controller: new AbortController() }
                : o.how === 'holder'
                  ? { id, holder: { waitSeq: -1, waitingIn: line } }
                  : { id };
            if (h.controller) queue.watch(seq, h.controller.signal, cancel);
            if (h.holder) queue.hold(seq, h.holder);
            live.push(h);
            peak = Math.max(peak, live.length);
          } else if (o.kind === 'leave') {
            const candidates = live.filter((h) => h.controller !== undefined || h.holder !== undefined);
            if (candidates.length === 0) continue;
            const h = candidates[o.pick % candidates.length]!;
            const before = taken.length;
            leave(h);
            expect(taken.slice(before)).toEqual([h.id]);
            live.splice(live.indexOf(h), 1);
            gone.push(h);
          } else if (o.kind === 'serve') {
            const seq = queue.first();
            if (live.length === 0) {
              expect(seq).toBe(-1);
              continue;
            }
            expect(queue.units(seq)).toBe(live[0]!.id);
            queue.remove(seq);
            gone.push(live.shift()!);
          } else if (gone.length > 0) {
            // A second abort or cancel of a waiter that left reaches no one.
            const before = taken.length;
            leave(gone[o.pick % gone.length]!);
            expect(taken.length).toBe(before);
          }
          expect(queue.size).toBe(live.length);
          // Dead waiters cost no ring of their own: at most twice what the most live ones needed.
          expect(queue.capacity).toBeLessThanOrEqual(Math.max(16, 4 * peak));
        }
        const order: number[] = [];
        for (let seq = queue.first(); seq !== -1; seq = queue.first()) {
          order.push(queue.units(seq));
          queue.remove(seq);
        }
        expect(order).toEqual(live.map((h) => h.id));
      }),
      { numRuns: 200 },
    );
  });
});

// The waiters behind the head whose deadline comes before one queued earlier (see
// `WaiterQueue.earlyBehind`), against the same kind of model: after every push, leave and serve,
// the one it names is alive and behind the head, and no such waiter has an earlier deadline; each
// waiter's tag follows it through every renumbering.

type DeadlineOp = { kind: 'push'; deadline: number } | { kind: 'leave'; pick: number } | { kind: 'serve' };

const deadlineOp: fc.Arbitrary<DeadlineOp> = fc.oneof(
  { weight: 4, arbitrary: fc.nat(1_000).map((deadline) => ({ kind: 'push', deadline }) as DeadlineOp) },
  { weight: 4, arbitrary: fc.nat().map((pick) => ({ kind: 'leave', pick }) as DeadlineOp) },
  { weight: 1, arbitrary: fc.constant({ kind: 'serve' } as DeadlineOp) },
);

describe('WaiterQueue: the early waiters behind the head, against a model', () => {
  it('names the earliest deadline behind the head among those queued after a later one', () => {
    fc.assert(
      fc.property(fc.array(deadlineOp, { minLength: 100, maxLength: 400 }), (ops) => {
        const line = {};
        const queue = new WaiterQueue<number>(line);
        const live: { id: number; deadline: number; holder: { waitSeq: number; waitingIn: unknown } }[] = [];
        let next = 0;
        for (const o of ops) {
          if (o.kind === 'push') {
            const id = next++;
            const seq = queue.push(id, 0, o.deadline, () => {});
            const holder = { waitSeq: -1, waitingIn: line as unknown };
            queue.hold(seq, holder);
            queue.tag(seq, id);
            live.push({ id, deadline: o.deadline, holder });
          } else if (o.kind === 'leave') {
            if (live.length === 0) continue;
            const [w] = live.splice(o.pick % live.length, 1);
            queue.remove(w!.holder.waitSeq);
          } else {
            const seq = queue.first();
            if (seq === -1) continue;
            expect(queue.units(seq)).toBe(live.shift()!.id);
            queue.remove(seq);
          }
          for (const w of live) expect(queue.tagOf(w.holder.waitSeq)).toBe(w.id);
          // The model: behind the head, the waiters with a later deadline somewhere before them.
          let latest = Number.NEGATIVE_INFINITY;
          let earliest = Number.POSITIVE_INFINITY;
          live.forEach((w, i) => {
            if (i > 0 && w.deadline < latest) earliest = Math.min(earliest, w.deadline);
            latest = Math.max(latest, w.deadline);
          });
          const early = queue.earlyBehind();
          if (earliest === Number.POSITIVE_INFINITY) continue;
          expect(early).not.toBe(-1);
          expect(early).not.toBe(queue.first());
          expect(queue.alive(early)).toBe(true);
          expect(queue.deadline(early)).toBeLessThanOrEqual(earliest);
        }
      }),
      { numRuns: 200 },
    );
  });
});
