/** What this process last learned from the store (Redis). Rates in units/min. */
export interface SharedState {
  /** The whole budget's rate; `undefined` while not learned (no initial rate, no throttle yet). */
  rate: number | undefined;
  /** This member's share of the rate; `undefined` while the rate is not learned. */
  share: number | undefined;
  /** Live members, this one included (1 before the first reply). */
  members: number;
  /**
   * This member's place among the live members (0 to members - 1), distinct while the
   * membership holds: its phase when members take turns. 0 before the first reply.
   */
  index: number;
  /**
   * ms to add to this process's clock (the budget's `clock`) to read the store's (the Redis
   * server's), as of the last heartbeat (half its round trip counted each way): a time base the
   * members share, for their phases. 0 before the first reply.
   */
  serverOffset: number;
  /**
   * The members' accepted rates added up (units/min of responses classified as success, over the
   * last couple of seconds): while the budget is throttled, the quota. `undefined` before the
   * first reply.
   */
  accepted: number | undefined;
  /**
   * Cuts of the shared rate so far, in the state's current generation: a throttle cuts only a
   * request sent in the current epoch.
   */
  epoch: number;
  /**
   * The shared state's generation (`undefined` before the first reply): a new one when the
   * state was lost (a Redis restart, a failover, an eviction, a FLUSHDB, its ttl) and created
   * again; this member then took the new state's epoch and rate as they were.
   */
  generation: string | undefined;
  /** True while Redis cannot be reached and this process serves from its last known share. */
  degraded: boolean;
  /**
   * Round trips to the store's server so far (Redis: one per heartbeat, cut or pause; two on a
   * script cache miss). A store in memory makes none.
   */
  roundTrips: number;
}

/**
 * The events of a {@link SharedBudget}; the local limiter's own events are on `budget.limiter`.
 * `budget` is the budget's name, its secrets masked (`redactText`).
 */
export interface SharedBudgetEventMap {
  /** Redis could not be reached: this process now serves from `rate` (units/min), its local share. */
  degraded: [{ budget: string; error: unknown; rate: number }];
  /** Redis answers again: sharing resumed. */
  recovered: [{ budget: string; members: number }];
  /**
   * The store held something broken, found and repaired before it was used (a key of the wrong
   * type, a state field failing its check: a fresh generation; a report dropped): each as
   * `"key field"`. Without a listener, a process warning (`ARL_SHARED_BUDGET_STATE_REPAIRED`).
   */
  repaired: [{ budget: string; repaired: readonly string[] }];
  /** The number of live members changed. */
  members: [{ budget: string; from: number; to: number }];
}
