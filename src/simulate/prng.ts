/**
 * Seeded pseudo-random numbers for the simulator: sfc32 (a small, fast 32-bit generator that
 * passes PractRand), seeded through splitmix32 so that nearby seeds give unrelated streams.
 * Every random draw of a run comes from a stream derived from `(seed, name)`, so the same
 * seed gives the same run, and adding a stream never shifts the numbers of another.
 */
export class Prng {
  #a: number;
  #b: number;
  #c: number;
  #d: number;
  /** The second normal deviate of the last Box-Muller pair, or NaN. */
  #spare = Number.NaN;

  constructor(seed: number, stream = '') {
    let h = splitmix32((seed >>> 0) ^ hashString(stream));
    const next = () => {
      h = splitmix32(h);
      return h;
    };
    this.#a = next();
    this.#b = next();
    this.#c = next();
    this.#d = next();
    // Warm up: the first outputs of sfc32 still show the seed.
    for (let i = 0; i < 12; i++) this.next();
  }

  /** A uniform 32-bit unsigned integer. */
  nextUint32(): number {
    const t = (((this.#a + this.#b) | 0) + this.#d) | 0;
    this.#d = (this.#d + 1) | 0;
    this.#a = this.#b ^ (this.#b >>> 9);
    this.#b = (this.#c + (this.#c << 3)) | 0;
    this.#c = (this.#c << 21) | (this.#c >>> 11);
    this.#c = (this.#c + t) | 0;
    return t >>> 0;
  }

  /** A uniform number in [0, 1). */
  next(): number {
    return this.nextUint32() / 4_294_967_296;
  }

  /** A uniform integer in [min, max], both included. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  /** An exponential deviate with the given mean (the gap between two Poisson arrivals). */
  exponential(mean: number): number {
    // 1 - next() is in (0, 1]: never log(0).
    return -Math.log(1 - this.next()) * mean;
  }

  /** A standard normal deviate (Box-Muller, both values of each pair used). */
  normal(): number {
    if (!Number.isNaN(this.#spare)) {
      const spare = this.#spare;
      this.#spare = Number.NaN;
      return spare;
    }
    const u = 1 - this.next();
    const v = this.next();
    const r = Math.sqrt(-2 * Math.log(u));
    this.#spare = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  }

  /** A log-normal deviate with the given median and shape `sigma` (the spread of its log). */
  logNormal(median: number, sigma: number): number {
    return median * Math.exp(sigma * this.normal());
  }
}

function splitmix32(x: number): number {
  let z = (x + 0x9e3779b9) | 0;
  z = Math.imul(z ^ (z >>> 16), 0x21f0aaad);
  z = Math.imul(z ^ (z >>> 15), 0x735a2d97);
  return (z ^ (z >>> 15)) >>> 0;
}

/** FNV-1a over the UTF-16 code units of a stream's name. */
function hashString(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  }
  return h >>> 0;
}
