/**
 * This pod's snapshots in the status bar panel: a small list (name, age, size,
 * Ready) with a delete action behind a confirmation dialog.
 *
 * No timer of its own: the panel asks for the list when it opens, after a
 * delete, and when the environment's state changes while it is open (the
 * status model's poll already runs). Closed, nothing is fetched.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import { VDomModel } from '@jupyterlab/ui-components';
import * as React from 'react';

import type {
  SnapshotDeleted,
  SnapshotRow,
  Snapshots
} from './_generated/schemas';
import { errorMessage, errorStatus } from './api';
import { formatBytes, formatDuration } from './display';

export type { SnapshotDeleted, SnapshotRow, Snapshots };

export namespace SnapshotsModel {
  export interface IOptions {
    /** `GET snapshots`. */
    fetch: () => Promise<Snapshots>;
    /** `DELETE snapshots/NAME`. */
    remove: (name: string) => Promise<SnapshotDeleted>;
    /** Ask the user; true to delete (default: the confirmation dialog). */
    confirm: (row: SnapshotRow) => Promise<boolean>;
  }
}

/** The list as last fetched, and the delete in flight. */
export class SnapshotsModel extends VDomModel {
  constructor(options: SnapshotsModel.IOptions) {
    super();
    this._options = options;
  }

  get listing(): Snapshots | null {
    return this._listing;
  }

  /** Why the last fetch or delete failed (null: it did not). */
  get error(): string | null {
    return this._error;
  }

  get loading(): boolean {
    return this._loading;
  }

  /** The snapshot being deleted now. */
  get deleting(): string | null {
    return this._deleting;
  }

  /** Fetch the list; concurrent calls share one request. */
  refresh(): Promise<void> {
    if (!this._pending) {
      this._loading = true;
      this.stateChanged.emit();
      this._pending = this._options
        .fetch()
        .then(listing => {
          this._listing = listing;
          this._error = null;
        })
        .catch(reason => {
          this._error = errorMessage(reason);
        })
        .finally(() => {
          this._pending = null;
          this._loading = false;
          if (!this.isDisposed) {
            this.stateChanged.emit();
          }
        });
    }
    return this._pending;
  }

  /**
   * Delete one snapshot after the user confirms, then fetch the list again.
   * Returns true if it was deleted. A refusal (409: the resume needs it; 403:
   * another pod's) is shown as the model's error, never retried.
   */
  async remove(row: SnapshotRow): Promise<boolean> {
    if (this._deleting !== null || !row.deletable) {
      return false;
    }
    if (!(await this._options.confirm(row))) {
      return false;
    }
    this._deleting = row.name;
    this._error = null;
    this.stateChanged.emit();
    let deleted = false;
    try {
      await this._options.remove(row.name);
      deleted = true;
    } catch (reason) {
      const status = errorStatus(reason);
      this._error = status
        ? `${status}: ${errorMessage(reason)}`
        : errorMessage(reason);
    } finally {
      this._deleting = null;
      this.stateChanged.emit();
    }
    // The server's list says what is left (a 404 means it was already gone).
    const error = this._error;
    await this.refresh();
    if (error !== null) {
      this._error = error;
      this.stateChanged.emit();
    }
    return deleted;
  }

  private _options: SnapshotsModel.IOptions;
  private _listing: Snapshots | null = null;
  private _error: string | null = null;
  private _loading = false;
  private _deleting: string | null = null;
  private _pending: Promise<void> | null = null;
}

/** Ask before deleting: what a deleted snapshot means for a later resume. */
export async function confirmDelete(
  row: SnapshotRow,
  trans: TranslationBundle
): Promise<boolean> {
  const result = await showDialog({
    title: trans.__('Delete snapshot %1?', row.name),
    body: row.would_restore
      ? trans.__(
          'This is the snapshot a resume would restore. Without it the next start is a cold start: the live state is lost, the files and application checkpoints remain.'
        )
      : trans.__(
          'The snapshot and its stored image are deleted; this cannot be undone.'
        ),
    buttons: [
      Dialog.cancelButton({ label: trans.__('Cancel') }),
      Dialog.warnButton({ label: trans.__('Delete') })
    ],
    defaultButton: 0
  });
  return result.button.accept;
}

function readyText(row: SnapshotRow, trans: TranslationBundle): string {
  if (row.deleting) {
    return trans.__('deleting');
  }
  return row.ready
    ? trans.__('Ready')
    : trans.__('not ready (%1)', row.ready_reason ?? '—');
}

export interface ISnapshotListProps {
  model: SnapshotsModel;
  trans: TranslationBundle;
}

/** The list in the panel. */
export function SnapshotList(props: ISnapshotListProps): JSX.Element {
  const { model, trans } = props;
  const listing = model.listing;
  let body: JSX.Element;
  if (listing === null) {
    body = (
      <p className="jp-suspend-snapshots-note">
        {model.error
          ? trans.__('Snapshots could not be listed: %1', model.error)
          : trans.__('Loading snapshots…')}
      </p>
    );
  } else if (!listing.supported) {
    body = <p className="jp-suspend-snapshots-note">{listing.reason}</p>;
  } else if (listing.snapshots.length === 0) {
    body = (
      <p className="jp-suspend-snapshots-note">
        {trans.__('No snapshots of this pod.')}
      </p>
    );
  } else {
    body = (
      <table className="jp-suspend-snapshots-table">
        <thead>
          <tr>
            <th>{trans.__('Name')}</th>
            <th>{trans.__('Age')}</th>
            <th>{trans.__('Size')}</th>
            <th>{trans.__('Ready')}</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {listing.snapshots.map(row => (
            <tr
              key={row.name}
              className="jp-suspend-snapshot"
              data-name={row.name}
              data-would-restore={String(row.would_restore)}
            >
              <td className="jp-suspend-snapshot-name">
                {row.name}
                {row.would_restore ? ` (${trans.__('resume uses it')})` : ''}
              </td>
              <td className="jp-suspend-snapshot-age">
                {row.age_seconds === null
                  ? '—'
                  : formatDuration(row.age_seconds, trans)}
              </td>
              <td className="jp-suspend-snapshot-size">
                {row.size_bytes === null ? '—' : formatBytes(row.size_bytes)}
              </td>
              <td className="jp-suspend-snapshot-ready">
                {readyText(row, trans)}
              </td>
              <td>
                <button
                  className="jp-mod-styled jp-suspend-snapshot-delete"
                  disabled={!row.deletable || model.deleting !== null}
                  title={
                    row.protected_because ??
                    trans.__('Delete this snapshot and its stored image')
                  }
                  onClick={() => void model.remove(row)}
                >
                  {model.deleting === row.name
                    ? trans.__('Deleting…')
                    : trans.__('Delete')}
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    );
  }
  return (
    <div className="jp-suspend-snapshots" data-loading={String(model.loading)}>
      <h4>{trans.__('Snapshots')}</h4>
      {body}
      {listing !== null && model.error && (
        <p className="jp-suspend-snapshots-error">{model.error}</p>
      )}
    </div>
  );
}
