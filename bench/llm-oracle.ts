/**
 * The LLM bench's oracle: a client that knows the API's limits and each call's cost exactly, as
 * no real client can. It keeps a copy of every budget's bucket (starting full with the server's),
 * grants calls in their order of arrival (FIFO) at the earliest time every bucket holds the call's
 * cost plus a reserve, takes from all buckets at once, and refuses at once a call it could not
 * send within `maxWait` of its arrival (a local 429, `x-oracle: refused`). Anthropic's output
 * tokens are taken at the grant (the server takes them as they are generated, later), and a call
 * needs only the reserve of them, as the server admits any call while its output bucket is above 0.
 */
import { type LlmMockOptions, promptChars } from '../test/helpers/llm-mock.js';
import { callIndexOf, type LlmCall } from './llm-workload.js';

interface Bucket {
  level: number;
  at: number;
  readonly perMs: number;
  readonly capacity: number;
  readonly reserve: number;
}

export interface OracleOptions {
  api: 'openai' | 'anthropic';
  /** The mock's limits per minute and bucket size, as the server has them. */
  limits: Required<NonNullable<LlmMockOptions['limits']>>;
  capacitySeconds: number;
  /** Reserve of every budget, in ms of its refill. */
  reserveMs: number;
  maxWaitMs: number;
  calls: readonly LlmCall[];
}

export const ORACLE_REFUSAL = 'x-oracle';

/** A fetch that sends through the oracle's FIFO schedule. */
export function oracleFetch(options: OracleOptions): typeof fetch {
  const now = () => performance.now();
  const start = now();
  const bucket = (perMinute: number): Bucket => ({
    level: (perMinute * options.capacitySeconds) / 60,
    at: start,
    perMs: perMinute / 60_000,
    capacity: (perMinute * options.capacitySeconds) / 60,
    reserve: (perMinute / 60_000) * options.reserveMs,
  });
  const { limits } = options;
  const buckets =
    options.api === 'openai'
      ? [bucket(limits.requestsPerMinute), bucket(limits.tokensPerMinute)]
      : [
          bucket(limits.requestsPerMinute),
          bucket(limits.inputTokensPerMinute),
          bucket(limits.outputTokensPerMinute),
        ];
  let lastGrant = start;

  const levelAt = (b: Bucket, t: number) => Math.min(b.capacity, b.level + (t - b.at) * b.perMs);

  /** The grant time of a call of these costs arriving now (FIFO after every grant before it), or undefined. */
  const grant = (costs: readonly number[], needs: readonly number[]): number | undefined => {
    const arrival = now();
    let t = Math.max(arrival, lastGrant);
    for (const [i, b] of buckets.entries()) {
      const need = Math.min(b.capacity, needs[i] ?? 0);
      if ((costs[i] ?? 0) > b.capacity) return undefined;
      const level = levelAt(b, t);
      if (level < need) t = Math.max(t, t + (need - level) / b.perMs);
    }
    // A later t only raises every level, so the need of each bucket holds at the largest t.
    if (t - arrival > options.maxWaitMs) return undefined;
    for (const [i, b] of buckets.entries()) {
      b.level = levelAt(b, t) - (costs[i] ?? 0);
      b.at = t;
    }
    lastGrant = t;
    return t;
  };

  return async (input, init) => {
    const body = JSON.parse(typeof init?.body === 'string' ? init.body : '{}') as Record<string, unknown>;
    const prompt = Math.ceil(promptChars(body) / 4);
    const maxTokens = Number(body.max_completion_tokens ?? body.max_tokens ?? 0);
    const call = options.calls[callIndexOf(body) ?? -1];
    const [requests, tokens, output] = buckets;
    const costs =
      options.api === 'openai'
        ? [1, Math.max(prompt, maxTokens)]
        : [1, prompt, call?.completionTokens ?? maxTokens];
    const needs =
      options.api === 'openai'
        ? [1 + (requests?.reserve ?? 0), Math.max(prompt, maxTokens) + (tokens?.reserve ?? 0)]
        : [1 + (requests?.reserve ?? 0), prompt + (tokens?.reserve ?? 0), Math.max(1, output?.reserve ?? 0)];
    const at = grant(costs, needs);
    if (at === undefined) {
      const error =
        options.api === 'openai'
          ? { error: { message: 'the oracle refused: past maxWait', type: 'oracle', code: null } }
          : {
              type: 'error',
              error: { type: 'rate_limit_error', message: 'the oracle refused: past maxWait' },
            };
      return new Response(JSON.stringify(error), {
        status: 429,
        headers: { 'content-type': 'application/json', [ORACLE_REFUSAL]: 'refused', 'retry-after': '60' },
      });
    }
    const wait = at - now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    return globalThis.fetch(input, init);
  };
}
