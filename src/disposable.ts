/**
 * The part of `IDisposable` the plugin's listeners share: `dispose` may be
 * called more than once (the plugin, a test, JupyterLab on shutdown), and only
 * the first call may disconnect and release.
 */
import type { IDisposable } from '@lumino/disposable';

export abstract class DisposableOnce implements IDisposable {
  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this.onDispose();
  }

  /** Disconnect and release what this object holds: on the first `dispose`. */
  protected abstract onDispose(): void;

  private _isDisposed = false;
}
