// The ledger's bounded buffer: rows wait here between observe() and the flush loop. When it is
// full the oldest rows go first, because the run objects still hold most of them for a catch-up,
// and the newest rows are the ones the objects may not hold for long.
import type { Row } from "./rows.ts";

export class RowQueue {
  private items: Row[] = [];
  private head = 0;
  readonly capacity: number;
  private readonly onDrop: (row: Row) => void;

  constructor(capacity: number, onDrop: (row: Row) => void) {
    if (!(capacity >= 1)) throw new Error(`buffer capacity must be at least 1, got ${capacity}`);
    this.capacity = capacity;
    this.onDrop = onDrop;
  }

  get length(): number {
    return this.items.length - this.head;
  }

  push(row: Row): void {
    this.items.push(row);
    this.trim();
  }

  /** Removes and returns up to `n` of the oldest rows. */
  take(n: number): Row[] {
    const end = Math.min(this.items.length, this.head + n);
    const out = this.items.slice(this.head, end);
    this.head = end;
    this.compact();
    return out;
  }

  /** Returns rows that could not be written to the front, in their original order. */
  putBack(rows: readonly Row[]): void {
    if (rows.length === 0) return;
    this.items = [...rows, ...this.items.slice(this.head)];
    this.head = 0;
    this.trim();
  }

  private trim(): void {
    while (this.length > this.capacity) {
      const row = this.items[this.head] as Row;
      this.head++;
      this.onDrop(row);
    }
    this.compact();
  }

  // Compact now and then rather than shifting the array on every removal.
  private compact(): void {
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
  }
}
