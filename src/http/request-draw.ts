import type { Dispatcher } from 'undici';
import { type HeaderRecord, headerRecord } from '../headers.js';
import type { Costs } from '../limiter/budgets.js';
import type { Attempt } from './attempt.js';
import { usageTap } from './llm-tap.js';
import type { OutgoingRequest } from './options.js';
import { type DecodedBody, withLazyBody } from './outgoing-body.js';
import type { HttpRuntime, Route } from './runtime.js';

/** A request about to draw from its limiter: what {@link findDraw} reads and sets. */
export interface DrawingRequest {
  readonly runtime: HttpRuntime;
  readonly controller: { readonly attempt: Attempt | undefined };
  /** The origin's route; set to its partition's. */
  route: Route;
  /** The caller's handler; set behind an LLM API's usage tap. */
  handler: Dispatcher.DispatchHandler;
  /** Units charged for each attempt (1 unless the options' `units` says). */
  units: number;
  /** Units drawn from the limiter's other budgets (an LLM API's tokens). */
  costs: Costs | undefined;
  /** What an LLM API's refusal is judged by: the attempt's held 429 body as JSON. */
  refusalBody(attempt: Attempt | undefined): unknown;
}

/**
 * Finds what `request` draws before its first attempt, and sets it: the route of its partition
 * (when the origin's limiter has a `partition`), its units (the options' `units`), and, for an
 * LLM API's limiter, the other budgets' costs estimated from the body, with the tap that corrects
 * them from the answer's `usage` in front of the caller's handler. The request as these
 * callbacks see it is made once, on first need, and is not kept; its body is `decoded` when it was
 * sent compressed (see `decodingOf`). `record`: the headers' record, when the caller made it already.
 */
export function findDraw(
  request: DrawingRequest,
  origin: string,
  opts: Dispatcher.DispatchOptions,
  decoded?: DecodedBody,
  record?: HeaderRecord,
): void {
  const { runtime } = request;
  if (
    request.route.partitioner === undefined &&
    runtime.options.units === undefined &&
    request.route.llm === undefined
  )
    return;
  let outgoing: OutgoingRequest | undefined;
  const view = (): OutgoingRequest => {
    if (outgoing === undefined) {
      const { method, path, headers, body } = opts;
      const made = record ?? headerRecord(headers);
      outgoing = withLazyBody({ origin, method, path, headers: made }, body, made, decoded);
    }
    return outgoing;
  };
  if (request.route.partitioner !== undefined) {
    request.route = runtime.partitionRoute(origin, request.route, { headers: opts.headers, request: view });
  }
  if (runtime.options.units !== undefined) request.units = runtime.unitsFor(view);
  if (request.route.llm === undefined) return;
  const estimate = runtime.estimate(request.route, view);
  if (estimate === undefined) return;
  request.costs = estimate.costs;
  const route = request.route;
  request.handler = usageTap(
    request.handler,
    route,
    estimate,
    runtime.options.rejection,
    () => request.refusalBody(request.controller.attempt),
    () => runtime.hold(route),
  );
}
