import { RateLimitRejectedError } from '../errors.js';

/** What the adapter's close needs of a request's route: its limiter's name, and who closes it. */
interface ClosingRoute {
  /** The limiter's name, for the refusal. */
  readonly name: string;
  /** Whether the adapter's `close()` closes the route's limiter (see `Route.closesWithAdapter`). */
  readonly closesWithAdapter: boolean;
}

/** A request of the adapter that may wait (for a slot or units): told when the adapter closes. */
export interface AdapterWait {
  /** Its route: the limiter it waits for. */
  readonly route: ClosingRoute;
  /** Refuses its waits from now on, the one in progress too, with `refusal` (reason `closed`). */
  adapterClosed(refusal: RateLimitRejectedError): void;
}

/**
 * An adapter's requests that may wait now behind a limiter its close leaves open (a registry
 * passed in, a `limiter` instance): the adapter refuses them itself when it closes, and refuses at
 * once those that come after. One behind a limiter the close closes is left to that limiter.
 */
export class AdapterWaits {
  readonly #waits = new Set<AdapterWait>();
  #closed = false;

  /** Whether {@link close} was called. */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Counts `wait` until {@link untrack}: when the adapter closes, or at once when it is closed,
   * one behind a limiter the close leaves open is refused (`adapterClosed`).
   */
  track(wait: AdapterWait): void {
    if (wait.route.closesWithAdapter) return;
    if (this.#closed) wait.adapterClosed(closedRefusal(wait.route));
    else this.#waits.add(wait);
  }

  untrack(wait: AdapterWait): void {
    this.#waits.delete(wait);
  }

  /**
   * Refuses the waits tracked from now on at once (`closed`), and returns what refuses those
   * tracked until it is called with `RateLimitRejectedError` `'closed'` (the adapter closes its
   * registry between the two).
   */
  close(): () => void {
    this.#closed = true;
    return () => {
      const waits = [...this.#waits];
      this.#waits.clear();
      for (const wait of waits) wait.adapterClosed(closedRefusal(wait.route));
    };
  }
}

/** The refusal of a request of `route` by its closed adapter (whether or not the close closed its limiter). */
export function closedRefusal(route: ClosingRoute): RateLimitRejectedError {
  return new RateLimitRejectedError(
    'closed',
    route.name,
    'closed: the adapter (interceptor or fetch wrapper) was closed; not sent',
  );
}
