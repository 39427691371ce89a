/**
 * One operation at a time from this page.
 *
 * Suspend, resume, writing application checkpoints and acknowledging a
 * failure each talk to the server for a while (saving, a confirmation
 * dialog, following the operation). While one runs here, the others are
 * refused at once and the commands show disabled: `busyChanged` tells them
 * when to look again.
 */
import { ISignal, Signal } from '@lumino/signaling';

export class OperationGuard {
  /** Whether an operation started here is still running. */
  get busy(): boolean {
    return this._busy;
  }

  /** Emits the new `busy` each time it changes. */
  get busyChanged(): ISignal<this, boolean> {
    return this._busyChanged;
  }

  /**
   * Run `work` unless another operation runs: then resolve null at once
   * without calling it.
   */
  async run<T>(work: () => Promise<T>): Promise<T | null> {
    if (this._busy) {
      return null;
    }
    this._set(true);
    try {
      return await work();
    } finally {
      this._set(false);
    }
  }

  private _set(busy: boolean): void {
    this._busy = busy;
    this._busyChanged.emit(busy);
  }

  private _busy = false;
  private _busyChanged = new Signal<this, boolean>(this);
}
