/**
 * The commands: the palette, the notebook toolbar (declared in
 * schema/plugin.json) and the status bar panel all run these.
 */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import type { ICommandPalette } from '@jupyterlab/apputils';

import type { IFlowDeps, SuspendFlows } from './flows';
import { suspendIcon, verifyIcon } from './icons';
import { CommandIDs, IStatus } from './tokens';

/**
 * Tell every view of our commands that their state may have changed. Per id:
 * toolbar buttons only refresh their hidden/disabled state on a change that
 * names their command.
 */
export function notifyCommands(app: JupyterFrontEnd): void {
  for (const id of Object.values(CommandIDs)) {
    app.commands.notifyCommandChanged(id);
  }
}

/** Register the commands and their palette entries. */
export function registerCommands(
  deps: IFlowDeps,
  flows: SuspendFlows,
  palette: ICommandPalette | null
): void {
  const { app, trans, model } = deps;
  const { commands } = app;
  const status = (): IStatus | null => model.status;
  const idle = (): boolean => !flows.busy && !status()?.operation?.in_progress;

  commands.addCommand(CommandIDs.suspend, {
    label: args =>
      args['toolbar'] ? trans.__('Suspend') : trans.__('Suspend Environment…'),
    caption: trans.__(
      'Save everything durable, then suspend this environment (shows what is kept first)'
    ),
    icon: args =>
      args['toolbar'] || args['isPalette'] ? suspendIcon : undefined,
    // Unknown state (no answer yet): let the flow ask the server.
    isEnabled: () => idle() && (status()?.can_suspend ?? true),
    execute: () => flows.suspend()
  });
  commands.addCommand(CommandIDs.resume, {
    label: args =>
      args['toolbar'] ? trans.__('Resume') : trans.__('Resume Environment'),
    caption: trans.__('Restart the suspended kernels under the same ids'),
    isEnabled: () => idle() && !!status()?.can_resume,
    // The toolbar button only shows while there is something to resume.
    isVisible: args => !args['toolbar'] || !!status()?.can_resume,
    execute: () => flows.resume()
  });
  commands.addCommand(CommandIDs.checkpoint, {
    label: trans.__('Checkpoint Now (flush without suspending)'),
    caption: trans.__(
      'Save notebooks and write application checkpoints; nothing is released'
    ),
    isEnabled: () => {
      const s = status();
      return (
        idle() &&
        (!s ||
          s.state === 'running' ||
          s.state === 'ready' ||
          s.state === 'failed')
      );
    },
    execute: () => flows.checkpoint()
  });
  commands.addCommand(CommandIDs.acknowledge, {
    label: trans.__('Acknowledge Suspend Failure'),
    caption: trans.__(
      'Leave the failed state and carry on without resuming the recorded sessions'
    ),
    isEnabled: () => idle() && status()?.state === 'failed',
    execute: () => flows.acknowledge()
  });
  commands.addCommand(CommandIDs.verify, {
    label: args =>
      args['toolbar'] ? trans.__('Verify') : trans.__('Verify Live State'),
    caption: trans.__(
      'Run %verify_live_state in this notebook: LIVE (same process), COLD (new process) or MISMATCH'
    ),
    icon: args =>
      args['toolbar'] || args['isPalette'] ? verifyIcon : undefined,
    isEnabled: () => !!deps.tracker?.currentWidget,
    execute: args => flows.verify(args)
  });
  commands.addCommand(CommandIDs.timeline, {
    label: trans.__('Show Suspend Timeline'),
    caption: trans.__('Every suspend/resume cycle, measured'),
    execute: () => flows.timeline()
  });
  commands.addCommand(CommandIDs.restoreCheckpoints, {
    label: trans.__('Restore Application Checkpoints'),
    caption: trans.__(
      'Run %checkpoint restore in the kernels a cold start restarted'
    ),
    isEnabled: () => (status()?.last_restore?.kernels.length ?? 0) > 0,
    execute: () => flows.restoreCheckpoints()
  });

  if (palette) {
    const category = trans.__('Suspend');
    for (const command of [
      CommandIDs.suspend,
      CommandIDs.checkpoint,
      CommandIDs.resume,
      CommandIDs.acknowledge,
      CommandIDs.verify,
      CommandIDs.timeline,
      CommandIDs.restoreCheckpoints
    ]) {
      palette.addItem({ command, category });
    }
  }
}
