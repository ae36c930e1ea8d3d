import PQueue from 'p-queue';
import { attachDiagnostics } from '../diagnostics.js';
import type { AdaptiveRateLimiter } from '../limiter/adaptive.js';
import type { Outcome } from '../limiter/types.js';
import { RateLimiterRegistry } from '../registry.js';
import { classifyResponse, type HeaderRecord, type ResponseRules } from './classify.js';
import type { OutgoingRequest, ResolvedInterceptorOptions } from './options.js';
import type { ResponseHeaders } from './retry-after.js';

/** Where a request goes: its limiter, and the queue that caps its requests in flight. */
export interface Route {
  limiter: AdaptiveRateLimiter;
  /** Present when the limiter's config sets `maxConcurrent`. */
  queue: PQueue | undefined;
}

/**
 * What the HTTP adapters share, built once per factory call: the registry, the concurrency
 * queues (one p-queue per limiter, made on first use), the units and the verdict of a response.
 * No limiter logic lives here.
 */
export class HttpRuntime {
  readonly registry: RateLimiterRegistry;
  readonly options: ResolvedInterceptorOptions;
  readonly #ownsRegistry: boolean;
  readonly #rules: ResponseRules;
  readonly #queues = new WeakMap<AdaptiveRateLimiter, PQueue>();

  constructor(options: ResolvedInterceptorOptions) {
    this.options = options;
    this.#ownsRegistry = options.registry === undefined;
    this.registry =
      options.registry ??
      new RateLimiterRegistry({
        ...(options.limiters !== undefined && { limiters: options.limiters }),
        ...(options.default !== undefined && { default: options.default }),
        ...(options.clock !== undefined && { clock: options.clock }),
      });
    this.#rules = {
      throttleStatuses: options.throttleStatuses,
      classify: options.classify,
      responseUnits: options.responseUnits,
    };
  }

  /** The limiter (and queue) for a normalized origin, or `undefined` to pass the request through. */
  route(origin: string): Route | undefined {
    const limiter = this.registry.limiterFor(origin);
    if (limiter === undefined) return undefined;
    attachDiagnostics(limiter);
    const maxConcurrent = this.registry.configFor(limiter.name)?.maxConcurrent;
    if (maxConcurrent === undefined) return { limiter, queue: undefined };
    let queue = this.#queues.get(limiter);
    if (queue === undefined) {
      queue = new PQueue({ concurrency: maxConcurrent });
      this.#queues.set(limiter, queue);
    } else if (queue.concurrency !== maxConcurrent) {
      queue.concurrency = maxConcurrent;
    }
    return { limiter, queue };
  }

  /** The units a request is charged: `units(request)`, default 1. @throws {TypeError} on a bad answer. */
  unitsFor(request: () => OutgoingRequest): number {
    const units = this.options.units;
    if (units === undefined) return 1;
    const r = request();
    const n = units(r);
    if (typeof n !== 'number' || !(n > 0) || !Number.isFinite(n)) {
      throw new TypeError(
        `units(${r.method} ${r.origin}${r.path}) returned ${String(n)}; expected a finite number > 0`,
      );
    }
    return n;
  }

  /** The outcome of a response; see {@link classifyResponse}. */
  classify(status: number, headers: ResponseHeaders, record: () => HeaderRecord): Outcome {
    return classifyResponse(status, headers, this.#rules, record);
  }

  /** Closes the registry if this runtime made it. */
  close(): void {
    if (this.#ownsRegistry) this.registry.close();
  }
}
