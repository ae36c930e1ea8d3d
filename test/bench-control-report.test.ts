import { describe, expect, it } from 'vitest';
import type { ClientReport } from '../bench/control-protocol.js';
import { figures, processParts, type RowResult } from '../bench/control-report.js';

/** A client process's report that had `ok` requests accepted and `throttled` answered 429. */
function report(ok: number, throttled = 0): ClientReport {
  return {
    attempts: { ok, throttled, other: 0 },
    callers: { started: ok + throttled, ok, got429: throttled, rejected: 0, failed: 0, unfinished: 0 },
    waitsMs: [],
    perSecond: [],
    lastAnswerMs: 0,
    errors: [],
    cpuMicros: 0,
    scheduled: 0,
  };
}

const row = (reports: ClientReport[], available = 1_000): RowResult => ({ label: 'row', reports, available });

describe("the control bench's figures: each process's part of the accepted requests", () => {
  it('shows a process starving beside one taking the quota, which the share alone scores high', () => {
    const f = figures(row([report(990, 3), report(10, 40)]));
    expect(f.share).toBe(1);
    expect(f.processPartMin).toBeCloseTo(0.01, 9);
    expect(f.processPartMax).toBeCloseTo(0.99, 9);
    expect(processParts(f)).toBe('1.0-99.0 %');
  });

  it('shows two processes at about half each, and one process alone at all of it', () => {
    expect(processParts(figures(row([report(480), report(520)])))).toBe('48.0-52.0 %');
    expect(processParts(figures(row([report(700)])))).toBe('100.0-100.0 %');
  });

  it('says n/a when nothing was accepted', () => {
    const f = figures(row([report(0, 5), report(0, 5)]));
    expect(f.processPartMin).toBeNaN();
    expect(processParts(f)).toBe('n/a');
    expect(processParts(figures(row([])))).toBe('n/a');
  });
});
