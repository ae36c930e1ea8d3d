/**
 * What the control bench's parent and its client processes say to each other over IPC. Plain
 * data only (it crosses the process boundary as JSON).
 */

/** How one row sends its requests. */
export type RowSpec =
  /** Through `adaptiveRateLimit()`: no options at all when `controller` is unset, else `{ default: { controller } }`. */
  | { kind: 'ours'; controller?: string }
  /** Through `adaptiveRateLimit()` with a `createSharedBudget({ redis, name })` behind the origin. */
  | { kind: 'shared'; redisUrl: string; name: string }
  /** `@smithy/util-retry`'s `AdaptiveRetryStrategy` (its `DefaultRateLimiter`), as the SDK's retry middleware drives it. */
  | { kind: 'aws' }
  /** No limiter: a 429 is sent again at once (Retry-After ignored), up to the attempts. */
  | { kind: 'none' }
  /** An interceptor that does nothing: the floor of the cold-start comparison. */
  | { kind: 'pass-through' }
  /**
   * A client no one can build: it knows its share of the quota (`perMinute`) and paces its
   * callers at it evenly, first in first out (one slot each, several per timer tick when the
   * slots are closer than the timer fires); a 429 is sent again at its next slot.
   */
  | { kind: 'oracle'; perMinute: number };

/** The load one client process makes. Every loop is bounded by a count and a time. */
export type Load =
  /**
   * A caller every 60,000 / perMinute ms for `durationMs` (an open loop: callers do not wait for
   * each other). Without `tickMs`, one timer per caller; with it, one timer every `tickMs` that
   * starts every caller of the schedule due by then (the way to generate thousands a second).
   */
  | { kind: 'open'; perMinute: number; durationMs: number; tickMs?: number }
  /** `callers` callers at once; the run ends when all have an answer, or after `capMs`. */
  | { kind: 'burst'; callers: number; capMs: number }
  /** `inFlight` callers in a loop for `durationMs`; completions counted per second. */
  | { kind: 'closed'; inFlight: number; durationMs: number };

export interface ClientJob {
  row: RowSpec;
  /** The full URL every request GETs. */
  url: string;
  /** `request`: undici's `request()` with the composed Agent; `fetch`: Node's global fetch through `setGlobalDispatcher`. */
  transport: 'request' | 'fetch';
  load: Load;
  /** Attempts in all for a throttled request (ours, AWS and no limiter alike). */
  maxAttempts: number;
  /**
   * Connections per origin of the row's Agent (undici's `connections`); unset: no bound (undici's
   * default). Thousands of requests a second on a loaded machine otherwise open a socket for each
   * request that finds every connection busy, and the client spends its CPU connecting.
   */
  connections?: number;
}

/** Answers the server gave, one per attempt, within the run's window. */
export interface AttemptCounts {
  ok: number;
  throttled: number;
  other: number;
}

/** How each caller ended, within the run's window. */
export interface CallerCounts {
  started: number;
  /** The final answer was 2xx. */
  ok: number;
  /** The final answer was a 429 (every attempt throttled, or the limiter refused a retry). */
  got429: number;
  /** The limiter refused to send it (`RateLimitRejectedError`: max-wait, queue-full). */
  rejected: number;
  /** Any other error or answer. */
  failed: number;
  /** Still waiting (or in flight) when the window closed. */
  unfinished: number;
}

export interface ClientReport {
  attempts: AttemptCounts;
  callers: CallerCounts;
  /** ms from each caller's call to its final answer (or to the window's end when unfinished). */
  waitsMs: number[];
  /** Completed callers per second of the run (closed loop). */
  perSecond: number[];
  /** ms from the start until the last caller had its answer (burst). */
  lastAnswerMs: number;
  /** The first few unexpected errors, for the log. */
  errors: string[];
  /** CPU time the client process used over the run's window (user + system, µs: `process.cpuUsage`). */
  cpuMicros: number;
  /** Callers the load's schedule had due by the window's end (open loop; 0 otherwise). */
  scheduled: number;
}

export type ToClient = { type: 'job'; job: ClientJob } | { type: 'start'; startAt: number };
export type FromClient =
  | { type: 'ready' }
  | { type: 'report'; report: ClientReport }
  | { type: 'error'; message: string };
