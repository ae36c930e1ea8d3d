/** Where the bar is drawn: a terminal (`isTTY`, `columns`) or any other writer. */
export interface ProgressOut {
  write(text: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

/** A one-line progress bar on a terminal (stderr); silent when it is not a TTY. */
export class ProgressBar {
  label = '';
  readonly #out: ProgressOut;
  readonly #total: number;
  readonly #enabled: boolean;
  #drawnAt = 0;
  #drawn = false;

  constructor(out: ProgressOut, total: number) {
    this.#out = out;
    this.#total = total;
    this.#enabled = out.isTTY === true && total > 0;
  }

  /** Characters of the line: the terminal's width (a narrow or unknown one counts as 80), at most 80. */
  get #width(): number {
    const columns = this.#out.columns;
    return columns !== undefined && columns > 20 ? Math.min(columns - 1, 80) : 79;
  }

  update(done: number): void {
    if (!this.#enabled) return;
    const now = performance.now();
    if (now - this.#drawnAt < 100) return;
    this.#drawnAt = now;
    const fraction = Math.min(1, done / this.#total);
    const width = 30;
    const filled = Math.round(fraction * width);
    const bar = `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${String(Math.round(fraction * 100)).padStart(3)}% ${this.label}`;
    this.#out.write(`\r${bar.slice(0, this.#width).padEnd(this.#width)}`);
    this.#drawn = true;
  }

  clear(): void {
    if (this.#drawn) this.#out.write(`\r${' '.repeat(this.#width)}\r`);
    this.#drawn = false;
  }
}
