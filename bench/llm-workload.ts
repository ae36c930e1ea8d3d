/**
 * The LLM bench's workload, seeded: calls arriving as a Poisson process over the run, prompts of
 * heavy-tailed sizes (Pareto), `max_tokens` from a few usual values and completions below it, scaled
 * so that the tokens the calls are charged come to a chosen multiple of what the API refills over
 * the run (the bucket's first minute not counted).
 */
import { Prng } from '../src/simulate/prng.js';

export interface WorkloadOptions {
  seed: number;
  calls: number;
  /** Length of the arrivals, ms. */
  durationMs: number;
  /** Tokens per minute the token budget refills (OpenAI's tokens, Anthropic's input tokens). */
  tokensPerMinute: number;
  /** Tokens charged over the run / tokens refilled over it (2.1: the workload). */
  tokenFactor: number;
  /** How the calls are charged: OpenAI the larger of `max_tokens` and the prompt; Anthropic the prompt. */
  api: 'openai' | 'anthropic';
  /** Anthropic: output tokens per minute, and output generated / output refilled over the run. */
  outputTokensPerMinute?: number;
  outputFactor?: number;
}

export interface LlmCall {
  index: number;
  /** ms from the start of the run. */
  atMs: number;
  promptTokens: number;
  maxTokens: number;
  /** Output tokens the model generates for it (at most `maxTokens`). */
  completionTokens: number;
  /** The prompt: `c<index> ` then filler, `promptTokens` × 4 characters in all. */
  text: string;
}

/** Prompt sizes: Pareto with this shape (a heavy tail: the mean is 2.7 times the least)... */
const PARETO_ALPHA = 1.6;
/** ...capped at this share of a minute of the token budget, so that every call fits in the bucket. */
const CAP_SHARE = 0.2;
const MAX_TOKENS = [128, 256, 512] as const;

/** The calls of a run, in order of arrival. The same options give the same calls. */
export function workload(options: WorkloadOptions): LlmCall[] {
  const arrivals = new Prng(options.seed, 'llm-arrivals');
  const sizes = new Prng(options.seed, 'llm-prompts');
  const outputs = new Prng(options.seed, 'llm-outputs');
  const n = options.calls;
  const gaps = Array.from({ length: n + 1 }, () => arrivals.exponential(1));
  const total = gaps.reduce((a, b) => a + b, 0);
  const raw = Array.from({ length: n }, () => 1 / (1 - sizes.next()) ** (1 / PARETO_ALPHA));
  const maxTokens = Array.from({ length: n }, () => MAX_TOKENS[sizes.int(0, MAX_TOKENS.length - 1)] ?? 256);
  const completionShare = Array.from({ length: n }, () => Math.min(1, outputs.logNormal(0.35, 0.8)));
  const cap = CAP_SHARE * options.tokensPerMinute;
  const minutes = options.durationMs / 60_000;

  // Scale the prompts so the charged tokens come to tokenFactor × the refill (bisection on the scale).
  const target = options.tokenFactor * options.tokensPerMinute * minutes;
  const prompts = (scale: number) => raw.map((r) => Math.max(1, Math.min(cap, Math.round(r * scale))));
  const charged = (scale: number) =>
    prompts(scale).reduce(
      (sum, p, i) => sum + (options.api === 'openai' ? Math.max(p, maxTokens[i] ?? 0) : p),
      0,
    );
  let lo = 0;
  let hi = cap;
  for (let i = 0; i < 60; i++) {
    const mid = (lo + hi) / 2;
    if (charged(mid) < target) lo = mid;
    else hi = mid;
  }
  const promptTokens = prompts(hi);

  // Anthropic: completions scaled so that output comes to outputFactor × the output refill.
  let completions = maxTokens.map((m, i) => Math.max(1, Math.round(m * (completionShare[i] ?? 0.35))));
  if (options.api === 'anthropic' && options.outputTokensPerMinute !== undefined) {
    const wanted = (options.outputFactor ?? 1) * options.outputTokensPerMinute * minutes;
    const raw = completions;
    const sum = (scale: number) =>
      raw.reduce((s, c, i) => s + Math.max(1, Math.min(maxTokens[i] ?? 0, Math.round(c * scale))), 0);
    let low = 0;
    let high = 64;
    for (let i = 0; i < 60; i++) {
      const mid = (low + high) / 2;
      if (sum(mid) < wanted) low = mid;
      else high = mid;
    }
    completions = raw.map((c, i) => Math.max(1, Math.min(maxTokens[i] ?? 0, Math.round(c * high))));
  }

  let at = 0;
  return Array.from({ length: n }, (_, index) => {
    at += gaps[index] ?? 0;
    const tokens = promptTokens[index] ?? 1;
    const head = `c${index} `;
    return {
      index,
      atMs: (at / total) * options.durationMs,
      promptTokens: tokens,
      maxTokens: maxTokens[index] ?? 256,
      completionTokens: completions[index] ?? 1,
      text: head + 'x'.repeat(Math.max(0, tokens * 4 - head.length)),
    };
  });
}

/** The call a prompt belongs to (its `c<index> ` head), or undefined. */
export function callIndexOf(body: Readonly<Record<string, unknown>>): number | undefined {
  const messages = body.messages;
  if (!Array.isArray(messages)) return undefined;
  const first = messages[0] as { content?: unknown } | undefined;
  const text = typeof first?.content === 'string' ? first.content : '';
  const match = /^c(\d+) /.exec(text);
  return match === null ? undefined : Number(match[1]);
}

/** Quantile `q` (0 to 1) of `values` (nearest rank), NaN when empty. */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? Number.NaN;
}
