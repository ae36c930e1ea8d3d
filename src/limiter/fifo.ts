/**
 * A FIFO queue on an array with a moving head: O(1) push and shift (amortised), and O(1)
 * removal of a cancelled entry by marking it dead, so that an abort never scans the queue.
 */
export class Fifo<T extends { dead: boolean }> {
  #items: (T | undefined)[] = [];
  #head = 0;
  /** Live entries. */
  size = 0;

  push(item: T): void {
    this.#items.push(item);
    this.size++;
  }

  /** The first live entry, dropping dead ones on the way. */
  peek(): T | undefined {
    while (this.#head < this.#items.length) {
      const item = this.#items[this.#head];
      if (item !== undefined && !item.dead) return item;
      this.#items[this.#head++] = undefined;
    }
    this.#compact();
    return undefined;
  }

  /** The second live entry, or `undefined`. */
  peekSecond(): T | undefined {
    if (this.peek() === undefined) return undefined;
    for (let i = this.#head + 1; i < this.#items.length; i++) {
      const item = this.#items[i];
      if (item !== undefined && !item.dead) return item;
    }
    return undefined;
  }

  /** Removes and returns the first live entry. */
  shift(): T | undefined {
    const item = this.peek();
    if (item === undefined) return undefined;
    this.#items[this.#head++] = undefined;
    this.size--;
    if (this.#head > 1024 && this.#head * 2 > this.#items.length) this.#compact();
    return item;
  }

  /** Marks an entry dead; it is skipped and dropped when it reaches the head. */
  kill(item: T): void {
    if (item.dead) return;
    item.dead = true;
    this.size--;
  }

  /** Removes every live entry, oldest first. */
  drain(): T[] {
    const out: T[] = [];
    for (let item = this.shift(); item !== undefined; item = this.shift()) out.push(item);
    return out;
  }

  #compact(): void {
    this.#items = this.#items.slice(this.#head);
    this.#head = 0;
  }
}
