import type { Dispatcher } from 'undici';

type Controller = Dispatcher.DispatchController;

/** Header fields as undici's `onResponseStart` gives them: lower-case names, repeated ones as arrays. */
export type HeaderFields =
  | Readonly<Record<string, string | readonly string[] | number | undefined>>
  | null
  | undefined;

/**
 * Header fields as raw `[name, value, name, value, ...]` Buffers (latin1, as on the wire); a field
 * with several values (`set-cookie`) becomes several pairs.
 */
export function rawPairs(headers: HeaderFields): Buffer[] {
  const raw: Buffer[] = [];
  if (headers == null) return raw;
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    const key = Buffer.from(name, 'latin1');
    for (const v of Array.isArray(value) ? value : [value]) raw.push(key, Buffer.from(String(v), 'latin1'));
  }
  return raw;
}

/**
 * `controller` as it is, but for its raw headers: those of `headers`. For a response whose headers
 * the library changed or made (a local 429, `x-should-retry: false` on a spend cap): undici 8's
 * `fetch`, and the wrapper its `setGlobalDispatcher` puts before Node's own `fetch`, read
 * `controller.rawHeaders` in place of the headers object when it is there. `trailers: 'none'`
 * gives no raw trailers (a response made here has none); otherwise they are the controller's.
 */
export function withRawHeaders(
  controller: Controller,
  headers: HeaderFields,
  trailers: 'none' | 'passed' = 'passed',
): Controller {
  const rawHeaders = rawPairs(headers);
  return {
    get aborted() {
      return controller.aborted;
    },
    get paused() {
      return controller.paused;
    },
    get reason() {
      return controller.reason;
    },
    rawHeaders,
    get rawTrailers() {
      return trailers === 'none' ? [] : controller.rawTrailers;
    },
    abort: (reason: Error) => controller.abort(reason),
    pause: () => controller.pause(),
    resume: () => controller.resume(),
  };
}
