/**
 * Runs the bench suites in order and prints their tables.
 *
 *   npm run bench              every suite
 *   npm run bench -- engine    only the named suites
 *
 * Run node with `--expose-gc` so the memory figures are exact.
 */
import { cpus } from 'node:os';
import { hasGc, nowMs } from './harness.js';

interface Suite {
  readonly name: string;
  readonly description: string;
  /** Loaded on demand, so running one suite does not import the others' dependencies. */
  readonly run: () => Promise<void>;
}

/** Every suite, in the order `npm run bench` runs them. Add a suite here. */
const suites: readonly Suite[] = [
  {
    name: 'engine',
    description: 'limiter engine vs p-throttle, limiter, p-queue, bottleneck: sync, async, drain, memory',
    run: async () => (await import('./engine.js')).run(),
  },
  {
    name: 'redis',
    description: 'the Redis shared budget against the local limiter',
    run: async () => (await import('./redis.js')).redisSuite(),
  },
  {
    name: 'origins',
    description: 'hostile origins that answer 429: heap and time per new origin at 1k, 10k, 100k',
    run: async () => (await import('./origins.js')).originsSuite(),
  },
  {
    name: 'http',
    description: 'requests/s and latency through the undici interceptor vs a bare Agent (limits never bind)',
    run: async () => (await import('./http.js')).httpSuite(),
  },
  {
    name: 'cold',
    description:
      'requests/s from a cold start: the default config (slow start) vs a pass-through interceptor',
    run: async () => (await import('./cold-start.js')).coldStartSuite(),
  },
  {
    name: 'control',
    description: 'finding the quota of real servers (quota server, nginx), side by side with the AWS SDK',
    run: async () => (await import('./control.js')).controlSuite(),
  },
  {
    name: 'crowd',
    description:
      'a crowd of short-lived processes against a 40/min bucket with bare 429s: the library beside backoff, ATB and AWS',
    run: async () => (await import('./crowd.js')).crowdSuite(),
  },
  {
    name: 'quota-headers',
    description:
      'announced state read as what it is: a GitHub-like hour (40 calls at once), token buckets announcing their state',
    run: async () => (await import('./quota-headers-suite.js')).quotaHeadersSuite(),
  },
  {
    name: 'llm',
    description:
      'LLM calls through the openai and Anthropic SDKs against mocks metering requests and tokens: SDK alone, recipe, preset, oracle',
    run: async () => (await import('./llm.js')).llmSuite(),
  },
];

function header(): void {
  const cpu = cpus();
  console.log('adaptive-rate-limit bench');
  console.log(`node ${process.version} (${process.platform}/${process.arch})`);
  console.log(`cpu  ${cpu[0]?.model ?? 'unknown'} × ${cpu.length}`);
  console.log(`date ${new Date().toISOString()}`);
  console.log(`gc   ${hasGc ? 'exposed' : 'missing (memory figures are noise; run node with --expose-gc)'}`);
}

async function main(): Promise<void> {
  const wanted = process.argv.slice(2).filter((arg) => !arg.startsWith('-'));
  const unknown = wanted.filter((name) => !suites.some((s) => s.name === name));
  if (unknown.length > 0) {
    const known = suites.map((s) => `  ${s.name.padEnd(8)} ${s.description}`).join('\n');
    console.error(`unknown suite: ${unknown.join(', ')}\navailable suites:\n${known}`);
    process.exitCode = 2;
    return;
  }
  const selected = wanted.length === 0 ? suites : suites.filter((s) => wanted.includes(s.name));
  header();
  for (const suite of selected) {
    const start = nowMs();
    console.log(`\n== ${suite.name}: ${suite.description}`);
    await suite.run();
    console.log(`\n(${suite.name} took ${((nowMs() - start) / 1000).toFixed(1)} s)`);
  }
}

await main();
