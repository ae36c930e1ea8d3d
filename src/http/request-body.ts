import { AdaptiveRateLimitError } from '../errors.js';

/**
 * The request body of each attempt. A body that can be read again (a string, bytes, a Blob,
 * FormData) is sent as it is every time. A one-shot body (a Node `Readable`, a web
 * `ReadableStream`, an iterable or async iterable: Node's `fetch` always sends an async
 * generator) is kept while it is sent, up to `maxBytes`, so that a throttled attempt can be sent
 * again with the same bytes. A longer body is not kept, and then {@link AttemptBodies.replayable}
 * is `false`: the request is not retried, and no attempt is ever sent with a short or empty body.
 */
export interface AttemptBodies {
  /** The body to send with the next attempt. */
  next(): unknown;
  /** Whether another attempt can be sent with the whole body. */
  readonly replayable: boolean;
  /** Whether the body has been read to its end (or needs no reading). */
  readonly complete: boolean;
  /** The request is over: releases a one-shot source that was not read to its end. Idempotent. */
  close(): void;
}

/** Bodies kept in memory by type, recognized by tag as undici does (its FormData is not Node's). */
const IN_MEMORY_TAGS = new Set([
  'Blob',
  'File',
  'FormData',
  'URLSearchParams',
  'ArrayBuffer',
  'SharedArrayBuffer',
]);

/** A body that undici (and fetch) can send any number of times. */
export function isReplayableBody(body: unknown): boolean {
  return (
    body == null ||
    typeof body === 'string' ||
    ArrayBuffer.isView(body) ||
    (typeof body === 'object' &&
      IN_MEMORY_TAGS.has((body as { [Symbol.toStringTag]?: string })[Symbol.toStringTag] ?? ''))
  );
}

/** The bodies for the attempts of one request; see {@link AttemptBodies}. */
export function attemptBodies(body: unknown, maxBytes: number): AttemptBodies {
  return isReplayableBody(body) ? new StaticBodies(body) : new TeedBodies(body, maxBytes);
}

class StaticBodies implements AttemptBodies {
  readonly replayable = true;
  readonly complete = true;

  constructor(readonly body: unknown) {}

  next(): unknown {
    return this.body;
  }

  close(): void {}
}

/**
 * Thrown into an attempt whose body needs bytes no longer kept: the body passed
 * `maxReplayBodyBytes` after the retry was handed to the dispatcher ({@link AttemptBodies.replayable}
 * prevents it before). `sentNothing`: the attempt yielded none of its body's bytes, so it reached
 * the server as no request (see {@link bodyNeverSent}).
 */
class RequestBodyNotKeptError extends AdaptiveRateLimitError {
  readonly sentNothing: boolean;

  constructor(sentNothing: boolean) {
    super(
      'ERR_REQUEST_BODY_NOT_KEPT',
      'request body is longer than maxReplayBodyBytes and was not kept: it cannot be sent again',
    );
    this.name = 'RequestBodyNotKeptError';
    this.sentNothing = sentNothing;
  }
}

/**
 * Whether `error` (or its `cause`: `fetch` wraps it) is an attempt's body failing before any of
 * its bytes was yielded because the body passed `maxReplayBodyBytes` meanwhile: that attempt is
 * not sent, and the loop gives the caller the 429 it kept.
 */
export function bodyNeverSent(error: unknown): boolean {
  const found =
    error instanceof RequestBodyNotKeptError
      ? error
      : error instanceof Error && error.cause instanceof RequestBodyNotKeptError
        ? error.cause
        : undefined;
  return found?.sentNothing === true;
}

/**
 * A one-shot source read once, shared by the attempts: each attempt gets a reader that yields
 * the kept chunks, then pulls new ones from the source (one pull at a time, whichever reader
 * asks first), so a retry can start before an earlier attempt finished sending.
 */
class TeedBodies implements AttemptBodies {
  readonly #source: unknown;
  readonly #maxBytes: number;
  #iterator: AsyncIterator<unknown> | Iterator<unknown> | undefined;
  /** Kept chunks; `#chunks[0]` is chunk number `#first`. */
  #chunks: Buffer[] = [];
  #first = 0;
  /** Chunks read from the source so far. */
  #count = 0;
  #bytes = 0;
  #overflow = false;
  #done = false;
  #closed = false;
  #pull: { index: number; promise: Promise<Buffer | undefined> } | undefined;

  constructor(source: unknown, maxBytes: number) {
    this.#source = source;
    this.#maxBytes = maxBytes;
  }

  get replayable(): boolean {
    return !this.#overflow && !this.#closed;
  }

  get complete(): boolean {
    return this.#done;
  }

  next(): unknown {
    // Read to its end and kept whole: send bytes, which also gives undici a content-length.
    if (this.#done && !this.#overflow) return Buffer.concat(this.#chunks, this.#bytes);
    return this.#reader();
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#chunks = [];
    // A source never read stays the caller's, as undici leaves it; one read in part is ended
    // (a Readable destroyed, a web stream cancelled, a generator finished).
    if (this.#done || this.#iterator === undefined) return;
    try {
      Promise.resolve(this.#iterator.return?.()).catch(() => {});
    } catch {
      // Releasing is best effort: the request is over either way.
    }
  }

  async *#reader(): AsyncGenerator<Buffer, void, undefined> {
    for (let i = 0; ; i++) {
      let chunk: Buffer | undefined;
      if (i < this.#count) {
        chunk = this.#chunks[i - this.#first];
        if (i < this.#first || chunk === undefined) throw new RequestBodyNotKeptError(i === 0);
      } else {
        chunk = await this.#read(i);
        if (chunk === undefined) return;
      }
      yield chunk;
    }
  }

  /** Chunk number `index` (the next one) from the source, or `undefined` at its end. */
  #read(index: number): Promise<Buffer | undefined> {
    if (this.#pull?.index === index) return this.#pull.promise;
    if (this.#done) return Promise.resolve(undefined);
    const promise = this.#pullNext().finally(() => {
      if (this.#pull?.promise === promise) this.#pull = undefined;
    });
    this.#pull = { index, promise };
    return promise;
  }

  async #pullNext(): Promise<Buffer | undefined> {
    if (this.#closed) throw new Error('request body released: the request is over');
    this.#iterator ??= iteratorOf(this.#source);
    const result = await this.#iterator.next();
    if (result.done) {
      this.#done = true;
      return undefined;
    }
    const chunk = toBuffer(result.value);
    this.#count++;
    if (!this.#overflow) {
      this.#bytes += chunk.byteLength;
      if (this.#bytes > this.#maxBytes) {
        this.#overflow = true;
        this.#chunks = [];
        this.#first = this.#count;
      } else {
        this.#chunks.push(chunk);
      }
    } else {
      this.#first = this.#count;
    }
    return chunk;
  }
}

function iteratorOf(source: unknown): AsyncIterator<unknown> | Iterator<unknown> {
  const s = source as Partial<AsyncIterable<unknown> & Iterable<unknown>> | null;
  const asyncIterator = s?.[Symbol.asyncIterator];
  if (typeof asyncIterator === 'function') return asyncIterator.call(s);
  const iterator = s?.[Symbol.iterator];
  if (typeof iterator === 'function') return iterator.call(s);
  const stream = source as Partial<ReadableStream<unknown>> | null;
  if (typeof stream?.getReader === 'function') {
    // A web stream without async iteration (Safari).
    const reader = stream.getReader();
    return {
      next: () => reader.read() as Promise<IteratorResult<unknown>>,
      return: async () => {
        await reader.cancel();
        return { done: true, value: undefined };
      },
    };
  }
  throw new TypeError(
    'request body must be a string, bytes, a Blob, FormData, a Readable, a ReadableStream or an (async) iterable',
  );
}

function toBuffer(chunk: unknown): Buffer {
  if (Buffer.isBuffer(chunk)) return chunk;
  if (typeof chunk === 'string') return Buffer.from(chunk);
  if (ArrayBuffer.isView(chunk)) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  if (chunk instanceof ArrayBuffer) return Buffer.from(chunk);
  throw new TypeError(`request body chunk must be a string or bytes, received ${typeof chunk}`);
}
