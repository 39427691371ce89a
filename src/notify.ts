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
import { checkpointsRestored } from './display';
import { resumedSince } from './status';
import { CommandIDs, IStatus } from './tokens';

const STATE_KEY = 'jupyter-suspend:announced';
const RESTORE_PREFIX = 'restore:';
const KEEP = 50;

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
  }) {
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
    if (
      (status.last_restore?.kernels.length ?? 0) > 0 &&
      status.state === 'ready'
    ) {
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
}
