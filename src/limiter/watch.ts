/**
 * What watches every limiter of the process (the OpenTelemetry metrics, `NODE_DEBUG`): it is
 * handed each limiter at its first grant, refusal or answer after the watcher joined (one
 * comparison each; an idle limiter is never handed), and attaches its listeners. Its `watch` must
 * be idempotent per limiter (a limiter is handed again to every watcher when one joins or leaves).
 */
export interface LimiterWatcher {
  /** `limiter` is an `AdaptiveRateLimiter` (not named here: adaptive.ts imports this module). */
  watch(limiter: WatchedLimiter): void;
}

/** What this module reads of a limiter. */
export interface WatchedLimiter {
  readonly name: string;
}

const watchers = new Set<LimiterWatcher>();
/** Moves each time a watcher joins or leaves; 0 while none ever did. */
let generation = 0;

/** The current watcher generation (see {@link addLimiterWatcher}). */
export function watchGeneration(): number {
  return generation;
}

/**
 * Hands `watcher` every limiter at its next grant, refusal or answer. Returns the function that
 * removes it (its listeners are its own to remove).
 */
export function addLimiterWatcher(watcher: LimiterWatcher): () => void {
  watchers.add(watcher);
  generation++;
  return () => {
    if (watchers.delete(watcher)) generation++;
  };
}

/** Hands `limiter` to every watcher; returns the generation it was handed at. */
export function handToWatchers(limiter: WatchedLimiter): number {
  for (const watcher of watchers) watcher.watch(limiter);
  return generation;
}

const origins = new WeakMap<WatchedLimiter, readonly string[]>();

/**
 * @internal The registry tells which origins a named limiter serves (normalized), so watchers
 * can name them; a per-origin limiter is named after its origin and needs no entry.
 */
export function setLimiterOrigins(limiter: WatchedLimiter, list: readonly string[]): void {
  origins.set(limiter, list);
}

/**
 * The origins `limiter` is known to serve: those the registry gave it, else the origin its name
 * starts with (a per-origin limiter's name is its origin), else none.
 */
export function limiterOrigins(limiter: WatchedLimiter): readonly string[] {
  const known = origins.get(limiter);
  if (known !== undefined) return known;
  const name = limiter.name;
  if (!name.startsWith('http://') && !name.startsWith('https://')) return [];
  const head = name.split(/\s/, 1)[0] ?? '';
  return URL.canParse(head) ? [new URL(head).origin] : [];
}

const partitions = new WeakMap<WatchedLimiter, string>();

/** @internal The registry tells the short id of the partition a limiter meters (see docs/partitions.md). */
export function setLimiterPartition(limiter: WatchedLimiter, id: string): void {
  partitions.set(limiter, id);
}

/**
 * The short id of the partition `limiter` meters (a keyed hash of the partition's key, never the
 * key: a credential), or `undefined` for a limiter of no partition (an origin's, a named one's).
 */
export function limiterPartition(limiter: WatchedLimiter): string | undefined {
  return partitions.get(limiter);
}

const retired = new WeakSet<object>();

/**
 * @internal The registry tells that it took `limiter` out unclosed (`replace`, a dropped
 * partition): it serves what it holds, and a newer limiter of its name serves the rest.
 */
export function setLimiterRetired(limiter: object): void {
  retired.add(limiter);
}

/** Whether the registry took `limiter` out unclosed (see {@link setLimiterRetired}). */
export function limiterRetired(limiter: object): boolean {
  return retired.has(limiter);
}

/** What a watcher reads of a `maxConcurrent` gate: the requests waiting for one of its slots now. */
export interface SlotGate {
  readonly waiting: number;
}

const slotGates = new WeakMap<WatchedLimiter, SlotGate>();

/**
 * @internal The HTTP adapters tell which `maxConcurrent` gate a limiter's requests wait at for a
 * slot (one gate may serve several limiters: an origin's cap over its partitions).
 */
export function setLimiterSlotGate(limiter: WatchedLimiter, gate: SlotGate): void {
  slotGates.set(limiter, gate);
}

/** The `maxConcurrent` gate `limiter`'s requests wait at, when the HTTP adapters gave it one. */
export function limiterSlotGate(limiter: WatchedLimiter): SlotGate | undefined {
  return slotGates.get(limiter);
}
