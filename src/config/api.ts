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
export function apiLimiterOptions(
  api: LlmApi,
  own?: AdaptiveLimiterOptions['budgets'],
): AdaptiveLimiterOptions {
  const names = API_BUDGETS[api] as readonly string[] | undefined;
  // An unknown name is the config check's to report.
  if (names === undefined) return {};
  // The config's `budgets` set fields of the API's budgets, by name in any case and with or
  // without `_` (appsettings.json writes `Tokens`, `InputTokens`), in the API's order. A value that
  // is no object is passed on as it is, for the limiter's check to name.
  const fields = new Map(
    Object.entries(typeof own === 'object' && own !== null ? own : {}).map(([k, v]) => [budgetKey(k), v]),
  );
  const budgets = Object.fromEntries(names.map((name) => [name, fields.get(budgetKey(name)) ?? {}]));
  return { budgets, burst: 'announced', reserve: 1_500 };
}

/** A budget's name as `budgets` next to `api` matches it: in any case, with or without `_`. */
function budgetKey(name: string): string {
  return name.toLowerCase().replaceAll('_', '');
}

/** The message of `api` next to `shared` (parseConfig and the registry). */
export const API_WITH_SHARED =
  "not with `shared`: a shared budget meters requests only, not an LLM API's token budgets";

/**
 * The issues of a config's `budgets` next to `api`: each must name one of the API's budgets, in
 * any case, with or without `_` (the adapters charge a call to those names), and once. Each issue
 * names the budget as written (`budget`).
 */
export function apiBudgetIssues(
  api: unknown,
  budgets: unknown,
): { budget: string; message: string; received: unknown }[] {
  const names = API_BUDGETS[api as LlmApi] as readonly string[] | undefined;
  if (names === undefined || typeof budgets !== 'object' || budgets === null) return [];
  const issues: { budget: string; message: string; received: unknown }[] = [];
  const seen = new Map<string, string>();
  for (const [written, value] of Object.entries(budgets)) {
    const name = names.find((n) => budgetKey(n) === budgetKey(written));
    const before = name === undefined ? undefined : seen.get(name);
    if (name === undefined) {
      issues.push({
        budget: written,
        message: `not a budget of api '${String(api)}' (its budgets: ${names.join(', ')}); \`budgets\` sets their fields`,
        received: value,
      });
    } else if (before !== undefined) {
      issues.push({
        budget: written,
        message: `budget '${name}' given twice (as ${before} and ${written}); give it once`,
        received: value,
      });
    } else seen.set(name, written);
  }
  return issues;
}
