import { EventEmitter } from 'node:events';
import { type Clock, systemClock } from '../clock.js';
import type { LimiterConfig } from '../config/schema.js';
import { DISPOSE } from '../dispose.js';
import {
  AdaptiveRateLimitError,
  ConfigError,
  type ConfigIssue,
  configErrorFrom,
  configPath,
} from '../errors.js';
import {
  kAddBusyCheck,
  kChanges,
  kHoldOrigin,
  kKeepPause,
  kLimiterForOrigin,
  kPartitionForOrigin,
  kRouteForOrigin,
  kTouchOrigin,
} from '../internal.js';
import { issueMessage } from '../issue-message.js';
import type { AdaptiveRateLimiter } from '../limiter/adaptive.js';
import type { RateLimiter } from '../limiter/types.js';
import { setLimiterOrigins, setLimiterPartition, setLimiterRetired } from '../limiter/watch.js';
import { normalizeOrigin } from '../origin.js';
import {
  buildEntry,
  buildEntryOrThrow,
  conflictIssues,
  defaultConfigIssues,
  makeLimiter,
  type NamedEntry,
} from './entries.js';
import {
  OVERFLOW,
  REGISTRY_DEFAULTS,
  type RegistryOptions,
  registryOptionsSchema,
  unknownRegistryKeys,
} from './options.js';
import { OriginPool, type PoolOwner } from './origin-pool.js';
import { LazySharedBudget, makeSharedBudget, retireSharedBudget } from './shared.js';
import { SharedPartitions } from './shared-partitions.js';

export type { RegistryOptions } from './options.js';

export { OVERFLOW } from './options.js';

/**
 * A partition of the requests routed to one limiter (an origin's, or a named limiter's): its short
 * id (a keyed hash, never the key itself) and, asked only when its limiter is made, the name the
 * user gives it.
 */
export interface PartitionRef {
  readonly id: string;
  readonly name?: (() => string | undefined) | undefined;
}

/** @internal Where a partition's requests go: {@link RateLimiterRegistry[kPartitionForOrigin]}. */
export interface PartitionRoute {
  /** The registry's key of the partition's limiter (or budget). */
  readonly key: string;
  /** Its `AdaptiveRateLimiter` (a shared budget's local one: `undefined` while its code loads). */
  readonly limiter: AdaptiveRateLimiter | undefined;
  /** What its requests acquire from: the limiter, or the partition's shared budget. */
  readonly instance: RateLimiter;
  /** Whether it is the partition's own (counted as used, held while a request is in flight). */
  readonly own: boolean;
}

/**
 * The registry's name of a partition's limiter: the origin (or the named limiter's name), `#`,
 * the partition's short id: `https://api.example.com#Zt3kQ0b9xY1w`.
 */
export function partitionKey(base: string, id: string): string {
  return `${base}#${id}`;
}

/**
 * The typed events of a {@link RateLimiterRegistry} (Resilience4j's entry events). Each names the
 * entry's `AdaptiveRateLimiter` (for a `limiter` instance: the one `get(name)` answers); an entry
 * without one (a `limiter` instance that neither is nor holds one) is left out of them, and a
 * `replace` between such an entry and another is told as `removed` or `added` of the other.
 */
export interface RegistryEventMap {
  /**
   * A limiter joined the registry: by `add`, or made on demand for an origin or a partition (then
   * `partition` is the partition's short id, and `name` ends with `#` and that id).
   */
  added: [{ name: string; limiter: AdaptiveRateLimiter; partition?: string }];
  /** A limiter left the registry: by `remove`, or a per-origin (or partition) limiter dropped as idle or over the cap. */
  removed: [{ name: string; limiter: AdaptiveRateLimiter; partition?: string }];
  /** `replace` put `limiter` in the place of `old`. */
  replaced: [{ name: string; old: AdaptiveRateLimiter; limiter: AdaptiveRateLimiter }];
}

/**
 * Named limiters and the map from origins to them. A request's origin goes to the named limiter
 * that lists it (an exact origin beats a wildcard; among wildcards the closest wins: the longest
 * host suffix (`*.api.example.com` over `*.example.com`), then a named scheme, then a named
 * port), else to a limiter of its own made from `default`, else (with `default: false`) to none.
 *
 * The registry closes a limiter in `remove` and `close`, and a per-origin limiter it drops to make
 * room whose only state is a pause (nothing queued, nothing in flight through the HTTP adapters):
 * the pause is kept as a record for the origin's next limiter, and closing frees its pause timer.
 * A limiter that leaves it in other ways (`replace`, or a per-origin limiter dropped as idle) is
 * not closed: a request still holding it, such as a retry after a 429, is served by it, and it is
 * garbage once nothing holds it (an idle limiter holds no timer); `close` closes one taken out by
 * `replace` or `add` that is still held. Past `maxOriginLimiters`, new
 * origins share an overflow limiter (see `RegistryOptions.maxOriginLimiters`).
 *
 * A named limiter may be an instance you own (`limiter` in its config, such as a `SharedBudget`):
 * the registry routes its origins to it like any named limiter, never drops it, and never closes
 * it (not in `remove`, not in `close`): close it yourself, after the adapters that use it (their
 * `close()` refuses their own requests waiting for it, and leaves it open).
 */
export class RateLimiterRegistry extends EventEmitter<RegistryEventMap> {
  readonly #busyChecks = new Set<(limiter: AdaptiveRateLimiter) => boolean>();
  readonly #clock: Clock;
  readonly #default: Omit<LimiterConfig, 'origins'> | false;
  /** In declaration order; `replace` keeps a limiter's place. */
  readonly #named = new Map<string, NamedEntry>();
  /** Exact origin to the name of the limiter that lists it. */
  readonly #exact = new Map<string, string>();
  /** Per-origin limiters, least recently used first, and their eviction. */
  readonly #perOrigin: OriginPool;
  /** The shared budgets of the partitions of named limiters that declare `shared`. */
  readonly #sharedPartitions: SharedPartitions;
  /** The partition whose requests a named limiter meters itself (the first one seen), by its name. */
  readonly #claims = new Map<string, string>();
  /** The limiter shared by new origins that find no room among the per-origin ones; made on first need. */
  #overflow: AdaptiveRateLimiter | undefined;
  /**
   * Of a named limiter, the limiter its new partitions share when they find no room, by its
   * registry name (`<name>#(overflow)`); made on first need, from the named limiter's config.
   */
  readonly #namedOverflow = new Map<string, AdaptiveRateLimiter>();
  #closed = false;
  /**
   * Limiters it made that left it without being closed (a named one `replace` took out, its
   * partitions, the per-origin limiters of origins an added limiter covers): they still serve the
   * requests queued in them or holding them for a retry, and are closed with the registry, so
   * that those requests are refused then as every other waiter is. Held weakly: one nothing holds
   * any more is garbage, and its reference is dropped at the next one taken out.
   */
  readonly #retired = new Set<WeakRef<{ close(): unknown }>>();
  /** Entries added, removed or replaced so far (events or not): the HTTP adapters' route cache key. */
  #changes = 0;

  constructor(options: RegistryOptions = {}) {
    super();
    const unknown = unknownRegistryKeys(options);
    if (unknown.length > 0) throw new ConfigError(unknown, 'rate limiter registry options');
    const parsed = registryOptionsSchema.safeParse(options, { error: issueMessage });
    if (!parsed.success) throw configErrorFrom(parsed.error, options, 'rate limiter registry options');
    this.#clock = options.clock ?? systemClock;
    const maxOriginLimiters = parsed.data.maxOriginLimiters ?? REGISTRY_DEFAULTS.maxOriginLimiters;
    const maxPausedOrigins = parsed.data.maxPausedOrigins ?? REGISTRY_DEFAULTS.maxPausedOrigins;
    const idleTimeout = parsed.data.idleTimeout ?? REGISTRY_DEFAULTS.idleTimeout;
    this.#default = options.default ?? {};
    this.#sharedPartitions = new SharedPartitions(this.#clock, maxOriginLimiters, idleTimeout);
    this.#perOrigin = new OriginPool({
      clock: this.#clock,
      maxOriginLimiters,
      maxPausedOrigins,
      idleTimeout,
      onDrop: (key, limiter, owner) => this.#announce('removed', key, limiter, owner.partition),
      isBusy: (limiter) => {
        for (const busy of this.#busyChecks) if (busy(limiter)) return true;
        return false;
      },
    });

    const issues: ConfigIssue[] = [];
    if (this.#default !== false) issues.push(...defaultConfigIssues(this.#default, this.#clock));
    const entries = Object.entries(options.limiters ?? {});
    for (const [name, config] of entries) {
      const built = buildEntry(name, config, this.#clock);
      if ('issues' in built) issues.push(...built.issues);
      else this.#named.set(name, built);
    }
    issues.push(...conflictIssues(entries));
    if (issues.length > 0) throw new ConfigError(issues, 'rate limiter registry options');
    for (const [name, entry] of this.#named) this.#index(name, entry);
  }

  /**
   * The limiter for requests to `origin` (any URL of it; it is normalized, so
   * `HTTPS://API.Example.com:443/` and `https://api.example.com` share a limiter): the named
   * limiter that covers it, else its per-origin limiter (made now if there is none), else
   * `undefined` when `default` is `false`. For a named limiter given as an instance
   * (`limiter`), its `AdaptiveRateLimiter` as {@link get} answers it (a `SharedBudget`'s
   * `.limiter`), or `undefined` when it has none.
   *
   * @throws {ConfigError} when `origin` is not an http(s) URL.
   */
  limiterFor(origin: string | URL): AdaptiveRateLimiter | undefined {
    return this[kLimiterForOrigin](normalizeOrigin(origin));
  }

  /**
   * @internal {@link limiterFor} for an origin that is normalized already (the HTTP adapters
   * normalize each origin once and remember it).
   */
  [kLimiterForOrigin](key: string): AdaptiveRateLimiter | undefined {
    const name = this.#owner(key);
    if (name !== undefined) return this.#named.get(name)?.limiter;
    return this.#perOriginFor(key);
  }

  /**
   * @internal What the HTTP adapters send the requests to the normalized origin `key` through:
   * the entry's name, the {@link RateLimiter} its requests acquire from (a `limiter` instance as
   * it was given) and its `AdaptiveRateLimiter`, if any; `undefined` to pass them through.
   */
  [kRouteForOrigin](
    key: string,
  ): { name: string; limiter: RateLimiter; adaptive: AdaptiveRateLimiter | undefined } | undefined {
    const name = this.#owner(key);
    if (name !== undefined) {
      const entry = this.#named.get(name);
      return entry && { name, limiter: entry.instance, adaptive: entry.limiter };
    }
    const limiter = this.#perOriginFor(key);
    if (limiter === undefined) return undefined;
    return { name: limiter === this.#overflow ? OVERFLOW : key, limiter, adaptive: limiter };
  }

  /**
   * @internal The limiter of a partition of the requests to the normalized origin `origin`: of
   * the named limiter that covers it when the registry made that one (a `limiter` instance or a
   * `shared` budget is not partitioned: `undefined`), else of the origin, made from `default`
   * (`undefined` with `default: false`). Made now if there is none; its registry name is
   * {@link partitionKey} of the named limiter's name or the origin. The first partition seen uses
   * the limiter of the origin (or the named limiter) itself: `undefined` for it, as for requests
   * without a partition. Partitions count against
   * `maxOriginLimiters` as origins do; when there is no room, a new partition shares the overflow
   * limiter of its named limiter or of the origins (never the first partition's limiter, whose
   * pause is that partition's own).
   */
  [kPartitionForOrigin](origin: string, partition: PartitionRef): PartitionRoute | undefined {
    const name = this.#owner(origin);
    let owner: PoolOwner;
    let config: Omit<LimiterConfig, 'origins'>;
    let key: string;
    const entry = name === undefined ? undefined : this.#named.get(name);
    if (name !== undefined) {
      if (entry === undefined || !entry.owned) return undefined;
      if (entry.config.shared !== undefined) return this.#sharedPartition(name, entry, partition);
      if (entry.limiter === undefined) return undefined;
      owner = { named: name, partition: partition.id };
      config = entry.config;
      key = partitionKey(name, partition.id);
    } else {
      if (this.#default === false) return undefined;
      owner = { origin, partition: partition.id };
      config = this.#default;
      key = partitionKey(origin, partition.id);
    }
    const found = this[kTouchOrigin](key);
    if (found !== undefined) return { key, limiter: found, instance: found, own: true };
    // The first partition seen takes the limiter of the origin (or the named limiter) itself: one
    // credential is metered, named and shown exactly as without partitions. Not a partition whose
    // own limiter gave way to a pause record: it gets that limiter back, pause and all.
    if (this.#closed || !this.#perOrigin.pausedNow(key)) {
      const claimed =
        name !== undefined ? this.#claims.get(name) : this.#perOrigin.claim(origin, partition.id);
      if (name !== undefined && claimed === undefined) this.#claims.set(name, partition.id);
      if (claimed === undefined || claimed === partition.id) return undefined;
    }
    // Named (the user's `partitionName`) only when a limiter is made for it: a partition on the
    // overflow limiter was named at each of its requests.
    const limiterName = () => {
      const label = partition.name?.();
      return label === undefined ? key : partitionKey(name ?? origin, label);
    };
    if (this.#closed) {
      const limiter = makeLimiter(limiterName(), config, this.#clock);
      limiter.close();
      return { key, limiter, instance: limiter, own: false };
    }
    const record = this.#perOrigin.takePause(key);
    const pausedUntil = record?.until;
    // No room: the overflow limiter of the named limiter or of the origins. A partition whose
    // pause was kept as a record gets its own limiter even then (see #perOriginFor): its pause is
    // its own.
    if (!this.#perOrigin.makeRoom() && pausedUntil === undefined) {
      const shared = name !== undefined ? this.#namedOverflowOf(name, config) : this.#overflowLimiter(config);
      return { key, limiter: shared, instance: shared, own: false };
    }
    let named: string;
    try {
      named = limiterName();
    } catch (error) {
      // No limiter made: the pause stays kept for the partition's next request.
      if (record !== undefined) this.#perOrigin.putBackPause(key, record);
      throw error;
    }
    const limiter = makeLimiter(named, config, this.#clock);
    setLimiterPartition(limiter, partition.id);
    setLimiterOrigins(limiter, entry !== undefined ? entry.exact : [origin]);
    if (pausedUntil !== undefined) limiter.pauseFor(pausedUntil - this.#clock.now());
    this.#perOrigin.add(key, limiter, owner);
    this.#announce('added', key, limiter, partition.id);
    return { key, limiter, instance: limiter, own: true };
  }

  /**
   * The budget of a partition of the named limiter `name`, which declares `shared`: a shared
   * budget of its own, named after the budget and the partition's id (`github#Zt3kQ0b9xY1w`), so
   * that every process that computes the same id (the same `partitionSecret`) shares it. No claim:
   * the first partition seen in one process need not be the first in another. No room: the named
   * limiter's own budget.
   */
  #sharedPartition(name: string, entry: NamedEntry, partition: PartitionRef): PartitionRoute | undefined {
    const key = partitionKey(name, partition.id);
    const found = this.#sharedPartitions.touch(key);
    if (found !== undefined) return { key, limiter: found.limiter, instance: found, own: true };
    if (this.#closed) return undefined;
    const shared = entry.config.shared as NonNullable<LimiterConfig['shared']>;
    const budgetName = partitionKey(shared.name ?? name, partition.id);
    const made = this.#sharedPartitions.add(key, name, () => {
      const budget = makeSharedBudget(
        name,
        { ...entry.config, shared: { ...shared, name: budgetName } },
        this.#clock,
      );
      budget.onLimiter((local) => {
        setLimiterPartition(local, partition.id);
        setLimiterOrigins(local, entry.exact);
      });
      return budget;
    });
    if (made === undefined) return undefined;
    this.#changes++;
    return { key, limiter: made.limiter, instance: made, own: true };
  }

  /**
   * @internal An HTTP adapter's request to the normalized origin `key` is in progress through
   * `limiter`: when that is the origin's own limiter, it is not dropped (its answer may pause it)
   * until the returned function is called (once, when the request's last answer is judged). With
   * no `key` (a named limiter's request), a `shared` budget is held the same way: one that
   * `replace` took out is not closed under it.
   */
  [kHoldOrigin](key: string | undefined, limiter: RateLimiter): () => void {
    if (key === undefined) return limiter instanceof LazySharedBudget ? limiter.hold() : noop;
    return (
      this.#sharedPartitions.hold(key, limiter) ?? this.#perOrigin.hold(key, limiter as AdaptiveRateLimiter)
    );
  }

  /**
   * @internal An adapter tells the registry which limiters it still uses beyond their own queue
   * (requests holding or waiting for a maxConcurrent slot): those are not dropped as idle, or a
   * new limiter for the origin would come with a second cap. Returns the function that removes it.
   */
  [kAddBusyCheck](check: (limiter: AdaptiveRateLimiter) => boolean): () => void {
    this.#busyChecks.add(check);
    return () => this.#busyChecks.delete(check);
  }

  /** @internal How many times an entry was added, removed or replaced: routes stay valid until it moves. */
  get [kChanges](): number {
    return this.#changes;
  }

  /** The per-origin limiter of `key`, made now if there is none; `undefined` with `default: false`. */
  #perOriginFor(key: string): AdaptiveRateLimiter | undefined {
    if (this.#default === false) return undefined;
    const found = this[kTouchOrigin](key);
    if (found !== undefined) return found;

    if (this.#closed) {
      // A closed registry answers every origin with a closed limiter, and keeps none of them.
      const limiter = makeLimiter(key, this.#default, this.#clock);
      limiter.close();
      return limiter;
    }
    const record = this.#perOrigin.takePause(key);
    const pausedUntil = record?.until;
    // No room: the overflow limiter. An origin whose pause was kept as a record gets its own
    // limiter even then, in the record's place (limiters and records together stay within
    // maxOriginLimiters + maxPausedOrigins): its pause pauses no other origin, and no other
    // credential of it.
    if (!this.#perOrigin.makeRoom() && pausedUntil === undefined) return this.#overflowLimiter(this.#default);
    const limiter = makeLimiter(key, this.#default, this.#clock);
    if (pausedUntil !== undefined) limiter.pauseFor(pausedUntil - this.#clock.now());
    // The partition whose pause it was keeps the origin's limiter: the others get their own.
    this.#perOrigin.add(key, limiter, { origin: key }, record?.claim);
    this.#announce('added', key, limiter);
    return limiter;
  }

  #namedOverflowOf(name: string, config: Omit<LimiterConfig, 'origins'>): AdaptiveRateLimiter {
    const key = partitionKey(name, OVERFLOW);
    let limiter = this.#namedOverflow.get(key);
    if (limiter === undefined) {
      limiter = makeLimiter(key, config, this.#clock);
      const entry = this.#named.get(name);
      if (entry !== undefined) setLimiterOrigins(limiter, entry.exact);
      this.#namedOverflow.set(key, limiter);
      this.#announce('added', key, limiter);
    }
    return limiter;
  }

  #overflowLimiter(config: Omit<LimiterConfig, 'origins'>): AdaptiveRateLimiter {
    if (this.#overflow === undefined) {
      this.#overflow = makeLimiter(OVERFLOW, config, this.#clock);
      this.#announce('added', OVERFLOW, this.#overflow);
    }
    return this.#overflow;
  }

  /**
   * @internal The per-origin limiter of the normalized origin `key`, counted as a use (as
   * {@link limiterFor} counts it: it is not dropped as idle), or `undefined` when the registry
   * holds none for it. What the HTTP adapters call for an origin whose limiter they remember.
   */
  [kTouchOrigin](key: string): AdaptiveRateLimiter | undefined {
    return this.#perOrigin.touch(key);
  }

  /**
   * @internal Keeps the pause of `ms` that the server of `key` (an origin, or a partition's key)
   * asked for with a 429 answered through an overflow limiter, for `key`'s next limiter of its
   * own: leaving the overflow limiter, it starts paused until then (capped by its `maxPause`).
   */
  [kKeepPause](key: string, ms: number): void {
    if (!this.#closed) this.#perOrigin.keepPause(key, this.#clock.now() + ms);
  }

  /**
   * The config of the limiter `name`: its own, or `default` for a per-origin limiter. For a named
   * limiter given as an instance, `configFor(name).limiter` is that instance.
   */
  configFor(name: string): LimiterConfig | undefined {
    const named = this.#named.get(name);
    if (named !== undefined) return named.config;
    const owner = this.#perOrigin.ownerOf(name);
    const overflowOf = this.#namedOverflow.has(name) ? name.slice(0, -OVERFLOW.length - 1) : undefined;
    const partitioned = owner?.named ?? overflowOf ?? this.#sharedPartitions.namedOf(name);
    if (partitioned !== undefined) return this.#named.get(partitioned)?.config;
    const perOrigin = owner !== undefined || (name === OVERFLOW && this.#overflow !== undefined);
    return perOrigin && this.#default !== false ? this.#default : undefined;
  }

  /**
   * The limiter `name` (named, or per-origin by its origin); does not count as a use. For a named
   * limiter given as an instance (`limiter`): the instance when it is an `AdaptiveRateLimiter`,
   * else its `.limiter` when that is one (a `SharedBudget`'s local limiter: this process's
   * share, snapshot and events; change the budget's options where it is made, not here), else
   * `undefined` (`configFor(name).limiter` is the instance).
   */
  get(name: string): AdaptiveRateLimiter | undefined {
    const named = this.#named.get(name);
    if (named !== undefined) return named.limiter;
    if (name === OVERFLOW && this.#overflow !== undefined) return this.#overflow;
    return (
      this.#perOrigin.get(name) ?? this.#namedOverflow.get(name) ?? this.#sharedPartitions.get(name)?.limiter
    );
  }

  /**
   * The named limiters in declaration order, then the per-origin and partition ones, least
   * recently used first, then the named limiters' overflow limiters (`<name>#(overflow)`) and
   * `(overflow)`, those that were needed.
   */
  names(): string[] {
    const names = [
      ...this.#named.keys(),
      ...this.#perOrigin.keys(),
      ...this.#sharedPartitions.keys(),
      ...this.#namedOverflow.keys(),
    ];
    if (this.#overflow !== undefined && !this.#named.has(OVERFLOW)) names.push(OVERFLOW);
    return names;
  }

  /**
   * Adds a named limiter: made from `config`, or the `limiter` instance it gives (then its
   * `AdaptiveRateLimiter` as {@link get} answers it, or `undefined`, is returned). Per-origin
   * limiters of origins it covers leave the registry (not closed).
   * @throws {ConfigError} when the name is taken, the config is bad, or one of its exact origins
   * belongs to another limiter.
   */
  add(name: string, config: LimiterConfig & { limiter?: undefined }): AdaptiveRateLimiter;
  add(name: string, config: LimiterConfig): AdaptiveRateLimiter | undefined;
  add(name: string, config: LimiterConfig): AdaptiveRateLimiter | undefined {
    this.#assertOpen('add');
    if (this.#named.has(name)) {
      throw new ConfigError(
        [
          {
            path: configPath(['limiters', name]),
            message: 'a limiter of this name exists; use replace()',
            received: name,
          },
        ],
        'rate limiter registry',
      );
    }
    const entry = buildEntryOrThrow(name, config, this.#named.entries(), this.#clock);
    this.#named.set(name, entry);
    this.#index(name, entry);
    this.#announce('added', name, entry.limiter);
    return entry.limiter;
  }

  /**
   * Puts a fresh limiter made from `config` in the place of `name` (same declaration order), for
   * every request from now on; to change options and keep the learned rate, use
   * `get(name).update(...)` instead. The old limiter is not closed: the requests already queued
   * in it, or holding it for a retry, are served by it, so a config change fails no caller. (A
   * shared budget taken out leaves Redis once nothing waits in it, is on its way to it, or is in
   * progress through an HTTP adapter; see {@link LazySharedBudget.hold}.)
   * `config` may give a `limiter` instance, as in {@link add}.
   * @throws {ConfigError} when there is no such limiter or the config is bad; nothing changes then.
   */
  replace(name: string, config: LimiterConfig & { limiter?: undefined }): AdaptiveRateLimiter;
  replace(name: string, config: LimiterConfig): AdaptiveRateLimiter | undefined;
  replace(name: string, config: LimiterConfig): AdaptiveRateLimiter | undefined {
    this.#assertOpen('replace');
    const old = this.#named.get(name);
    if (old === undefined) {
      throw new ConfigError(
        [
          {
            path: configPath(['limiters', name]),
            message: 'no limiter of this name; use add()',
            received: name,
          },
        ],
        'rate limiter registry',
      );
    }
    const others = [...this.#named.entries()].filter(([n]) => n !== name);
    const entry = buildEntryOrThrow(name, config, others, this.#clock);
    this.#unindex(name, old);
    this.#named.set(name, entry);
    this.#index(name, entry);
    // Its partitions were made from the old config: not closed (as the old limiter is not); a
    // partition's shared budget leaves Redis once nothing waits in it or holds it.
    for (const partition of this.#dropPartitionsOf(name)) this.#retire(partition);
    const overflow = this.#takeNamedOverflow(name);
    if (overflow !== undefined) {
      this.#retire(overflow);
      this.#announce('removed', partitionKey(name, OVERFLOW), overflow);
    }
    this.#claims.delete(name);
    for (const budget of this.#sharedPartitions.takeWhere(name)) {
      retireSharedBudget(budget);
      this.#retire(budget);
    }
    this.#changes++;
    old.retire();
    // A `limiter` instance is its owner's to close; one the registry made (a limiter, a shared
    // budget) has a close.
    if (old.owned) this.#retire(old.instance as RateLimiter & { close(): unknown });
    if (old.limiter !== undefined && entry.limiter !== undefined) {
      this.emit('replaced', { name, old: old.limiter, limiter: entry.limiter });
    } else if (old.limiter !== undefined) this.emit('removed', { name, limiter: old.limiter });
    else if (entry.limiter !== undefined) this.emit('added', { name, limiter: entry.limiter });
    return entry.limiter;
  }

  /**
   * Removes the limiter `name` (named, or per-origin by its origin) and closes it: its waiters
   * reject with reason `closed`. A `limiter` instance is not closed: its owner closes it. Its
   * origins go to `default` from now on.
   * @returns whether there was such a limiter.
   */
  remove(name: string): boolean {
    const named = this.#named.get(name);
    const overflow = named === undefined ? this.#namedOverflow.get(name) : undefined;
    if (overflow !== undefined) {
      this.#namedOverflow.delete(name);
      overflow.close();
      this.#announce('removed', name, overflow);
      return true;
    }
    const perOrigin = named === undefined ? this.#perOrigin.get(name) : undefined;
    if (named === undefined && perOrigin === undefined) return false;
    let limiter: AdaptiveRateLimiter | undefined;
    // A partition's limiter is told removed with its partition, as it was told added.
    const partition = perOrigin === undefined ? undefined : this.#perOrigin.ownerOf(name)?.partition;
    if (named !== undefined) {
      this.#unindex(name, named);
      this.#named.delete(name);
      limiter = named.limiter;
      named.close();
      for (const partition of this.#dropPartitionsOf(name)) partition.close();
      const overflow = this.#takeNamedOverflow(name);
      if (overflow !== undefined) {
        overflow.close();
        this.#announce('removed', partitionKey(name, OVERFLOW), overflow);
      }
      this.#claims.delete(name);
      this.#sharedPartitions.closeWhere(name);
    } else if (perOrigin !== undefined) {
      this.#perOrigin.delete(name);
      limiter = perOrigin;
      limiter.close();
    }
    this.#announce('removed', name, limiter, partition);
    return true;
  }

  /**
   * Closes every limiter it made (their waiters reject with reason `closed`), those `replace`
   * and `add` took out too while something holds them; idempotent. The
   * limiters stay listed, so `limiterFor` keeps answering, with closed limiters; `add` and
   * `replace` throw. A `limiter` instance is not closed: it serves on until its owner closes it.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const entry of this.#named.values()) entry.close();
    for (const limiter of this.#perOrigin.limiters()) limiter.close();
    this.#sharedPartitions.closeWhere();
    this.#overflow?.close();
    for (const limiter of this.#namedOverflow.values()) limiter.close();
    const retired = [...this.#retired];
    this.#retired.clear();
    for (const ref of retired) {
      // A shared budget's close is a promise (it leaves Redis); it never needs awaiting here.
      const closing = ref.deref()?.close();
      if (closing instanceof Promise) closing.catch(() => undefined);
    }
  }
  /** {@link close}, for `using registry = new RateLimiterRegistry(...)`. */
  [DISPOSE](): void {
    this.close();
  }

  /** Keeps `limiter`, taken out unclosed, to close with the registry (see `#retired`). */
  #retire(limiter: { close(): unknown }): void {
    setLimiterRetired(limiter);
    for (const ref of this.#retired) if (ref.deref() === undefined) this.#retired.delete(ref);
    this.#retired.add(new WeakRef(limiter));
  }

  // ---- internals ---------------------------------------------------------------------------

  #owner(origin: string): string | undefined {
    const exact = this.#exact.get(origin);
    if (exact !== undefined) return exact;
    // The closest wildcard wins (see `wildcardRanker`); two limiters never list the same one.
    let owner: string | undefined;
    let best = -1;
    for (const [name, entry] of this.#named) {
      const rank = entry.wildcard?.(origin) ?? -1;
      if (rank > best) [owner, best] = [name, rank];
    }
    return owner;
  }

  /** Counts a change of the entries, and emits it when the entry has an `AdaptiveRateLimiter`. */
  #announce(
    event: 'added' | 'removed',
    name: string,
    limiter: AdaptiveRateLimiter | undefined,
    partition?: string,
  ): void {
    this.#changes++;
    if (limiter === undefined) return;
    this.emit(event, partition === undefined ? { name, limiter } : { name, limiter, partition });
  }

  #index(name: string, entry: NamedEntry): void {
    for (const origin of entry.exact) if (!this.#exact.has(origin)) this.#exact.set(origin, name);
    // Per-origin limiters (and their partitions) of origins this one now covers leave the registry
    // (not closed: their requests are still served; closed with the registry).
    const dropped = this.#perOrigin.dropWhere(
      (owner) => owner.origin !== undefined && this.#owner(owner.origin) === name,
      (key) => this.#owner(originOfKey(key)) === name,
    );
    for (const limiter of dropped) this.#retire(limiter);
  }

  /** Takes the overflow limiter of the named limiter `name` out of the registry, if it has one. */
  #takeNamedOverflow(name: string): AdaptiveRateLimiter | undefined {
    const key = partitionKey(name, OVERFLOW);
    const limiter = this.#namedOverflow.get(key);
    this.#namedOverflow.delete(key);
    return limiter;
  }

  /** Drops the partitions of the named limiter `name` and their kept pauses; returns their limiters. */
  #dropPartitionsOf(name: string): AdaptiveRateLimiter[] {
    const prefix = partitionKey(name, '');
    return this.#perOrigin.dropWhere(
      (owner) => owner.named === name,
      (key) => key.startsWith(prefix),
    );
  }

  #unindex(name: string, entry: NamedEntry): void {
    for (const origin of entry.exact) if (this.#exact.get(origin) === name) this.#exact.delete(origin);
  }

  #assertOpen(action: string): void {
    if (this.#closed)
      throw new AdaptiveRateLimitError('ERR_REGISTRY_CLOSED', `cannot ${action}: the registry is closed`);
  }
}

/** The origin part of a pool key: the origin itself, or the origin before a partition's `#id`. */
function originOfKey(key: string): string {
  const hash = key.indexOf('#');
  return hash < 0 ? key : key.slice(0, hash);
}

function noop(): void {}
