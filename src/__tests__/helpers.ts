/**
 * What several test suites set up the same way: the translation bundle, a
 * model whose status a test sets, and the flows with their commands wired as
 * `activate` wires them. (Not a `.spec` file: jest does not run it.)
 */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import { nullTranslator } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { Signal } from '@lumino/signaling';

import { CommandRefresher, registerCommands } from '../commands';
import { IFlowDeps, SuspendFlows } from '../flows';
import { DEFAULT_SETTINGS, ISuspendModel, IStatus } from '../tokens';

export const trans = nullTranslator.load('jupyter_suspend');

/**
 * The model as the commands and the kernel hold read it: the status (or the
 * error) a test sets, announced as `SuspendModel` announces a new answer.
 */
export class FakeModel {
  status: IStatus | null = null;
  error: string | null = null;
  reconnecting = false;
  readonly changed = new Signal<this, void>(this);
  readonly stateChanged = new Signal<this, void>(this);

  set(status: IStatus | null, error: string | null = null): void {
    this.status = status;
    this.error = error;
    this.stateChanged.emit();
    this.changed.emit();
  }
}

/**
 * The flows and their commands, wired as `activate` wires them: default
 * settings, no notebooks tracked, no palette. `app` adds to the front end
 * (which has the command registry).
 */
export function wireCommands(model: ISuspendModel, app: object = {}) {
  const commands = new CommandRegistry();
  const deps: IFlowDeps = {
    app: { ...app, commands } as unknown as JupyterFrontEnd,
    model,
    trans,
    settings: () => DEFAULT_SETTINGS,
    tracker: null,
    docManager: null
  };
  const flows = new SuspendFlows(deps);
  registerCommands(deps, flows, null);
  const refresher = new CommandRefresher(commands, model, flows.guard);
  return { commands, flows, refresher };
}
