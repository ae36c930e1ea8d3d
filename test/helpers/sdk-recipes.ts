/**
 * The recipes of docs/sdks.md as code: each SDK's client, wired to a rate-limited API at `origin`
 * the way the doc says. Run by test/sdk-recipes.test.ts and measured by bench/sdks.ts.
 */
import Anthropic from '@anthropic-ai/sdk';
import { GetObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { Octokit } from '@octokit/rest';
import { FetchHttpHandler } from '@smithy/fetch-http-handler';
import axios from 'axios';
import got from 'got';
import ky from 'ky';
import OpenAI from 'openai';
import { Agent, type Dispatcher, getGlobalDispatcher, setGlobalDispatcher } from 'undici';
import type { LimiterConfig } from '../../src/config/schema.js';
import { rateLimitedFetch } from '../../src/http/fetch.js';
import { adaptiveRateLimit } from '../../src/http/interceptor.js';
import { RateLimiterRegistry, wrap } from '../../src/index.js';

/** What a test or the bench changes in a recipe: the limiter's config (pacing), attempts. */
interface RecipeOptions {
  /** The config of the API's limiter. @default {} */
  limiter?: Omit<LimiterConfig, 'origins'>;
  /** The library's attempts per call. @default the recipe's */
  maxAttempts?: number;
  /** The fetch `rateLimitedFetch` wraps (to watch what it sends). @default globalThis.fetch */
  fetch?: typeof fetch;
}

/** One SDK's client made by its recipe. */
export interface RecipeClient {
  /** One API call: GET `path`. Resolves on a 2xx; rejects with the SDK's error otherwise. */
  call(path: string): Promise<void>;
  /** The registry of the limiters the recipe made (snapshots: cuts, throttles). */
  readonly registry: RateLimiterRegistry;
  close(): Promise<void>;
}

export interface Recipe {
  readonly name: string;
  /** Which layer retries a 429: the library (the SDK's retries off) or the SDK (`maxAttempts: 1`). */
  readonly retries: 'library' | 'sdk';
  /** The library's attempts per call in this recipe. */
  readonly maxAttempts: number;
  /** Attempts in all of a call the API keeps throttling: one layer's, never a product of two. */
  readonly attemptsPerCall: number;
  /** The status S3-like APIs throttle with; 429 for the rest. */
  readonly throttleStatus: number;
  make(origin: string, options?: RecipeOptions): RecipeClient;
}

const quiet = { debug() {}, info() {}, warn() {}, error() {} };

/** `rateLimitedFetch` as each fetch-based recipe sets it up: one limiter for the API's origin. */
function limitedFetch(origin: string, options: RecipeOptions, maxAttempts: number, throttleStatuses = [429]) {
  return rateLimitedFetch({
    ...(options.fetch !== undefined && { fetch: options.fetch }),
    limiters: { api: { origins: [origin], ...options.limiter } },
    maxAttempts: options.maxAttempts ?? maxAttempts,
    throttleStatuses,
    rejection: 'response',
  });
}

export const recipes: readonly Recipe[] = [
  {
    name: 'openai',
    retries: 'library',
    maxAttempts: 4,
    attemptsPerCall: 4,
    throttleStatus: 429,
    make(origin, options = {}) {
      const fetch = limitedFetch(origin, options, this.maxAttempts);
      const client = new OpenAI({
        apiKey: 'test',
        baseURL: `${origin}/v1`,
        fetch,
        maxRetries: 0,
        logger: quiet,
      });
      return {
        registry: fetch.registry,
        call: async (path) => {
          await client.get(path);
        },
        close: async () => fetch.close(),
      };
    },
  },
  {
    name: 'openai (the SDK retries)',
    retries: 'sdk',
    maxAttempts: 1,
    attemptsPerCall: 3, // the SDK's maxRetries 2, each through the limiter
    throttleStatus: 429,
    make(origin, options = {}) {
      const fetch = limitedFetch(origin, options, this.maxAttempts);
      const client = new OpenAI({
        apiKey: 'test',
        baseURL: `${origin}/v1`,
        fetch,
        maxRetries: 2,
        logger: quiet,
      });
      return {
        registry: fetch.registry,
        call: async (path) => {
          await client.get(path);
        },
        close: async () => fetch.close(),
      };
    },
  },
  {
    name: 'anthropic (global dispatcher)',
    retries: 'library',
    maxAttempts: 4,
    attemptsPerCall: 4,
    throttleStatus: 429,
    make(origin, options = {}) {
      // Node's own fetch, which the SDK uses, goes through the global dispatcher.
      const previous: Dispatcher = getGlobalDispatcher();
      const interceptor = adaptiveRateLimit({
        limiters: { api: { origins: [origin], ...options.limiter } },
        default: false,
        maxAttempts: options.maxAttempts ?? this.maxAttempts,
        rejection: 'response',
      });
      const agent = new Agent().compose(interceptor);
      setGlobalDispatcher(agent);
      const client = new Anthropic({ apiKey: 'test', baseURL: origin, maxRetries: 0, logger: quiet });
      return {
        registry: interceptor.registry,
        call: async (path) => {
          await client.get(path);
        },
        close: async () => {
          setGlobalDispatcher(previous);
          interceptor.close();
          await agent.close();
        },
      };
    },
  },
  {
    name: 'octokit',
    retries: 'library',
    maxAttempts: 4,
    attemptsPerCall: 4,
    throttleStatus: 429,
    make(origin, options = {}) {
      const fetch = limitedFetch(origin, options, this.maxAttempts);
      const octokit = new Octokit({ baseUrl: origin, request: { fetch }, log: quiet });
      return {
        registry: fetch.registry,
        call: async (path) => {
          await octokit.request(`GET ${path}`);
        },
        close: async () => fetch.close(),
      };
    },
  },
  {
    name: 'aws s3 (FetchHttpHandler)',
    retries: 'library',
    maxAttempts: 4,
    attemptsPerCall: 4,
    throttleStatus: 503,
    make(origin, options = {}) {
      const fetch = limitedFetch(origin, options, this.maxAttempts, [429, 503]);
      const s3 = new S3Client({
        region: 'us-east-1',
        endpoint: origin,
        forcePathStyle: true,
        credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
        maxAttempts: 1,
        requestHandler: new FetchHttpHandler({ customFetch: fetch }),
      });
      return {
        registry: fetch.registry,
        call: async (path) => {
          const [, bucket = 'bucket', ...key] = path.split('/');
          const object = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key.join('/') || 'key' }));
          await object.Body?.transformToString();
        },
        close: async () => {
          s3.destroy();
          fetch.close();
        },
      };
    },
  },
  {
    name: 'axios (fetch adapter)',
    retries: 'library',
    maxAttempts: 4,
    attemptsPerCall: 4,
    throttleStatus: 429,
    make(origin, options = {}) {
      const fetch = limitedFetch(origin, options, this.maxAttempts);
      const client = axios.create({ baseURL: origin, adapter: 'fetch', env: { fetch } });
      return {
        registry: fetch.registry,
        call: async (path) => {
          await client.get(path);
        },
        close: async () => fetch.close(),
      };
    },
  },
  {
    name: 'ky',
    retries: 'library',
    maxAttempts: 4,
    attemptsPerCall: 4,
    throttleStatus: 429,
    make(origin, options = {}) {
      const fetch = limitedFetch(origin, options, this.maxAttempts);
      const client = ky.create({ prefixUrl: origin, fetch, retry: 0, timeout: false });
      return {
        registry: fetch.registry,
        call: async (path) => {
          await client.get(path.replace(/^\//, '')).text();
        },
        close: async () => fetch.close(),
      };
    },
  },
  {
    name: 'got (wrap)',
    retries: 'library',
    maxAttempts: 4,
    attemptsPerCall: 4,
    throttleStatus: 429,
    make(origin, options = {}) {
      const registry = new RateLimiterRegistry({
        limiters: { api: { origins: [origin], ...options.limiter } },
        default: false,
      });
      const limiter = registry.limiterFor(origin);
      if (limiter === undefined) throw new Error('no limiter');
      const get = wrap(limiter, (path: string) => got(`${origin}${path}`, { retry: { limit: 0 } }).text(), {
        maxAttempts: options.maxAttempts ?? this.maxAttempts,
      });
      return {
        registry,
        call: async (path) => {
          await get(path);
        },
        close: async () => registry.close(),
      };
    },
  },
];
