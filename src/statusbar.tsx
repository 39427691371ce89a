/**
 * The status bar item and the panel its click opens.
 *
 * Both are `VDomRenderer`s of the shared model: they re-render when the model
 * changes (each poll tick or server event), nothing else drives them.
 */
import { GroupItem, showPopup, TextItem } from '@jupyterlab/statusbar';
import type { TranslationBundle } from '@jupyterlab/translation';
import { VDomRenderer } from '@jupyterlab/ui-components';
import type { CommandRegistry } from '@lumino/commands';
import * as React from 'react';

import {
  cycleSummary,
  describeCycle,
  describeMisconfiguration,
  describeStatus,
  formatClock,
  IStatusDisplay,
  stepLabel
} from './display';
import { suspendIcon } from './icons';
import { keepRunning, secondsLeft, warningLabel } from './idle';
import { SuspendModel } from './model';
import { api } from './api';
import { confirmDelete, SnapshotList, SnapshotsModel } from './snapshots';
import { allowedActions, backendText } from './status';
import { CommandIDs, ISettings } from './tokens';

export interface IStatusViewOptions {
  trans: TranslationBundle;
  settings: () => ISettings;
  commands: CommandRegistry;
  /** The snapshot list's calls (default: the REST API and the confirmation dialog). */
  snapshots?: SnapshotsModel.IOptions;
}

function display(
  model: SuspendModel,
  options: IStatusViewOptions
): IStatusDisplay {
  if (model.misconfigured) {
    return describeMisconfiguration(model.misconfigured, options.trans);
  }
  return describeStatus(
    model.status,
    {
      now: Date.now(),
      fetchedAt: model.fetchedAt,
      showIdleTime: options.settings().showIdleTime,
      reconnecting: model.reconnecting
    },
    options.trans,
    model.error
  );
}

/** The tooltip: state, details and the last cycle's timeline. */
export function tooltipText(
  model: SuspendModel,
  shown: IStatusDisplay,
  trans: TranslationBundle
): string {
  const lines = [shown.headline, ...shown.details];
  const cycles = model.timeline?.cycles ?? [];
  if (cycles.length > 0) {
    lines.push('', ...describeCycle(cycles[cycles.length - 1], trans));
  }
  lines.push('', trans.__('Click for details and actions.'));
  return lines.join('\n');
}

export class SuspendStatusItem extends VDomRenderer<SuspendModel> {
  constructor(model: SuspendModel, options: IStatusViewOptions) {
    super(model);
    this._options = options;
    this.addClass('jp-suspend-status');
    this.addClass('jp-mod-highlighted');
    this.node.setAttribute('role', 'button');
    this.node.setAttribute('tabindex', '0');
    this.node.addEventListener('click', this);
    this.node.addEventListener('keydown', this);
  }

  handleEvent(event: Event): void {
    if (
      event.type === 'click' ||
      (event.type === 'keydown' &&
        ((event as KeyboardEvent).key === 'Enter' ||
          (event as KeyboardEvent).key === ' '))
    ) {
      this.openPanel();
    }
  }

  /** Open the details panel anchored to the item. */
  openPanel(): void {
    const body = new SuspendPanel(this.model, this._options);
    showPopup({ body, anchor: this, align: 'left', hasDynamicSize: true });
  }

  render(): JSX.Element {
    const shown = display(this.model, this._options);
    // Attributes on the item itself: CSS tone and stable hooks for tests.
    this.node.dataset.state = shown.state;
    this.node.dataset.tone = shown.tone;
    this.node.dataset.reconnecting = String(this.model.reconnecting);
    this.node.dataset.misconfigured = String(this.model.misconfigured !== null);
    const warning = warningLabel(
      this.model.status,
      this.model.fetchedAt,
      this._options.trans
    );
    this.node.dataset.idleWarning = String(warning !== null);
    const title = tooltipText(this.model, shown, this._options.trans);
    this.node.title = title;
    return (
      <GroupItem spacing={4}>
        <suspendIcon.react tag="span" stylesheet="statusBar" />
        <TextItem
          source={warning ?? shown.label}
          className="jp-suspend-status-label"
        />
      </GroupItem>
    );
  }

  dispose(): void {
    this.node.removeEventListener('click', this);
    this.node.removeEventListener('keydown', this);
    super.dispose();
  }

  private _options: IStatusViewOptions;
}

/** The popup: the state in full, the current operation, the actions. */
export class SuspendPanel extends VDomRenderer<SuspendModel> {
  constructor(model: SuspendModel, options: IStatusViewOptions) {
    super(model);
    this._options = options;
    this.addClass('jp-suspend-panel');
    // The commands' enabled state follows the model; re-render on changes.
    options.commands.commandChanged.connect(this._onCommandChanged, this);
    // The snapshot list: fetched now that the panel opens, again when the state changes while it is open.
    this._snapshots = new SnapshotsModel(
      options.snapshots ?? {
        fetch: api.snapshots,
        remove: api.deleteSnapshot,
        confirm: row => confirmDelete(row, options.trans)
      }
    );
    this._snapshots.stateChanged.connect(this._onCommandChanged, this);
    this._shownState = model.status?.state ?? null;
    model.stateChanged.connect(this._onStatus, this);
    void this._snapshots.refresh();
  }

  /** The snapshot list shown in the panel. */
  get snapshots(): SnapshotsModel {
    return this._snapshots;
  }

  private _onStatus(): void {
    const state = this.model?.status?.state ?? null;
    if (state !== this._shownState) {
      this._shownState = state;
      void this._snapshots.refresh();
    }
  }

  dispose(): void {
    this._options.commands.commandChanged.disconnect(
      this._onCommandChanged,
      this
    );
    this.model?.stateChanged.disconnect(this._onStatus, this);
    this._snapshots.dispose();
    super.dispose();
  }

  private _onCommandChanged(): void {
    this.update();
  }

  render(): JSX.Element {
    const { trans, commands } = this._options;
    const shown = display(this.model, this._options);
    const status = this.model.status;
    const op = status?.operation ?? null;
    const cycles = this.model.timeline?.cycles ?? [];
    const last = cycles.length > 0 ? cycles[cycles.length - 1] : null;
    const allowed = allowedActions(status);
    const text = backendText(status, trans);
    const action = (id: string, label: string): JSX.Element | null =>
      commands.hasCommand(id) ? (
        <button
          key={id}
          className="jp-mod-styled jp-suspend-action"
          data-command={id}
          disabled={!commands.isEnabled(id)}
          onClick={() => void commands.execute(id)}
        >
          {label}
        </button>
      ) : null;
    return (
      <div
        className="jp-suspend-panel-body"
        data-state={shown.state}
        data-tone={shown.tone}
      >
        <h3 className="jp-suspend-panel-headline">{shown.headline}</h3>
        {/* Actions first: the popup may be cut by a small window. */}
        <div className="jp-suspend-panel-actions">
          {action(CommandIDs.suspend, trans.__('Suspend…'))}
          {allowed.resume && action(CommandIDs.resume, trans.__('Resume'))}
          {action(
            CommandIDs.writeCheckpoints,
            trans.__('Write application checkpoints')
          )}
          {status?.state === 'failed' &&
            action(CommandIDs.acknowledge, trans.__('Acknowledge'))}
          {action(CommandIDs.verifyLiveState, trans.__('Verify live state'))}
          {action(CommandIDs.timeline, trans.__('Timeline'))}
        </div>
        {shown.details.map((line, i) => (
          <p key={i} className="jp-suspend-panel-detail">
            {line}
          </p>
        ))}
        {status && (
          <dl className="jp-suspend-panel-facts">
            <dt>{trans.__('State')}</dt>
            <dd>
              {status.state}
              {status.restore ? ` (${status.restore})` : ''}
              {' · '}
              {trans.__('since %1', formatClock(status.since))}
            </dd>
            <dt>{trans.__('Backend')}</dt>
            <dd>{status.backend.name}</dd>
            <dt>{trans.__('Workload class')}</dt>
            <dd className="jp-suspend-panel-class">
              {status.workload_class ?? '—'}
              {' · '}
              {status.idle_policy_enabled
                ? trans.__('automatic suspend on')
                : trans.__('automatic suspend off')}
            </dd>
            {status.idle_warning && (
              <>
                <dt>{trans.__('Automatic suspend')}</dt>
                <dd className="jp-suspend-panel-idle-warning">
                  {trans.__(
                    'in %1 s: %2',
                    Math.ceil(
                      secondsLeft(status.idle_warning, this.model.fetchedAt)
                    ),
                    status.idle_warning.reason
                  )}{' '}
                  <button
                    className="jp-mod-styled jp-suspend-action"
                    onClick={() =>
                      void keepRunning()
                        .catch(() => undefined)
                        .then(() => this.model.refresh())
                    }
                  >
                    {trans.__('Keep running')}
                  </button>
                </dd>
              </>
            )}
            {text.keeps.length > 0 && (
              <>
                <dt>{trans.__('A suspend keeps')}</dt>
                <dd className="jp-suspend-panel-keeps">
                  {text.keeps.join(', ')}
                </dd>
              </>
            )}
            {text.loses.length > 0 && (
              <>
                <dt>{trans.__('A suspend loses')}</dt>
                <dd className="jp-suspend-panel-loses">
                  {text.loses.join(', ')}
                </dd>
              </>
            )}
            {status.state === 'suspended' && text.while_suspended && (
              <>
                <dt>{trans.__('While suspended')}</dt>
                <dd>{text.while_suspended}</dd>
              </>
            )}
            {status.state === 'suspended' && text.resume_by && (
              <>
                <dt>{trans.__('Resumed by')}</dt>
                <dd>{text.resume_by}</dd>
              </>
            )}
            {status.last_restore && (
              <>
                <dt>{trans.__('Last restore')}</dt>
                <dd>
                  {status.last_restore.restore ?? '—'}
                  {' · '}
                  {trans._n(
                    '%1 checkpoint restored',
                    '%1 checkpoints restored',
                    status.last_restore.checkpoints_restored_count
                  )}
                </dd>
              </>
            )}
            {op && !op.in_progress && (
              <>
                <dt>{trans.__('Last operation')}</dt>
                <dd>
                  {trans.__('%1 %2', op.kind, op.outcome ?? '')}
                  {op.finished ? ` · ${formatClock(op.finished)}` : ''}
                </dd>
              </>
            )}
          </dl>
        )}
        {op && op.in_progress && (
          <ol className="jp-suspend-steps">
            {op.steps.map((step, i) => (
              <li key={i} data-status={step.status}>
                {stepLabel(step.name, trans, text)}: {step.status}
              </li>
            ))}
          </ol>
        )}
        {last && (
          <div className="jp-suspend-panel-cycle">
            {cycleSummary(last, trans)}
          </div>
        )}
        <SnapshotList model={this._snapshots} trans={trans} />
      </div>
    );
  }

  private _options: IStatusViewOptions;
  private _snapshots: SnapshotsModel;
  private _shownState: string | null;
}
