import { EventEmitter } from 'node:events';
import { RateLimitRejectedError, type RejectionReason } from '../errors.js';
import { warnListenerThrew } from './listener-threw.js';

/**
 * The typed events of a limiter; payloads are plain objects, rates in units/min, times in ms.
 * `limiter` is the limiter's name with its secrets masked (`redactText`), as everything the
 * library echoes back is (errors, snapshots, metrics, `NODE_DEBUG`); `limiter.name` keeps it as
 * given. `budget` names the budget of a limiter of several (see `AdaptiveLimiterOptions.budgets`).
 */
export interface LimiterEventMap {
  /** Units granted; `waited` is how long the request waited (0 when granted at once). */
  acquired: [{ limiter: string; budget?: string; units: number; waited: number }];
  /**
   * A queued request left the line before its turn, unsent: its caller aborted (its `signal`), or
   * an adapter gave the wait up (the HTTP request was aborted). Its units went back; `waited` is how
   * long it waited. Every acquire that waited in the line ends in one of `acquired`, `rejected`
   * and `canceled` (one whose signal was aborted before it asked tells none); a wait the adapter's
   * close refused tells `rejected` (`closed`), as its caller is told.
   */
  canceled: [{ limiter: string; budget?: string; units: number; waited: number }];
  /** A request refused without being sent. */
  rejected: [{ limiter: string; budget?: string; units: number; reason: RejectionReason; message: string }];
  /** A throttled response; `cut` says whether it cut the rate. */
  throttled: [{ limiter: string; budget?: string; retryAfterMs: number | undefined; cut: boolean }];
  /**
   * A failed answer (a 5xx, an error after the request went out): no cut; `retryAfterMs` when it
   * asked for a wait. A request the HTTP adapters know never reached the server (its connection
   * refused, its host not found, its slot refused) tells none.
   */
  failed: [{ limiter: string; budget?: string; retryAfterMs: number | undefined }];
  /** The rate went down (a cut, or a controller's success answer below the rate). */
  decreased: [
    { limiter: string; budget?: string; from: number; to: number; cause: 'throttle' | 'success' | 'update' },
  ];
  /** The rate went up. */
  increased: [{ limiter: string; budget?: string; from: number; to: number; cause: 'success' | 'update' }];
  /** Sends paused until `until` (on the limiter's clock) for `ms`, after a Retry-After. */
  paused: [{ limiter: string; budget?: string; until: number; ms: number; requestedMs: number }];
  /** A pause ended. */
  resumed: [{ limiter: string; budget?: string }];
}

export type LimiterEventName = keyof LimiterEventMap;

type Listener<A extends unknown[]> = (...args: A) => void;

/**
 * The event methods of a limiter, on a Node `EventEmitter` made at the first listener: an idle
 * limiter nobody watches does not carry one (it is a quarter of a limiter's memory), and an
 * event with no listener costs one check.
 */
export class LazyEmitter<T extends { [K in keyof T]: unknown[] }> {
  #emitter: EventEmitter | undefined;

  on<K extends keyof T & string>(event: K, listener: Listener<T[K]>): this {
    this.#events().on(event, listener as Listener<unknown[]>);
    return this;
  }

  once<K extends keyof T & string>(event: K, listener: Listener<T[K]>): this {
    this.#events().once(event, listener as Listener<unknown[]>);
    return this;
  }

  off<K extends keyof T & string>(event: K, listener: Listener<T[K]>): this {
    this.#emitter?.off(event, listener as Listener<unknown[]>);
    return this;
  }

  removeAllListeners(event?: keyof T & string): this {
    if (event === undefined) this.#emitter?.removeAllListeners();
    else this.#emitter?.removeAllListeners(event);
    return this;
  }

  listenerCount(event: keyof T & string): number {
    return this.#emitter?.listenerCount(event) ?? 0;
  }

  /**
   * Tells `event` to its listeners, each in turn. A listener's throw (a metrics or logging bug) is
   * reported as a process warning (`ARL_LISTENER_THREW`), never let out, and the listeners after it
   * are still told: out of a grant it left the waiter being granted, and every waiter behind it,
   * never settled; out of `close()`, every waiter.
   */
  protected emit<K extends keyof T & string>(event: K, ...args: T[K]): boolean {
    const emitter = this.#emitter;
    if (emitter === undefined) return false;
    if (emitter.listenerCount(event) <= 1) {
      try {
        return emitter.emit(event, ...args);
      } catch (thrown) {
        this.#threw(thrown, event);
        return true;
      }
    }
    // Each listener on its own: one that throws (an app's) does not keep the event from those
    // after it (the metrics' own, which then missed every grant).
    for (const listener of emitter.rawListeners(event)) {
      try {
        (listener as (...a: unknown[]) => void).apply(emitter, args);
      } catch (thrown) {
        this.#threw(thrown, event);
      }
    }
    return true;
  }

  #threw(thrown: unknown, event: string): void {
    const name = (this as { readonly name?: unknown }).name;
    warnListenerThrew(thrown, typeof name === 'string' ? name : '', event);
  }

  #events(): EventEmitter {
    if (this.#emitter === undefined) this.#emitter = new EventEmitter();
    return this.#emitter;
  }
}

/**
 * The error a refused request gets (the same for both limiter kinds), told first to the limiter's
 * `rejected` listeners, which are told the error's name of the limiter (masked).
 */
export function refusal(
  emit: (payload: LimiterEventMap['rejected'][0]) => void,
  name: string,
  reason: RejectionReason,
  units: number,
  detail: string,
  waitMs?: number,
): RateLimitRejectedError {
  const error = new RateLimitRejectedError(reason, name, detail, waitMs);
  emit({ limiter: error.limiter, units, reason, message: error.message });
  return error;
}
