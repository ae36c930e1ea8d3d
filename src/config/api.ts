import type { AdaptiveLimiterOptions } from '../limiter/options.js';

/** The LLM APIs a limiter can be set up for in one option (`api`). */
export type LlmApi = 'openai' | 'anthropic';

export const LLM_APIS: readonly LlmApi[] = ['openai', 'anthropic'];

/** The budgets of each API, in the order the limiter takes them (the first counts requests). */
export const API_BUDGETS: Readonly<Record<LlmApi, readonly string[]>> = {
  openai: ['requests', 'tokens'],
  anthropic: ['requests', 'input_tokens', 'output_tokens'],
};

/**
 * The limiter options `api` sets (the config's own fields override them): a budget per quota the
 * API meters, each the bucket the API announces (`burst: 'announced'`: the full bucket spent at
 * the start, then paced by its refill) less a reserve of 1.5 s of its rate.
 */
export function apiLimiterOptions(api: LlmApi): AdaptiveLimiterOptions {
  const names = API_BUDGETS[api] as readonly string[] | undefined;
  // An unknown name is the config check's to report.
  if (names === undefined) return {};
  const budgets = Object.fromEntries(names.map((name) => [name, {}]));
  return { budgets, burst: 'announced', reserve: 1_500 };
}
