/**
 * Running a cell while suspended offers Resume, never JupyterLab's kernel
 * picker.
 *
 * A notebook whose kernel is down (suspended, or on its way back) has no
 * kernel: JupyterLab's cell runner then calls `sessionContext.startKernel()`
 * and, when that asks for a choice, opens its kernel picker with a new kernel
 * preselected: one click from two kernels for one notebook once the resume
 * brings the recorded one back. While the recorded kernels are down, this
 * guard answers `startKernel()` itself: a dialog that says so and offers
 * Resume (the default), an explicit new kernel, or Cancel. Resume and Cancel
 * run nothing (JupyterLab clears the cell's execution); the cell runs after
 * the resume when the user runs it again.
 */
import { Dialog, ISessionContext, showDialog } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import type { CommandRegistry } from '@lumino/commands';

import { DisposableOnce } from './disposable';
import { explicitStarts } from './explicit';
import { kernelsAwaitResume } from './kernelhold';
import { allowedActions } from './status';
import { CommandIDs, IStatus } from './tokens';

export type SuspendedRunChoice = 'resume' | 'new-kernel' | 'cancel';

/** The dialog: why no kernel, and what the user can do. */
export async function askSuspendedRun(
  path: string,
  status: IStatus,
  trans: TranslationBundle
): Promise<SuspendedRunChoice> {
  const canResume = allowedActions(status).resume;
  const resuming = status.operation?.in_progress ?? false;
  const buttons = [
    Dialog.cancelButton({ label: trans.__('Cancel') }),
    Dialog.warnButton({
      label: trans.__('Start a new kernel'),
      caption: trans.__(
        'A new, empty kernel for this notebook; the recorded one comes back only with a resume'
      ),
      actions: ['new-kernel']
    })
  ];
  if (canResume) {
    buttons.push(
      Dialog.okButton({ label: trans.__('Resume'), actions: ['resume'] })
    );
  }
  const result = await showDialog({
    title: trans.__('The environment is suspended'),
    body: resuming
      ? trans.__(
          'The kernel of %1 is on its way back: run the cell again once the environment is ready.',
          path
        )
      : trans.__(
          'The kernel of %1 was stopped by the suspend. Resume brings it back with the others; the cell runs when you run it again.',
          path
        ),
    buttons,
    defaultButton: buttons.length - 1
  });
  if (result.button.actions.includes('resume')) {
    return 'resume';
  }
  if (result.button.actions.includes('new-kernel')) {
    return 'new-kernel';
  }
  return 'cancel';
}

export class SuspendedRunGuard extends DisposableOnce {
  constructor(options: SuspendedRunGuard.IOptions) {
    super();
    this._options = options;
  }

  /** Guard `ctx.startKernel()` for as long as `ctx` lives. */
  guard(ctx: ISessionContext): void {
    if (this.isDisposed || this._originals.has(ctx)) {
      return;
    }
    const original = ctx.startKernel.bind(ctx);
    this._originals.set(ctx, original);
    ctx.startKernel = async (): Promise<boolean> => {
      const status = this._options.model.status;
      const explicit = explicitStarts.delete(ctx);
      if (
        explicit ||
        this.isDisposed ||
        !status ||
        !kernelsAwaitResume(status)
      ) {
        return original();
      }
      const choice = await (this._options.ask ?? askSuspendedRun)(
        ctx.path,
        status,
        this._options.trans
      );
      if (choice === 'resume') {
        void this._options.commands.execute(CommandIDs.resume);
        return false; // no picker, nothing runs now
      }
      if (choice === 'new-kernel') {
        // Asked for explicitly: JupyterLab's own start (a server that
        // refuses a new kernel for a recorded notebook answers 409 with why).
        ctx.kernelPreference = { ...ctx.kernelPreference, shouldStart: true };
        return original();
      }
      return false;
    };
    ctx.disposed.connect(() => this._originals.delete(ctx));
  }

  protected onDispose(): void {
    for (const [ctx, original] of this._originals) {
      ctx.startKernel = original;
    }
    this._originals.clear();
  }

  private _options: SuspendedRunGuard.IOptions;
  private _originals = new Map<ISessionContext, () => Promise<boolean>>();
}

export namespace SuspendedRunGuard {
  export interface IOptions {
    model: { readonly status: IStatus | null };
    commands: CommandRegistry;
    trans: TranslationBundle;
    /** The question (default: `askSuspendedRun`). */
    ask?: (
      path: string,
      status: IStatus,
      trans: TranslationBundle
    ) => Promise<SuspendedRunChoice>;
  }
}
