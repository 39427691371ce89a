/**
 * No kernel starts silently for a notebook opened while the environment is
 * suspended.
 *
 * Opening (or reloading) a notebook makes JupyterLab start a kernel for it
 * when the server has no session at its path, and a suspended environment
 * has none: the resume would then bring the recorded kernel back as well,
 * two sessions for one notebook, the page on the new, empty kernel. So while
 * the recorded kernels are down or on their way back, a notebook opened here
 * gets no kernel (`shouldStart: false`), the user is told why and offered
 * Resume. Once they are back, the notebook is pointed at its restored session
 * or, when it had none, gets the kernel it would have had.
 *
 * Before the first status (a page just reloaded) a notebook is held until
 * the status says whether to keep holding it; if the server does not answer
 * (an error, or nothing within `PROVISIONAL_MS`), it is let go.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import { Notification } from '@jupyterlab/apputils';
import type { Session } from '@jupyterlab/services';
import type { TranslationBundle } from '@jupyterlab/translation';
import type { CommandRegistry } from '@lumino/commands';
import type { ISignal } from '@lumino/signaling';

import { DisposableOnce } from './disposable';
import { reconnectContext } from './reconnect';
import { explicitStarts } from './explicit';
import { allowedActions } from './status';
import { CommandIDs, IStatus } from './tokens';

/**
 * Whether the recorded kernels are down or on their way back: a kernel
 * started now for a notebook would be a second one once they are back.
 */
export function kernelsAwaitResume(status: IStatus): boolean {
  const op = status.operation;
  if (op?.in_progress && op.kind === 'resume') {
    return true;
  }
  return (
    status.state === 'snapshotting' ||
    status.state === 'suspended' ||
    status.state === 'waiting_for_capacity' ||
    status.state === 'restoring' ||
    status.can_resume
  );
}

/** Longest hold of a notebook before the first status arrives. */
export const PROVISIONAL_MS = 15000;

/** What the hold reads of the model (`SuspendModel` has it all). */
export interface IHoldModel {
  readonly status: IStatus | null;
  readonly error: string | null;
  readonly reconnecting: boolean;
  readonly changed: ISignal<unknown, void>;
  readonly stateChanged: ISignal<unknown, void>;
}

export class KernelStartHold extends DisposableOnce {
  constructor(options: KernelStartHold.IOptions) {
    super();
    this._model = options.model;
    this._sessions = options.sessions;
    this._commands = options.commands;
    this._trans = options.trans;
    this._provisionalMs = options.provisionalMs ?? PROVISIONAL_MS;
    this._model.changed.connect(this._onStatus, this);
  }

  /** The notebooks whose kernel start is held now. */
  get held(): ISessionContext[] {
    return Array.from(this._held.keys());
  }

  /**
   * A notebook was just opened: hold its kernel start if the environment is
   * (or, before the first status, may be) suspended.
   */
  hold(ctx: ISessionContext): void {
    if (this.isDisposed || ctx.isDisposed || this._held.has(ctx)) {
      return;
    }
    if (ctx.session?.kernel) {
      return; // Too late: it has one (an existing session at its path).
    }
    const preference = ctx.kernelPreference;
    if (preference.shouldStart === false || preference.canStart === false) {
      return; // Opened without a kernel anyway.
    }
    const status = this._model.status;
    if (status && !kernelsAwaitResume(status)) {
      return;
    }
    this._held.set(ctx, preference.shouldStart);
    ctx.kernelPreference = { ...preference, shouldStart: false };
    ctx.disposed.connect(this._onContextDisposed, this);
    if (status) {
      this._announce();
    } else {
      // No answer yet: do not keep a notebook from its kernel for long.
      setTimeout(() => {
        if (!this._model.status && this._held.has(ctx)) {
          this._releaseLogged(ctx);
        }
      }, this._provisionalMs);
    }
  }

  /** Let `ctx` start a kernel now (the notification's action). */
  async startAnyway(ctx: ISessionContext): Promise<void> {
    if (!this._unhold(ctx)) {
      return;
    }
    // What is still held (if anything) gets a notification of its own.
    this._dismiss();
    this._announce();
    // A server that refuses a new kernel for a recorded notebook while
    // suspended answers 409 with its reason: JupyterLab shows it.
    explicitStarts.add(ctx);
    await ctx.startKernel();
  }

  protected onDispose(): void {
    this._model.changed.disconnect(this._onStatus, this);
    for (const ctx of this.held) {
      this._unhold(ctx);
    }
    this._dismiss();
  }

  private _onStatus(): void {
    const status = this._model.status;
    if (this._held.size === 0 || (!status && !this._model.error)) {
      return;
    }
    if (status && kernelsAwaitResume(status)) {
      this._announce();
      return;
    }
    // Back, never down, or no way to know (the server does not answer).
    for (const ctx of this.held) {
      this._releaseLogged(ctx);
    }
    this._dismiss();
  }

  private _releaseLogged(ctx: ISessionContext): void {
    void this._release(ctx).catch(reason =>
      console.warn(`jupyter-suspend: no kernel for ${ctx.path}`, reason)
    );
  }

  /**
   * The kernels are back (or were never down): give `ctx` its restored
   * session, or the kernel JupyterLab would have started on opening it.
   */
  private async _release(ctx: ISessionContext): Promise<void> {
    if (!this._unhold(ctx)) {
      return;
    }
    // The resume's own reconnect attaches the recorded notebooks first.
    await this._whenNotReconnecting();
    if (!ctx.isReady) {
      // Not initialized yet, or initializing: with `shouldStart` back it
      // connects to the session at its path, or starts a kernel, itself.
      await ctx.ready;
    }
    if (ctx.isDisposed || ctx.session?.kernel) {
      return;
    }
    await this._sessions.refreshRunning();
    const recorded = Array.from(this._sessions.running()).some(
      model => model.path === ctx.path
    );
    if (recorded) {
      await reconnectContext(ctx, this._sessions);
    } else {
      await ctx.startKernel();
    }
  }

  /** Give `ctx` its kernel preference back; false if it was not held. */
  private _unhold(ctx: ISessionContext): boolean {
    if (!this._held.has(ctx)) {
      return false;
    }
    const shouldStart = this._held.get(ctx);
    this._held.delete(ctx);
    ctx.disposed.disconnect(this._onContextDisposed, this);
    this._announced.delete(ctx);
    if (!ctx.isDisposed) {
      // Only `shouldStart`: the notebook's kernel name was filled in since.
      ctx.kernelPreference = { ...ctx.kernelPreference, shouldStart };
    }
    return true;
  }

  private _onContextDisposed(ctx: ISessionContext): void {
    this._held.delete(ctx);
    this._announced.delete(ctx);
  }

  private _whenNotReconnecting(): Promise<void> {
    return new Promise(resolve => {
      const check = (): void => {
        if (!this._model.reconnecting) {
          this._model.stateChanged.disconnect(check);
          resolve();
        }
      };
      this._model.stateChanged.connect(check);
      check();
    });
  }

  /** One notification for every notebook held: why, and what to do. */
  private _announce(): void {
    const held = this.held;
    if (held.length === 0) {
      this._dismiss();
      return;
    }
    const fresh = held.filter(c => !this._announced.has(c));
    if (fresh.length === 0 && this._notice !== null) {
      return;
    }
    for (const ctx of fresh) {
      this._announced.add(ctx);
    }
    const trans = this._trans;
    const message = trans.__(
      'The environment is suspended: no kernel was started for %1. Resume brings the recorded kernels back.',
      held.map(ctx => ctx.path).join(', ')
    );
    const actions: Notification.IAction[] = [];
    if (allowedActions(this._model.status).resume) {
      actions.push({
        label: trans.__('Resume'),
        callback: () => void this._commands.execute(CommandIDs.resume)
      });
    }
    if (held.length === 1) {
      actions.push({
        label: trans.__('Start a new kernel'),
        caption: trans.__(
          'Start a kernel for this notebook now; the recorded one comes back only with a resume'
        ),
        displayType: 'link',
        callback: () => void this.startAnyway(held[0])
      });
    }
    const options = { autoClose: false as const, actions };
    const updated =
      this._notice !== null &&
      Notification.update({
        id: this._notice,
        message,
        type: 'warning',
        ...options
      });
    if (!updated) {
      // None yet, or the user closed it.
      this._notice = Notification.warning(message, options);
    }
  }

  private _dismiss(): void {
    if (this._notice !== null) {
      Notification.dismiss(this._notice);
      this._notice = null;
    }
  }

  private readonly _model: IHoldModel;
  private readonly _sessions: Session.IManager;
  private readonly _commands: CommandRegistry;
  private readonly _trans: TranslationBundle;
  private readonly _provisionalMs: number;
  /** Held notebooks, with the `shouldStart` they had. */
  private readonly _held = new Map<ISessionContext, boolean | undefined>();
  private readonly _announced = new Set<ISessionContext>();
  private _notice: string | null = null;
}

export namespace KernelStartHold {
  export interface IOptions {
    model: IHoldModel;
    sessions: Session.IManager;
    commands: CommandRegistry;
    trans: TranslationBundle;
    /** Longest hold before the first status (default `PROVISIONAL_MS`). */
    provisionalMs?: number;
  }
}
