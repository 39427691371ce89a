/**
 * The warning before an automatic suspend, with *Keep running*.
 *
 * The server's idle policy announces an automatic suspend in the status
 * (`idle_warning`) for its class's `warning_seconds`. This shows it as a
 * notification with a *Keep running* action (`POST activity/keep-running`),
 * once per warning, and takes the notification away when the warning ends
 * (kept running, activity, or the suspend started).
 */
import { Notification } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';

import type { IdleWarning, KeepRunningAnswer } from './_generated/schemas';
import { errorMessage } from './api';
import { formatDuration } from './display';
import { requestAPI } from './request';
import type { ISuspendModel, IStatus } from './tokens';

/** The idle policy's events (warning, cancelled, suspend): `idle-event.json`. */
export const IDLE_EVENT_SCHEMA_ID =
  'https://schema.jupyter.org/jupyter_suspend/api/v1/idle-event.json';

/** `POST activity/keep-running`: cancel the announced automatic suspend. */
export function keepRunning(): Promise<KeepRunningAnswer> {
  return requestAPI<KeepRunningAnswer>('activity/keep-running', {
    method: 'POST',
    body: '{}'
  });
}

/** Seconds until the automatic suspend, aged by the time since the status was fetched. */
export function secondsLeft(
  warning: IdleWarning,
  fetchedAt: number,
  now: number = Date.now()
): number {
  return Math.max(
    0,
    warning.seconds_left - Math.max(0, now - fetchedAt) / 1000
  );
}

/** The notification's text (short: notifications show 140 characters). */
export function warningMessage(
  warning: IdleWarning,
  seconds: number,
  trans: TranslationBundle
): string {
  return trans.__(
    'Idle: this environment will be suspended in %1 (%2 class).',
    formatDuration(Math.ceil(seconds), trans),
    warning.workload_class
  );
}

/** The status bar's label while a warning is pending, else null. */
export function warningLabel(
  status: IStatus | null,
  fetchedAt: number,
  trans: TranslationBundle,
  now: number = Date.now()
): string | null {
  const warning = status?.idle_warning;
  if (!warning) {
    return null;
  }
  return trans.__(
    'Auto-suspend in %1',
    formatDuration(Math.ceil(secondsLeft(warning, fetchedAt, now)), trans)
  );
}

export class IdleWarningNotifier {
  constructor(options: {
    model: ISuspendModel;
    trans: TranslationBundle;
    keepRunning?: () => Promise<unknown>;
  }) {
    this._model = options.model;
    this._trans = options.trans;
    this._keepRunning = options.keepRunning ?? keepRunning;
    this._model.changed.connect(this._onChanged, this);
  }

  /** The notification shown for the pending warning, if any. */
  get notificationId(): string | null {
    return this._id;
  }

  dispose(): void {
    this._model.changed.disconnect(this._onChanged, this);
    this._dismiss();
  }

  private _onChanged(): void {
    const warning = this._model.status?.idle_warning ?? null;
    if (!warning) {
      this._dismiss();
      return;
    }
    if (warning.started_at === this._shownFor) {
      return;
    }
    this._dismiss();
    this._shownFor = warning.started_at;
    const trans = this._trans;
    const seconds = secondsLeft(warning, this._model.fetchedAt);
    this._id = Notification.warning(warningMessage(warning, seconds, trans), {
      autoClose: false,
      actions: [
        {
          label: trans.__('Keep running'),
          caption: trans.__(
            'Cancel the automatic suspend; idle time starts again'
          ),
          callback: () => void this._keep()
        }
      ]
    });
  }

  private async _keep(): Promise<void> {
    try {
      await this._keepRunning();
    } catch (reason) {
      // Most likely the warning ended meanwhile (409): say what the server said.
      Notification.error(
        this._trans.__('Keep running failed: %1', errorMessage(reason)),
        { autoClose: 5000 }
      );
    }
    await this._model.refresh().catch(() => undefined);
  }

  private _dismiss(): void {
    if (this._id !== null) {
      Notification.dismiss(this._id);
      this._id = null;
    }
    this._shownFor = null;
  }

  private _model: ISuspendModel;
  private _trans: TranslationBundle;
  private _keepRunning: () => Promise<unknown>;
  private _id: string | null = null;
  private _shownFor: string | null = null;
}
