/**
 * The commands: the palette, the notebook toolbar (declared in
 * schema/plugin.json) and the status bar panel all run these.
 *
 * What may start comes from the server (`allowedActions` reads its `can_*`);
 * what runs here comes from the flows' guard. `CommandRefresher` tells the
 * views when either changed.
 */
import type { ICommandPalette } from '@jupyterlab/apputils';
import type { CommandRegistry } from '@lumino/commands';

import { DisposableOnce } from './disposable';
import type { IFlowDeps, SuspendFlows } from './flows';
import type { OperationGuard } from './guard';
import { suspendIcon, verifyIcon } from './icons';
import { allowedActions, allowedKey, backendText } from './status';
import { CommandIDs, ISuspendModel } from './tokens';

/**
 * Tell every view of our commands that their state may have changed. Per id:
 * toolbar buttons only refresh their hidden/disabled state on a change that
 * names their command.
 */
export function notifyCommands(commands: CommandRegistry): void {
  for (const id of Object.values(CommandIDs)) {
    commands.notifyCommandChanged(id);
  }
}

/**
 * Refresh the commands' enabled and visible state when what they read
 * changes: the server's `can_*` (and the restarted kernels the last restore
 * left), or an operation starting or ending on this page.
 */
export class CommandRefresher extends DisposableOnce {
  constructor(
    private readonly _commands: CommandRegistry,
    private readonly _model: ISuspendModel,
    private readonly _guard: OperationGuard
  ) {
    super();
    _model.changed.connect(this._onModelChanged, this);
    _guard.busyChanged.connect(this._refresh, this);
  }

  protected onDispose(): void {
    this._model.changed.disconnect(this._onModelChanged, this);
    this._guard.busyChanged.disconnect(this._refresh, this);
  }

  private _onModelChanged(): void {
    const status = this._model.status;
    const key = status
      ? `${allowedKey(status)}|${status.last_restore?.kernels.length ?? 0}`
      : 'none';
    if (key !== this._key) {
      this._key = key;
      this._refresh();
    }
  }

  private _refresh(): void {
    notifyCommands(this._commands);
  }

  private _key = '';
}

/** Register the commands and their palette entries. */
export function registerCommands(
  deps: IFlowDeps,
  flows: SuspendFlows,
  palette: ICommandPalette | null
): void {
  const { app, trans, model } = deps;
  const { commands } = app;
  const guard = flows.guard;
  const allowed = () => allowedActions(model.status);

  commands.addCommand(CommandIDs.suspend, {
    label: args =>
      args['toolbar'] ? trans.__('Suspend') : trans.__('Suspend Environment…'),
    caption: trans.__(
      'Save everything durable, then suspend this environment (shows what is kept first)'
    ),
    icon: args =>
      args['toolbar'] || args['isPalette'] ? suspendIcon : undefined,
    isEnabled: () => !guard.busy && allowed().suspend,
    execute: () => flows.suspend()
  });
  commands.addCommand(CommandIDs.resume, {
    label: args =>
      args['toolbar'] ? trans.__('Resume') : trans.__('Resume Environment'),
    caption: () =>
      trans.__(
        'Bring the suspended environment back: %1',
        backendText(model.status, trans).restore_step
      ),
    isEnabled: () => !guard.busy && allowed().resume,
    // The toolbar button only shows while there is something to resume.
    isVisible: args => !args['toolbar'] || allowed().resume,
    execute: () => flows.resume()
  });
  commands.addCommand(CommandIDs.writeCheckpoints, {
    label: trans.__('Write Application Checkpoints'),
    caption: trans.__(
      'Save notebooks and write the application checkpoints of the kernels now, without suspending; nothing is released (not JupyterLab’s notebook checkpoint)'
    ),
    isEnabled: () => !guard.busy && allowed().checkpoint,
    execute: () => flows.writeCheckpoints()
  });
  commands.addCommand(CommandIDs.acknowledge, {
    label: trans.__('Acknowledge Failure and Carry On'),
    caption: trans.__(
      'Leave the failed state and carry on without resuming the recorded sessions'
    ),
    isEnabled: () => !guard.busy && allowed().acknowledge,
    execute: () => flows.acknowledge()
  });
  commands.addCommand(CommandIDs.verifyLiveState, {
    label: args =>
      args['toolbar'] ? trans.__('Verify') : trans.__('Verify Live State'),
    caption: trans.__(
      'Run the live-state check (%verify_live_state) in this notebook: LIVE (same process), COLD (new process) or MISMATCH'
    ),
    icon: args =>
      args['toolbar'] || args['isPalette'] ? verifyIcon : undefined,
    isEnabled: () => !!deps.tracker?.currentWidget,
    execute: args => flows.verifyLiveState(args)
  });
  commands.addCommand(CommandIDs.timeline, {
    label: trans.__('Show Suspend Timeline'),
    caption: trans.__('Every suspend/resume cycle, measured'),
    execute: () => flows.timeline()
  });
  commands.addCommand(CommandIDs.loadCheckpoints, {
    label: trans.__('Load Application Checkpoints into Restarted Kernels'),
    caption: trans.__(
      'Run %checkpoint restore in the kernels a cold restore restarted'
    ),
    isEnabled: () => (model.status?.last_restore?.kernels.length ?? 0) > 0,
    execute: () => flows.loadCheckpoints()
  });

  if (palette) {
    const category = trans.__('Suspend');
    for (const command of [
      CommandIDs.suspend,
      CommandIDs.writeCheckpoints,
      CommandIDs.resume,
      CommandIDs.acknowledge,
      CommandIDs.verifyLiveState,
      CommandIDs.timeline,
      CommandIDs.loadCheckpoints
    ]) {
      palette.addItem({ command, category });
    }
  }
}
