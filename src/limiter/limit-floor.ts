import type { AnnouncedQuota, ReadQuota } from './types.js';

/**
 * The limits an API never announced, read from its `remaining` (Azure OpenAI sends
 * `x-ratelimit-remaining-{requests,tokens}` alone). A refilling bucket never holds more than its
 * limit, so each `remaining` is a lower bound of it: a quota marked `limitIsLowerBound` gets as
 * its `limit` the highest `remaining` of its policy read so far. The first answer of a quiet
 * minute reads about the whole limit, less its own call. Were the limit lowered later, the 429s
 * teach it (the cut), as for a quota that is announced. Pure bookkeeping, per limiter.
 */
export class LimitFloors {
  readonly #highest = new Map<string, number>();

  /** `quotas` with each lower-bound `limit` raised to its policy's highest `remaining` so far. */
  apply(quotas: readonly AnnouncedQuota[]): readonly AnnouncedQuota[] {
    if (!quotas.some((q) => (q as ReadQuota | undefined)?.limitIsLowerBound === true)) return quotas;
    return quotas.map((quota) => {
      const read = quota as ReadQuota;
      const remaining = read.remaining;
      if (read.limitIsLowerBound !== true || typeof remaining !== 'number') return quota;
      const name = read.policy ?? 'default';
      const highest = Math.max(this.#highest.get(name) ?? 0, remaining);
      this.#highest.set(name, highest);
      return { ...read, limit: highest };
    });
  }
}
