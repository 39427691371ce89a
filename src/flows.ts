/**
 * The flows behind the commands: suspend, resume, write application
 * checkpoints, acknowledge a failure, the live-state check, the timeline and
 * loading application checkpoints after a cold restore. Each talks to the
 * server, shows progress in one notification and ends with a plain outcome.
 * The four that start a server operation run one at a time, under one
 * `OperationGuard`.
 */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import type { IDocumentManager } from '@jupyterlab/docmanager';
import type { DocumentRegistry } from '@jupyterlab/docregistry';
import type { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import type { Kernel } from '@jupyterlab/services';
import type { TranslationBundle } from '@jupyterlab/translation';
import type { ReadonlyPartialJSONObject } from '@lumino/coreutils';
import * as React from 'react';

import { api, errorMessage } from './api';
import { confirmSuspend, showTimeline, showVerdict, TextBody } from './dialogs';
import { preflightToView, progressMessage, releasedSummary } from './display';
import { OperationGuard } from './guard';
import { dismissWhenShown, isListed, settle, updateNow } from './toasts';
import { backendText } from './status';
import {
  CommandIDs,
  IOperation,
  IStatus,
  ISettings,
  IStarted,
  ISuspendModel,
  IVerdict
} from './tokens';
import {
  IVerifyResult,
  outputsText,
  ensureHelper,
  LOAD_CHECKPOINTS_CODE,
  runQuietly,
  verifyInNotebook,
  verifyScratch
} from './verify';

export interface IFlowDeps {
  app: JupyterFrontEnd;
  model: ISuspendModel;
  trans: TranslationBundle;
  settings: () => ISettings;
  tracker: INotebookTracker | null;
  docManager: IDocumentManager | null;
}

/** Where the suspend came from, recorded in the journal and the timeline. */
const REASON = 'requested from JupyterLab';

/** The outcome of saving every dirty document before a flush. */
export interface ISaveResult {
  saved: string[];
  failed: { path: string; error: string }[];
}

/**
 * The open documents with unsaved changes that can be saved (one context per
 * path: several views of one file share it).
 */
export function dirtyContexts(
  app: JupyterFrontEnd,
  docManager: IDocumentManager | null,
  tracker: INotebookTracker | null
): DocumentRegistry.Context[] {
  const contexts = new Map<string, DocumentRegistry.Context>();
  const add = (context: DocumentRegistry.Context | undefined): void => {
    if (
      context &&
      !context.isDisposed &&
      context.model.dirty &&
      !context.model.readOnly &&
      !contexts.has(context.path)
    ) {
      contexts.set(context.path, context);
    }
  };
  if (docManager) {
    for (const widget of app.shell.widgets('main')) {
      add(docManager.contextForWidget(widget));
    }
  }
  tracker?.forEach(panel => add(panel.context));
  return Array.from(contexts.values());
}

/** Save `contexts`, each on its own; say which were saved and why others were not. */
export async function saveContexts(
  contexts: DocumentRegistry.Context[]
): Promise<ISaveResult> {
  const result: ISaveResult = { saved: [], failed: [] };
  await Promise.all(
    contexts.map(async context => {
      try {
        await context.save();
        if (context.model.dirty) {
          result.failed.push({
            path: context.path,
            error: 'still has unsaved changes'
          });
        } else {
          result.saved.push(context.path);
        }
      } catch (reason) {
        result.failed.push({ path: context.path, error: errorMessage(reason) });
      }
    })
  );
  return result;
}

/**
 * Save every open document with unsaved changes. The server only checks and
 * fsyncs what is on disk: what the browser still holds must get there first.
 */
export async function saveDirtyDocuments(
  app: JupyterFrontEnd,
  docManager: IDocumentManager | null,
  tracker: INotebookTracker | null
): Promise<ISaveResult> {
  return saveContexts(dirtyContexts(app, docManager, tracker));
}

/**
 * Ask the server to start an operation and follow it in the progress
 * notification until it ends. When the server refuses (409, 400, no answer)
 * the notification says why and the flow stops (null).
 */
async function runOperation(
  start: () => Promise<IStarted>,
  notificationId: string,
  refused: string,
  model: ISuspendModel,
  trans: TranslationBundle
): Promise<{ operationId: string; final: IStatus } | null> {
  let started: IStarted;
  try {
    started = await start();
  } catch (reason) {
    settle({
      id: notificationId,
      message: `${refused}: ${errorMessage(reason)}`,
      type: 'error',
      autoClose: 10000
    });
    return null;
  }
  const final = await followOperation(
    model,
    started.operation,
    notificationId,
    trans
  );
  return { operationId: started.operation.id, final };
}

/**
 * Show an operation's progress in one notification until it ends; resolves
 * with the final status.
 */
async function followOperation(
  model: ISuspendModel,
  operation: IOperation,
  notificationId: string,
  trans: TranslationBundle
): Promise<IStatus> {
  const operationId = operation.id;
  const started = operation.started;
  const update = (): void => {
    const status = model.status;
    if (status?.operation?.id === operationId && status.operation.in_progress) {
      updateNow({
        id: notificationId,
        message: progressMessage(status, trans),
        type: 'in-progress',
        autoClose: false
      });
    }
  };
  model.changed.connect(update);
  try {
    update();
    // No deadline: a wait for capacity may last the backend's
    // capacity_max_wait (an hour by default) and the server ends it anyway.
    return await model.waitFor(s => operationEnded(s, operationId, started), 0);
  } finally {
    model.changed.disconnect(update);
  }
}

/**
 * Whether a status shows that operation `id` (started at `started`) ended.
 * A status fetched before the operation began does not count; one showing a
 * later operation does (only one runs at a time, so ours is over).
 */
export function operationEnded(
  status: IStatus,
  id: string,
  started: string
): boolean {
  const op = status.operation;
  if (!op) {
    return false;
  }
  if (op.id === id) {
    return !op.in_progress;
  }
  return op.started > started;
}

/**
 * Notifications are cut at 140 characters: the whole text (paths, reasons,
 * next steps) stays one click away.
 */
function detailsAction(
  trans: TranslationBundle,
  title: string,
  text: string
): Notification.IAction {
  return {
    label: trans.__('Details'),
    callback: () =>
      void showDialog({
        title,
        body: React.createElement(TextBody, { text }),
        buttons: [Dialog.okButton({ label: trans.__('Close') })]
      })
  };
}

export { TOAST_SETTLE_MS, whenToastShown } from './toasts';

/** Let the user know the environment is not in a state to do this. */
function refuse(message: string): void {
  Notification.warning(message, { autoClose: 8000 });
}

export class SuspendFlows {
  constructor(deps: IFlowDeps) {
    this._deps = deps;
    deps.model.changed.connect(this._onStatus, this);
  }

  /**
   * Toasts of a finished phase go when the state moves on, whoever moved it
   * (a resume from another tab, the CLI, the platform): "Suspended … Resume"
   * is stale once the environment is no longer suspended.
   */
  private _onStatus(): void {
    const state = this._deps.model.status?.state;
    if (this._suspendNotice && state && state !== 'suspended') {
      dismissWhenShown(this._suspendNotice);
      this._suspendNotice = null;
    }
  }

  /** Whether operation `id` was started from this page. */
  startedHere(id: string): boolean {
    return this._startedHere.has(id);
  }

  /**
   * The guard the suspend, resume, checkpoint and acknowledge flows share:
   * its `busyChanged` tells the commands to refresh their enabled state.
   */
  get guard(): OperationGuard {
    return this._guard;
  }

  /** Save, show what a suspend keeps, confirm, suspend, follow it. */
  async suspend(): Promise<IStatus | null> {
    return (await this._guard.run(() => this._suspend())) ?? null;
  }

  private async _suspend(): Promise<IStatus | null> {
    const { app, model, trans } = this._deps;
    try {
      await model.refresh().catch(() => undefined);
      const current = model.status;
      if (current && !current.can_suspend) {
        refuse(
          trans.__(
            'Cannot suspend now: the environment is %1.',
            current.state
          ) +
            (current.operation?.in_progress
              ? ' ' + trans.__('A %1 is in progress.', current.operation.kind)
              : '')
        );
        return null;
      }
      const saved = await saveDirtyDocuments(
        app,
        this._deps.docManager,
        this._deps.tracker
      );
      if (saved.failed.length > 0) {
        await showDialog({
          title: trans.__('Not suspended: some documents could not be saved'),
          body: React.createElement(TextBody, {
            text: saved.failed.map(f => `${f.path}: ${f.error}`).join('\n')
          }),
          buttons: [Dialog.okButton({ label: trans.__('OK') })]
        });
        return null;
      }
      let force = false;
      if (this._deps.settings().confirmBeforeSuspend) {
        const preflight = await api.preflight();
        const answer = await confirmSuspend(
          preflightToView(preflight, trans),
          trans
        );
        if (!answer.confirmed) {
          return null;
        }
        force = answer.force;
      }
      const notificationId = Notification.emit(
        trans.__('Suspending: saving notebooks and checkpoints…'),
        'in-progress',
        { autoClose: false }
      );
      const run = await runOperation(
        () =>
          api.suspend(REASON, force).then(started => {
            this._startedHere.add(started.operation.id);
            return started;
          }),
        notificationId,
        trans.__('Suspend refused'),
        model,
        trans
      );
      if (!run) {
        return null;
      }
      const { operationId, final } = run;
      this._reportSuspend(final, operationId, notificationId);
      return final;
    } catch (reason) {
      Notification.error(trans.__('Suspend failed: %1', errorMessage(reason)), {
        autoClose: 10000
      });
      return null;
    }
  }

  private _reportSuspend(
    final: IStatus,
    operationId: string,
    notificationId: string
  ): void {
    const { trans } = this._deps;
    const op = final.operation?.id === operationId ? final.operation : null;
    if (op?.outcome === 'aborted') {
      // The server says "suspend aborted, nothing was released: <reason>".
      const reason = op.message.replace(
        /^suspend aborted, nothing was released:\s*/i,
        ''
      );
      const message = trans.__(
        'Suspend aborted, nothing was released: %1',
        reason
      );
      settle({
        id: notificationId,
        message,
        type: 'warning',
        autoClose: false,
        actions: [detailsAction(trans, trans.__('Suspend aborted'), message)]
      });
    } else if (final.state === 'failed') {
      settle({
        id: notificationId,
        message: trans.__(
          'Suspend failed: %1 Next step: %2',
          final.failure?.reason ?? op?.message ?? '',
          final.failure?.next_step ?? ''
        ),
        type: 'error',
        autoClose: false,
        actions: [
          detailsAction(
            trans,
            trans.__('Suspend failed'),
            `${final.failure?.reason ?? op?.message ?? ''}\n\n${final.failure?.next_step ?? ''}`
          ),
          {
            label: trans.__('Acknowledge'),
            callback: () =>
              void this._deps.app.commands.execute(CommandIDs.acknowledge)
          }
        ]
      });
    } else if (final.state === 'suspended') {
      const released = releasedSummary(op, trans);
      this._suspendNotice = notificationId;
      settle({
        id: notificationId,
        message: released
          ? trans.__('Suspended: %1.', released)
          : trans.__('Suspended.'),
        type: 'success',
        autoClose: 8000,
        actions: final.can_resume
          ? [
              {
                label: trans.__('Resume'),
                callback: () =>
                  void this._deps.app.commands.execute(CommandIDs.resume)
              }
            ]
          : []
      });
    } else {
      settle({
        id: notificationId,
        message: trans.__('Suspend ended: %1', final.message || final.state),
        type: 'info',
        autoClose: 8000
      });
    }
  }

  async resume(): Promise<IStatus | null> {
    return (await this._guard.run(() => this._resume())) ?? null;
  }

  private async _resume(): Promise<IStatus | null> {
    const { model, trans } = this._deps;
    const resuming = trans.__(
      'Resuming: %1…',
      backendText(model.status, trans).restore_step
    );
    // "Suspended … [Resume]" is stale from here on: it becomes the resume's
    // progress (one toast changed in place, never a dismissal racing its
    // last update), or a new one when the user closed it.
    const previous = this._suspendNotice;
    this._suspendNotice = null;
    let notificationId: string;
    if (previous && isListed(previous)) {
      notificationId = previous;
      settle({
        id: notificationId,
        message: resuming,
        type: 'in-progress',
        autoClose: false,
        actions: []
      });
    } else {
      notificationId = Notification.emit(resuming, 'in-progress', {
        autoClose: false
      });
    }
    try {
      const run = await runOperation(
        () => api.resume(REASON),
        notificationId,
        trans.__('Resume refused'),
        model,
        trans
      );
      if (!run) {
        return null;
      }
      const { final } = run;
      if (final.state === 'ready' && final.restore === 'cold') {
        // The cold-restore announcement (notify.ts) says it all, with the
        // action to restore the checkpoints: no second toast.
        dismissWhenShown(notificationId);
      } else if (final.state === 'ready') {
        settle({
          id: notificationId,
          message: trans.__('Ready: %1 restore', final.restore ?? ''),
          type: 'success',
          autoClose: 6000
        });
      } else {
        const message = trans.__(
          'Resume failed: %1 Next step: %2',
          final.failure?.reason ?? final.message,
          final.failure?.next_step ?? ''
        );
        settle({
          id: notificationId,
          message,
          type: 'error',
          autoClose: false,
          actions: [detailsAction(trans, trans.__('Resume failed'), message)]
        });
      }
      return final;
    } catch (reason) {
      settle({
        id: notificationId,
        message: trans.__('Resume failed: %1', errorMessage(reason)),
        type: 'error',
        autoClose: 10000
      });
      return null;
    }
  }

  /** Save the notebooks and write application checkpoints, not suspending. */
  async writeCheckpoints(): Promise<IStatus | null> {
    return (await this._guard.run(() => this._writeCheckpoints())) ?? null;
  }

  private async _writeCheckpoints(): Promise<IStatus | null> {
    const { app, model, trans } = this._deps;
    const saved = await saveDirtyDocuments(
      app,
      this._deps.docManager,
      this._deps.tracker
    );
    if (saved.failed.length > 0) {
      Notification.error(
        trans.__(
          'Application checkpoints not written: could not save %1',
          saved.failed.map(f => `${f.path} (${f.error})`).join(', ')
        ),
        { autoClose: false }
      );
      return null;
    }
    const notificationId = Notification.emit(
      trans.__('Writing application checkpoints: saving notebooks first…'),
      'in-progress',
      { autoClose: false }
    );
    const run = await runOperation(
      () => api.checkpoint(REASON),
      notificationId,
      trans.__('Writing application checkpoints refused'),
      model,
      trans
    );
    if (!run) {
      return null;
    }
    const { operationId, final } = run;
    const op = final.operation?.id === operationId ? final.operation : null;
    const kernelsStep = op?.steps.find(s => s.name === 'flush.kernels');
    settle({
      id: notificationId,
      message:
        op?.outcome === 'succeeded'
          ? trans.__(
              'Application checkpoints written (%1).',
              kernelsStep?.message ?? ''
            )
          : trans.__(
              'Writing application checkpoints failed: %1',
              op?.message ?? final.message
            ),
      type: op?.outcome === 'succeeded' ? 'success' : 'error',
      autoClose: op?.outcome === 'succeeded' ? 6000 : false
    });
    return final;
  }

  /** Leave the failed state without resuming, once the user confirms. */
  async acknowledge(): Promise<IStatus | null> {
    return (await this._guard.run(() => this._acknowledge())) ?? null;
  }

  private async _acknowledge(): Promise<IStatus | null> {
    const { model, trans } = this._deps;
    const failure = model.status?.failure;
    const answer = await showDialog({
      title: trans.__('Acknowledge the failure?'),
      body: React.createElement(TextBody, {
        text: trans.__(
          '%1\n\nThe environment goes back to running without resuming the recorded sessions. Notebooks and application checkpoints stay on disk: start a kernel and recover from them.',
          failure ? `${failure.reason}\n${failure.next_step}` : ''
        )
      }),
      buttons: [
        Dialog.cancelButton({ label: trans.__('Cancel') }),
        Dialog.warnButton({ label: trans.__('Acknowledge') })
      ]
    });
    if (!answer.button.accept) {
      return null;
    }
    try {
      const status = await api.acknowledge();
      await model.refresh().catch(() => undefined);
      return status;
    } catch (reason) {
      Notification.error(
        trans.__('Acknowledge refused: %1', errorMessage(reason)),
        {
          autoClose: 10000
        }
      );
      return null;
    }
  }

  /** Run the live-state check in the current (or given) notebook. */
  async verifyLiveState(
    args: ReadonlyPartialJSONObject = {}
  ): Promise<IVerdict | null> {
    const { trans, tracker } = this._deps;
    const panel = tracker?.currentWidget ?? null;
    if (!panel) {
      refuse(trans.__('Open a notebook to verify its live state.'));
      return null;
    }
    await panel.sessionContext.ready;
    const kernel = panel.sessionContext.session?.kernel;
    if (!kernel || kernel.isDisposed) {
      // Running the helper would only make JupyterLab ask for a kernel.
      refuse(
        trans.__(
          '%1 has no running kernel: resume the environment or start a kernel first.',
          panel.context.path
        )
      );
      return null;
    }
    const mode =
      args['mode'] === 'scratch' || args['mode'] === 'insert-cell'
        ? args['mode']
        : this._deps.settings().verifyMode;
    let result: IVerifyResult;
    try {
      result =
        mode === 'scratch'
          ? await verifyScratch(panel)
          : await verifyInNotebook(panel);
    } catch (reason) {
      Notification.error(trans.__('Verify failed: %1', errorMessage(reason)), {
        autoClose: 10000
      });
      return null;
    }
    this._reportVerdict(result, panel);
    return result.verdict;
  }

  private _reportVerdict(result: IVerifyResult, panel: NotebookPanel): void {
    const { trans } = this._deps;
    if (result.mode === 'scratch') {
      void showVerdict(result, trans);
      return;
    }
    const verdict = result.verdict;
    if (!verdict) {
      Notification.error(
        trans.__(
          'No verdict from %1: %2',
          panel.context.path,
          result.error ?? trans.__('the kernel published none')
        ),
        { autoClose: 10000 }
      );
      return;
    }
    const type =
      verdict.verdict === 'LIVE'
        ? 'success'
        : verdict.verdict === 'COLD'
          ? 'warning'
          : 'error';
    Notification.emit(`${verdict.verdict}: ${verdict.message}`, type, {
      autoClose: 10000
    });
  }

  async timeline(): Promise<void> {
    const { trans } = this._deps;
    try {
      await showTimeline(await api.timeline(), trans);
    } catch (reason) {
      Notification.error(
        trans.__('Timeline unavailable: %1', errorMessage(reason)),
        {
          autoClose: 10000
        }
      );
    }
  }

  /**
   * After a cold start: run `%checkpoint restore` in each restarted kernel,
   * through the open notebook's connection when there is one.
   */
  async loadCheckpoints(): Promise<void> {
    const { app, model, trans, tracker } = this._deps;
    const kernels = model.status?.last_restore?.kernels ?? [];
    const services = app.serviceManager;
    await services.kernels.refreshRunning();
    const messages: string[] = [];
    let failed = false;
    for (const restored of kernels) {
      const label = restored.path ?? restored.kernel_id;
      const panel = tracker?.find(p => {
        const kernel = p.sessionContext.session?.kernel;
        return (
          !!kernel && !kernel.isDisposed && kernel.id === restored.kernel_id
        );
      });
      const panelKernel: Kernel.IKernelConnection | null =
        panel?.sessionContext.session?.kernel ?? null;
      const running = await services.kernels.findById(restored.kernel_id);
      if (!panelKernel && !running) {
        messages.push(trans.__('%1: kernel is not running', label));
        failed = true;
        continue;
      }
      const kernel =
        panelKernel ?? services.kernels.connectTo({ model: running! });
      try {
        await ensureHelper(kernel);
        const outputs = await runQuietly(kernel, LOAD_CHECKPOINTS_CODE);
        const text = outputsText(outputs);
        if (outputs.some(o => o.output_type === 'error')) {
          failed = true;
        }
        messages.push(`${label}: ${text || trans.__('done')}`);
      } catch (reason) {
        failed = true;
        messages.push(`${label}: ${errorMessage(reason)}`);
      } finally {
        if (kernel !== panelKernel) {
          kernel.dispose();
        }
      }
    }
    if (messages.length === 0) {
      messages.push(trans.__('No restarted kernel to restore.'));
    }
    Notification.emit(messages.join('\n'), failed ? 'error' : 'success', {
      autoClose: failed ? false : 10000
    });
  }

  private _deps: IFlowDeps;
  private _guard = new OperationGuard();
  private _suspendNotice: string | null = null;
  private _startedHere = new Set<string>();
}
