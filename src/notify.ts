/**
 * Tell the user, once, when the environment came back cold.
 *
 * A cold restore (new kernel processes) or a server that started cold after
 * a suspend means variables are gone: only files and application checkpoints
 * came back. The notification says so and offers to (re)load the checkpoints.
 *
 * A cold restore is announced by the pages that saw it end (the state became
 * ready, or a later restore replaced the one they saw): a page opened after
 * the restore does not announce it, however old it is. A cold start of the
 * server is announced once; which were announced is remembered in the state
 * database, so a reload of the page does not announce it again.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import type { IStateDB } from '@jupyterlab/statedb';
import type { TranslationBundle } from '@jupyterlab/translation';
import type { CommandRegistry } from '@lumino/commands';
import * as React from 'react';

import { TextBody } from './dialogs';
import { checkpointsRestored, formatClock, formatDuration } from './display';
import { resumedSince } from './status';
import { CommandIDs, IStatus } from './tokens';

const STATE_KEY = 'jupyter-suspend:announced';
const RESTORE_PREFIX = 'restore:';
const SUSPEND_PREFIX = 'suspend:';
const KEEP = 50;

/**
 * Whether the restarted kernels still have application checkpoints to load:
 * the resume did not load them (turned off), or some kernel's load failed or
 * missed some. A cold restore that loaded them all offers nothing to load.
 */
export function checkpointsLeftToLoad(status: IStatus): boolean {
  const restore = status.last_restore;
  if (!restore || restore.kernels.length === 0) {
    return false;
  }
  const loaded = Object.values(restore.checkpoints_restored ?? {});
  if (loaded.length === 0) {
    return true; // the resume loaded none: the user may
  }
  return loaded.some(
    k =>
      !k ||
      k.outcome !== 'ok' ||
      (k.missing?.length ?? 0) > 0 ||
      (k.failed?.length ?? 0) > 0
  );
}

/**
 * What a returning user is told about the last suspend (who, why, when,
 * after how long idle), or null when there is nothing to tell.
 */
export function lastSuspendMessage(
  status: IStatus,
  trans: TranslationBundle
): string | null {
  const last = status.last_suspend;
  if (!last || !last.suspended_at) {
    return null;
  }
  const when = formatClock(last.suspended_at);
  const idle =
    last.idle_seconds !== null && last.idle_seconds !== undefined
      ? trans.__(' after %1 idle', formatDuration(last.idle_seconds, trans))
      : '';
  if (last.origin === 'idle_policy') {
    return trans.__(
      'Suspended automatically at %1 by the idle policy%2%3. Nothing unsaved was lost.',
      when,
      idle,
      last.workload_class
        ? trans.__(' (workload class %1)', last.workload_class)
        : ''
    );
  }
  return trans.__(
    'Suspended at %1%2%3.',
    when,
    idle,
    last.reason ? trans.__(': %1', last.reason) : ''
  );
}

/** The key identifying what a status would announce, or null if nothing. */
export function announcementKey(status: IStatus): string | null {
  const restore = status.last_restore;
  if (
    status.state === 'ready' &&
    status.restore === 'cold' &&
    restore?.operation_id
  ) {
    return `${RESTORE_PREFIX}${restore.operation_id}`;
  }
  if (status.cold_start?.message) {
    return `cold-start:${status.cold_start.previous_state}:${status.cold_start.previous_time ?? ''}`;
  }
  return null;
}

/** The text of the announcement for a status with an `announcementKey`. */
export function announcementMessage(
  status: IStatus,
  trans: TranslationBundle
): string {
  if (status.state === 'ready' && status.restore === 'cold') {
    // Short: notifications show 140 characters.
    return trans.__(
      'Cold restore: %1, in-memory variables are gone. Files are intact; %2.',
      trans._n(
        '%1 kernel restarted',
        '%1 kernels restarted',
        status.last_restore?.kernels.length ?? 0
      ),
      trans._n(
        '%1 checkpoint restored',
        '%1 checkpoints restored',
        checkpointsRestored(status)
      )
    );
  }
  const cold = status.cold_start!;
  return trans.__(
    'The server started cold: %1 %2',
    cold.message,
    cold.next_step
  );
}

export class ColdStartNotifier {
  constructor(options: {
    commands: CommandRegistry;
    trans: TranslationBundle;
    state: IStateDB | null;
    /** Whether an operation was started from this page (it says so itself). */
    startedHere?: (operationId: string) => boolean;
  }) {
    this._startedHere = options.startedHere ?? (() => false);
    this._commands = options.commands;
    this._trans = options.trans;
    this._state = options.state;
    this._loaded = this._load();
  }

  /**
   * Announce what `status` calls for, unless it was announced before. Call
   * it with every status, in order: a cold restore is announced only when
   * this page saw it end.
   */
  async check(status: IStatus): Promise<string | null> {
    const previous = this._previous;
    this._previous = status;
    await this._loaded;
    await this._checkSuspend(previous, status);
    const key = announcementKey(status);
    if (!key || this._announced.includes(key)) {
      return null;
    }
    if (key.startsWith(RESTORE_PREFIX) && !resumedSince(previous, status)) {
      // Ended before this page looked: the status bar still says so.
      return null;
    }
    this._announced = [...this._announced, key].slice(-KEEP);
    await this._save();
    const trans = this._trans;
    const actions: Notification.IAction[] = [];
    if (status.state === 'ready' && checkpointsLeftToLoad(status)) {
      actions.push({
        label: trans.__('Load checkpoints'),
        caption: trans.__(
          'Load the application checkpoints into the restarted kernels (%checkpoint restore)'
        ),
        callback: () => void this._commands.execute(CommandIDs.loadCheckpoints)
      });
    }
    if (status.state === 'suspended' && status.can_resume) {
      actions.push({
        label: trans.__('Resume'),
        callback: () => void this._commands.execute(CommandIDs.resume)
      });
    }
    if (status.cold_start?.message) {
      actions.push({
        label: trans.__('Details'),
        callback: () =>
          void showDialog({
            title: trans.__('The server started cold'),
            body: React.createElement(TextBody, {
              text: `${status.cold_start!.message}\n\n${status.cold_start!.next_step}`
            }),
            buttons: [Dialog.okButton({ label: trans.__('Close') })]
          })
      });
    }
    actions.push({
      label: trans.__('Timeline'),
      displayType: 'link',
      callback: () => void this._commands.execute(CommandIDs.timeline)
    });
    return Notification.warning(announcementMessage(status, trans), {
      autoClose: false,
      actions
    });
  }

  /**
   * Tell a returning user why and when the environment was suspended: an
   * automatic suspend whenever this page sees it, any other one when the page
   * opens onto it; never the suspend this page started (its own toast says so).
   */
  private async _checkSuspend(
    previous: IStatus | null,
    status: IStatus
  ): Promise<void> {
    const last = status.last_suspend;
    if (!last?.operation_id || !last.suspended_at) {
      return;
    }
    const key = `${SUSPEND_PREFIX}${last.operation_id}`;
    if (this._announced.includes(key) || this._startedHere(last.operation_id)) {
      return;
    }
    const automatic = last.origin !== 'user';
    const returning = previous === null && status.state === 'suspended';
    if (!automatic && !returning) {
      return;
    }
    if (
      automatic &&
      !['suspended', 'restoring', 'waiting_for_capacity', 'ready'].includes(
        status.state
      )
    ) {
      return;
    }
    const message = lastSuspendMessage(status, this._trans);
    if (!message) {
      return;
    }
    this._announced = [...this._announced, key].slice(-KEEP);
    await this._save();
    const actions: Notification.IAction[] = [];
    if (status.state === 'suspended' && status.can_resume) {
      actions.push({
        label: this._trans.__('Resume'),
        callback: () => void this._commands.execute(CommandIDs.resume)
      });
    }
    actions.push({
      label: this._trans.__('Timeline'),
      displayType: 'link',
      callback: () => void this._commands.execute(CommandIDs.timeline)
    });
    Notification.info(message, { autoClose: false, actions });
  }

  private async _load(): Promise<void> {
    if (!this._state) {
      return;
    }
    try {
      const value = await this._state.fetch(STATE_KEY);
      if (Array.isArray(value)) {
        this._announced = value.filter(
          (v): v is string => typeof v === 'string'
        );
      }
    } catch {
      // No memory of earlier announcements: announce again rather than never.
    }
  }

  private async _save(): Promise<void> {
    if (!this._state) {
      return;
    }
    try {
      await this._state.save(STATE_KEY, this._announced);
    } catch {
      // Same as above: at worst the user sees it once more.
    }
  }

  private _commands: CommandRegistry;
  private _trans: TranslationBundle;
  private _state: IStateDB | null;
  private _loaded: Promise<void>;
  private _announced: string[] = [];
  private _previous: IStatus | null = null;
  private _startedHere: (operationId: string) => boolean;
}
