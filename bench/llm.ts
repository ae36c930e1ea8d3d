/**
 * `npm run bench -- llm`: LLM API users' calls through the vendors' own SDKs (openai,
 * @anthropic-ai/sdk) against local mocks of their APIs (test/helpers/llm-mock.ts) that meter
 * requests and tokens per model as the vendors document; each row against a fresh server, the rows
 * of one API side by side in one run, with an oracle that knows the limits and every call's cost.
 * Then the time to the first byte of a stream, with and without the library. See docs/bench.md.
 *
 *   npm run bench -- llm                       both APIs, 2 minutes of calls each (about 7 minutes)
 *   npm run bench -- llm --duration=30         every time and rate scaled to a 30 s run (a trial)
 *   npm run bench -- llm --api=openai          one API
 *   npm run bench -- llm --rows=oracle,preset  the rows whose label has one of these words
 *   npm run bench -- llm --serial              one row at a time
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { headersOfError } from '../src/wrap/sdk-errors.js';
import { type LlmMock, type LlmMockOptions, startLlmMock } from '../test/helpers/llm-mock.js';
import { ORACLE_REFUSAL, oracleFetch } from './llm-oracle.js';
import { callIndexOf, type LlmCall, quantile, workload } from './llm-workload.js';

type Api = 'openai' | 'anthropic';

const args = process.argv.slice(2);
const flag = (name: string) => args.find((a) => a.startsWith(`--${name}=`))?.split('=')[1];
/** Seconds of arrivals; every time and rate of the run is scaled by 120 / this. */
const DURATION_S = Number(flag('duration') ?? 120);
const SCALE = 120 / DURATION_S;
const SEED = Number(flag('seed') ?? 19);
const CALLS = Number(flag('calls') ?? 281);
const TOKEN_FACTOR = Number(flag('tokens') ?? 2.1);
const OUTPUT_FACTOR = Number(flag('output') ?? 1);
const APIS: Api[] = flag('api') === undefined ? ['openai', 'anthropic'] : [flag('api') as Api];
const ROW_FILTER = flag('rows')?.split(',');
const SERIAL = args.includes('--serial');
const MODEL = { openai: 'gpt-4o', anthropic: 'claude-sonnet-5-5' } as const;

/** The API's limits per minute at full scale: the issue's 500 requests and 40,000 tokens; Anthropic's output 8,000. */
const LIMITS = {
  requestsPerMinute: 500,
  tokensPerMinute: 40_000,
  inputTokensPerMinute: 40_000,
  outputTokensPerMinute: 8_000,
};
const scaledLimits = {
  requestsPerMinute: LIMITS.requestsPerMinute * SCALE,
  tokensPerMinute: LIMITS.tokensPerMinute * SCALE,
  inputTokensPerMinute: LIMITS.inputTokensPerMinute * SCALE,
  outputTokensPerMinute: LIMITS.outputTokensPerMinute * SCALE,
};
/** A bucket holds a minute of its limit at full scale (the same tokens at every scale). */
const CAPACITY_S = 60 / SCALE;
const MAX_WAIT_MS = 60_000 / SCALE;
/** The oracle's reserve: 1.5 s of every budget. */
const RESERVE_MS = 1_500 / SCALE;
/** The model answers: the first token after 300 ms, then 2 ms a token. */
const FIRST_TOKEN_MS = 300 / SCALE;
const PER_TOKEN_MS = 2 / SCALE;
/** A row is cut off this long after its last arrival. */
const TAIL_MS = MAX_WAIT_MS + 60_000 / SCALE;

const quiet = { debug() {}, info() {}, warn() {}, error() {} };

type Ending = 'ok' | 'refused' | 'server-429' | 'other';

interface Client {
  call(call: LlmCall, stream?: boolean): Promise<{ firstByteMs?: number }>;
  close(): void;
}

interface RowSpec {
  label: string;
  /** A client against `origin`, or the reason the row cannot run in this build. */
  make(origin: string, api: Api, calls: readonly LlmCall[]): Client | string;
}

function sdkClient(api: Api, origin: string, fetch: typeof globalThis.fetch | undefined, maxRetries: number) {
  const options = { apiKey: 'test', maxRetries, logger: quiet, ...(fetch !== undefined && { fetch }) };
  if (api === 'openai') {
    const client = new OpenAI({ ...options, baseURL: `${origin}/v1` });
    return async (call: LlmCall, stream = false) => {
      const body = {
        model: MODEL.openai,
        messages: [{ role: 'user' as const, content: call.text }],
        max_tokens: call.maxTokens,
      };
      if (!stream) {
        await client.chat.completions.create(body);
        return {};
      }
      const start = performance.now();
      let firstByteMs: number | undefined;
      const chunks = await client.chat.completions.create({
        ...body,
        stream: true,
        stream_options: { include_usage: true },
      });
      for await (const chunk of chunks)
        if (chunk.choices[0]?.delta.content) firstByteMs ??= performance.now() - start;
      return { firstByteMs };
    };
  }
  const client = new Anthropic({ ...options, baseURL: origin });
  return async (call: LlmCall, stream = false) => {
    const body = {
      model: MODEL.anthropic,
      max_tokens: call.maxTokens,
      messages: [{ role: 'user' as const, content: call.text }],
    };
    if (!stream) {
      await client.messages.create(body);
      return {};
    }
    const start = performance.now();
    let firstByteMs: number | undefined;
    const events = await client.messages.create({ ...body, stream: true });
    for await (const event of events)
      if (event.type === 'content_block_delta') firstByteMs ??= performance.now() - start;
    return { firstByteMs };
  };
}

/** A row through `rateLimitedFetch` with this limiter config; "unavailable" when this build rejects it. */
function limitedRow(label: string, limiter: (api: Api) => Record<string, unknown>): RowSpec {
  return {
    label,
    make(origin, api) {
      let fetch: ReturnType<typeof rateLimitedFetch>;
      try {
        fetch = rateLimitedFetch({
          limiters: { [api]: { origins: [origin], maxWait: MAX_WAIT_MS, ...limiter(api) } },
          rejection: 'response',
        } as Parameters<typeof rateLimitedFetch>[0]);
      } catch (error) {
        const message = (error as Error).message.replace(/\s+/g, ' ');
        return `unavailable in this build (${(/- ([^(]*)/.exec(message)?.[1] ?? message).trim().slice(0, 100)})`;
      }
      return { call: sdkClient(api, origin, fetch, 0), close: () => fetch.close() };
    },
  };
}

const ROWS: readonly RowSpec[] = [
  {
    label: 'the SDK alone (2 retries)',
    make: (origin, api) => ({ call: sdkClient(api, origin, undefined, 2), close() {} }),
  },
  limitedRow('the requests-only recipe (learns from 429s)', (api) =>
    api === 'openai' ? { controller: 'cubic' } : {},
  ),
  limitedRow("that recipe + the vendor's header profile", (api) =>
    api === 'openai' ? { controller: 'cubic', headers: 'openai' } : { headers: 'anthropic' },
  ),
  limitedRow('the preset (api)', (api) => ({ api })),
  {
    label: 'oracle (both buckets, FIFO, 60 s cap, 1.5 s reserve)',
    make: (origin, api, calls) => {
      const fetch = oracleFetch({
        api,
        limits: scaledLimits,
        capacitySeconds: CAPACITY_S,
        reserveMs: RESERVE_MS,
        maxWaitMs: MAX_WAIT_MS,
        calls,
      });
      return { call: sdkClient(api, origin, fetch, 0), close() {} };
    },
  },
];

function endingOf(error: unknown): { ending: Ending; detail?: string } {
  const status = (error as { status?: unknown }).status;
  const headers = headersOfError(error) as { get?: (name: string) => string | null } | undefined;
  const header = (name: string) => (typeof headers?.get === 'function' ? headers.get(name) : null);
  if (status === 429) {
    if (header(ORACLE_REFUSAL) !== null) return { ending: 'refused' };
    const refusal = header('x-adaptive-rate-limit');
    if (refusal !== null)
      return refusal.includes('max-wait') ? { ending: 'refused' } : { ending: 'other', detail: refusal };
    return { ending: 'server-429' };
  }
  return { ending: 'other', detail: `${(error as Error).name}: ${(error as Error).message}`.slice(0, 120) };
}

function mockOptions(api: Api, calls: readonly LlmCall[], limits = scaledLimits): LlmMockOptions {
  return {
    api,
    limits,
    capacitySeconds: CAPACITY_S,
    firstTokenMs: FIRST_TOKEN_MS,
    perTokenMs: PER_TOKEN_MS,
    completionTokens: (body) => calls[callIndexOf(body) ?? -1]?.completionTokens ?? 64,
  };
}

interface RowResult {
  label: string;
  unavailable?: string;
  served: number;
  refused: number;
  server429s: number;
  failed: number;
  requests: number;
  p50: number;
  p95: number;
  details: string[];
}

async function runRow(spec: RowSpec, api: Api, calls: readonly LlmCall[]): Promise<RowResult> {
  const mock: LlmMock = await startLlmMock(mockOptions(api, calls));
  const client = spec.make(mock.origin, api, calls);
  if (typeof client === 'string') {
    await mock.close();
    return {
      label: spec.label,
      unavailable: client,
      served: 0,
      refused: 0,
      server429s: 0,
      failed: 0,
      requests: 0,
      p50: 0,
      p95: 0,
      details: [],
    };
  }
  const start = performance.now();
  const results: Promise<{ ending: Ending; ms: number; detail?: string }>[] = [];
  for (const call of calls) {
    const due = start + call.atMs;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    const t0 = performance.now();
    results.push(
      client.call(call).then(
        () => ({ ending: 'ok' as const, ms: performance.now() - t0 }),
        (error: unknown) => ({ ...endingOf(error), ms: performance.now() - t0 }),
      ),
    );
  }
  let timer: NodeJS.Timeout | undefined;
  const cutOff = new Promise<'cut'>((resolve) => {
    timer = setTimeout(() => resolve('cut'), TAIL_MS);
  });
  const settled = await Promise.race([Promise.all(results), cutOff]);
  clearTimeout(timer);
  client.close();
  const server429s = mock.throttled;
  const requests = mock.hits.length;
  if (process.env.ARL_BENCH_TRACE === '1') trace(spec.label, api, mock, start);
  await mock.close();
  const ended = settled === 'cut' ? [] : settled;
  const okMs = ended.filter((r) => r.ending === 'ok').map((r) => r.ms);
  const count = (e: Ending) => ended.filter((r) => r.ending === e).length;
  return {
    label: spec.label,
    served: count('ok'),
    refused: count('refused'),
    server429s,
    failed: count('server-429') + count('other') + (settled === 'cut' ? calls.length : 0),
    requests,
    p50: quantile(okMs, 0.5),
    p95: quantile(okMs, 0.95),
    details: [...new Set(ended.filter((r) => r.detail !== undefined).map((r) => r.detail as string))].slice(
      0,
      3,
    ),
  };
}

/** `ARL_BENCH_TRACE=1`: a row's admitted tokens (OpenAI's charge, Anthropic's input) and 429s per 10 s of the run, on stderr. */
function trace(label: string, api: Api, mock: LlmMock, start: number): void {
  const step = 10_000 / SCALE;
  const tokens: number[] = [];
  const refused: number[] = [];
  for (const hit of mock.hits) {
    const i = Math.max(0, Math.floor((hit.at - start) / step));
    tokens[i] = (tokens[i] ?? 0) + hit.charged;
    if (hit.status === 429) refused[i] = (refused[i] ?? 0) + 1;
  }
  const cells = Array.from(
    tokens,
    (t, i) => `${Math.round((t ?? 0) / 100) / 10}k${refused[i] ? `/${refused[i]}` : ''}`,
  );
  console.error(
    `${api} ${label}: tokens admitted (thousands) per ${step / 1000} s [/429s]: ${cells.join(' ')}`,
  );
}

const seconds = (ms: number) => (Number.isFinite(ms) ? `${(ms / 1000).toFixed(1)} s` : '-');

function printRows(api: Api, calls: readonly LlmCall[], rows: readonly RowResult[]): void {
  const oracle = rows.find((r) => r.label.startsWith('oracle'));
  console.log(`\n${api}: ${calls.length} calls (each on a fresh server)\n`);
  console.log(
    '| setup | calls served | refused at maxWait | failed otherwise | server 429s | requests | p50 per served call | p95 |',
  );
  console.log('| --- | --: | --: | --: | --: | --: | --: | --: |');
  for (const r of rows) {
    if (r.unavailable !== undefined) {
      console.log(`| ${r.label} | ${r.unavailable} | | | | | | |`);
      continue;
    }
    console.log(
      `| ${r.label} | ${r.served} | ${r.refused} | ${r.failed} | ${r.server429s} | ${r.requests} | ${seconds(r.p50)} | ${seconds(r.p95)} |`,
    );
  }
  for (const r of rows) for (const d of r.details) console.log(`  ${r.label}: ${d}`);
  const preset = rows.find((r) => r.label.startsWith('the preset'));
  if (oracle === undefined || preset === undefined || preset.unavailable !== undefined) {
    console.log('targets: the preset row did not run');
    return;
  }
  const target = (what: string, ok: boolean, detail: string) =>
    console.log(`${ok ? 'target met   ' : 'target MISSED'}  ${api} ${what}: ${detail}`);
  target(
    'calls served >= 97 % of the oracle',
    preset.served >= 0.97 * oracle.served,
    `${preset.served} of the oracle's ${oracle.served} (${((100 * preset.served) / Math.max(1, oracle.served)).toFixed(1)} %)`,
  );
  target('server 429s <= 5', preset.server429s <= 5, String(preset.server429s));
  target('failures but maxWait refusals = 0', preset.failed === 0, String(preset.failed));
  target(
    'p50 within 1.5x the oracle',
    preset.p50 <= 1.5 * oracle.p50,
    `${seconds(preset.p50)} vs ${seconds(oracle.p50)} (${(preset.p50 / oracle.p50).toFixed(2)}x)`,
  );
}

/** Time to the first content of a stream, through the SDK alone and through each library row, interleaved. */
async function streamFirstByte(api: Api): Promise<void> {
  const rounds = 40;
  const calls = workload({
    seed: SEED,
    calls: rounds,
    durationMs: 60_000,
    tokensPerMinute: 10_000,
    tokenFactor: 0.2,
    api,
  });
  // Limits far above the load: only the path is measured, no wait in any limiter.
  const big = {
    requestsPerMinute: 1e6,
    tokensPerMinute: 1e9,
    inputTokensPerMinute: 1e9,
    outputTokensPerMinute: 1e9,
  };
  const setups = [ROWS[0], ROWS[1], ROWS[3]].filter((r): r is RowSpec => r !== undefined);
  const results = new Map<string, number[]>();
  const mocks: LlmMock[] = [];
  const clients: [string, Client][] = [];
  for (const spec of setups) {
    const mock = await startLlmMock({ ...mockOptions(api, calls, big), firstTokenMs: 20, perTokenMs: 0.05 });
    mocks.push(mock);
    const client = spec.make(mock.origin, api, calls);
    if (typeof client === 'string') console.log(`  ${spec.label}: ${client}`);
    else clients.push([spec.label, client]);
  }
  for (const call of calls) {
    for (const [label, client] of clients) {
      const { firstByteMs } = await client.call(call, true);
      if (firstByteMs !== undefined) results.set(label, [...(results.get(label) ?? []), firstByteMs]);
    }
  }
  for (const [, client] of clients) client.close();
  await Promise.all(mocks.map((m) => m.close()));
  const alone = quantile(results.get(setups[0]?.label ?? '') ?? [], 0.5);
  console.log(
    `\n${api}: a stream's time to its first content, ${rounds} streams each, interleaved (the server sends it 20 ms after the request)\n`,
  );
  console.log('| setup | p50 | p90 | p50 - the SDK alone |');
  console.log('| --- | --: | --: | --: |');
  for (const [label] of clients) {
    const values = results.get(label) ?? [];
    const p50 = quantile(values, 0.5);
    console.log(
      `| ${label} | ${p50.toFixed(1)} ms | ${quantile(values, 0.9).toFixed(1)} ms | ${(p50 - alone).toFixed(1)} ms |`,
    );
  }
  const preset = clients.find(([label]) => label.startsWith('the preset'));
  if (preset !== undefined) {
    const delta = quantile(results.get(preset[0]) ?? [], 0.5) - alone;
    console.log(
      `${delta <= 5 ? 'target met   ' : 'target MISSED'}  ${api} stream first byte within 5 ms of no limiter: ${delta.toFixed(1)} ms`,
    );
  }
}

export async function llmSuite(): Promise<void> {
  console.log(
    `limits ${LIMITS.requestsPerMinute} requests/min, ${LIMITS.tokensPerMinute} tokens/min (Anthropic: input ${LIMITS.inputTokensPerMinute}, output ${LIMITS.outputTokensPerMinute}); ${CALLS} calls in ${DURATION_S} s at ${TOKEN_FACTOR}x the tokens (Anthropic output ${OUTPUT_FACTOR}x), seed ${SEED}; maxWait ${MAX_WAIT_MS / 1000} s` +
      (SCALE === 1
        ? ''
        : `; every time and rate scaled by ${SCALE.toFixed(2)} (limits per minute x${SCALE.toFixed(2)}, buckets of ${CAPACITY_S.toFixed(0)} s)`),
  );
  const rows = ROWS.filter(
    (r) =>
      ROW_FILTER === undefined || r.label.startsWith('oracle') || ROW_FILTER.some((w) => r.label.includes(w)),
  );
  for (const api of APIS) {
    // The calls at full scale (the same sizes at every --duration), their arrivals scaled.
    const calls = workload({
      seed: SEED,
      calls: CALLS,
      durationMs: 120_000,
      tokensPerMinute: api === 'openai' ? LIMITS.tokensPerMinute : LIMITS.inputTokensPerMinute,
      tokenFactor: TOKEN_FACTOR,
      api,
      outputTokensPerMinute: LIMITS.outputTokensPerMinute,
      outputFactor: OUTPUT_FACTOR,
    }).map((call) => ({ ...call, atMs: call.atMs / SCALE }));
    const results: RowResult[] = [];
    if (SERIAL) for (const row of rows) results.push(await runRow(row, api, calls));
    else results.push(...(await Promise.all(rows.map((row) => runRow(row, api, calls)))));
    printRows(api, calls, results);
    await streamFirstByte(api);
  }
}
