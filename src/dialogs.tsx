/** Dialog bodies: the suspend confirmation, the timeline, the verdict. */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import {
  describeCycle,
  formatClock,
  formatSeconds,
  IPreflightView
} from './display';
import type { ICycle, ITimeline } from './tokens';
import type { IVerifyResult } from './verify';

/** What the preflight says a suspend keeps and loses, per kernel. */
export function PreflightBody(props: {
  view: IPreflightView;
  trans: TranslationBundle;
}): React.ReactElement {
  const { view, trans } = props;
  return (
    <div className="jp-suspend-preflight">
      {/* What would stop the suspend comes first: it decides the button. */}
      {view.blocking.length > 0 && (
        <div className="jp-suspend-blocking" role="alert">
          <strong>{trans.__('A suspend now would be aborted:')}</strong>
          <ul>
            {view.blocking.map(line => (
              <li key={line}>{line}</li>
            ))}
          </ul>
        </div>
      )}
      {(view.unsaved ?? []).length > 0 && (
        <p className="jp-suspend-unsaved">
          {trans.__(
            'Unsaved documents in open JupyterLab pages are saved first: %1.',
            view.unsaved!.join(', ')
          )}
        </p>
      )}
      <p className="jp-suspend-preflight-intro">
        {trans.__(
          'Notebooks are saved and application checkpoints written first; if any of that fails, nothing is suspended. Backend: %1.',
          view.backend
        )}
      </p>
      <ul className="jp-suspend-keeps" aria-label={trans.__('What is kept')}>
        {view.keeps.map(line => (
          <li
            key={line.label}
            className={line.kept ? 'jp-suspend-kept' : 'jp-suspend-lost'}
            data-kept={line.kept ? 'true' : 'false'}
          >
            <span className="jp-suspend-mark">{line.kept ? '✓' : '✗'}</span>
            {line.label}
            {': '}
            <strong>{line.kept ? trans.__('kept') : trans.__('lost')}</strong>
          </li>
        ))}
      </ul>
      {view.releases.length > 0 && (
        <p className="jp-suspend-releases">
          {trans.__('Released while suspended: %1.', view.releases.join(', '))}
        </p>
      )}
      {view.whileSuspended && (
        <p className="jp-suspend-while-suspended">
          {trans.__('While suspended: %1', view.whileSuspended)}
        </p>
      )}
      {view.resumeBy && (
        <p className="jp-suspend-resume-by">
          {trans.__('Resumed by: %1', view.resumeBy)}
        </p>
      )}
      {view.kernels.length === 0 ? (
        <p className="jp-suspend-no-kernels">
          {trans.__('No kernel is running: only files are involved.')}
        </p>
      ) : (
        <table className="jp-suspend-kernels">
          <thead>
            <tr>
              <th>{trans.__('Kernel')}</th>
              <th>{trans.__('Keeps')}</th>
              <th>{trans.__('Loses')}</th>
            </tr>
          </thead>
          <tbody>
            {view.kernels.map(kernel => (
              <tr key={kernel.title} className="jp-suspend-kernel">
                <td>
                  <div className="jp-suspend-kernel-title">{kernel.title}</div>
                  <div className="jp-suspend-kernel-subtitle">
                    {kernel.subtitle}
                  </div>
                  {kernel.note && (
                    <div className="jp-suspend-kernel-note">{kernel.note}</div>
                  )}
                </td>
                <td className="jp-suspend-kernel-keeps">
                  <ul>
                    {kernel.keeps.map(item => (
                      <li key={item}>{item}</li>
                    ))}
                  </ul>
                </td>
                <td className="jp-suspend-kernel-loses">
                  <ul>
                    {kernel.loses.map(item => (
                      <li key={item}>{item}</li>
                    ))}
                  </ul>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {view.notes.length > 0 && (
        <ul className="jp-suspend-notes">
          {view.notes.map(note => (
            <li key={note}>{note}</li>
          ))}
        </ul>
      )}
    </div>
  );
}

export interface IConfirmResult {
  confirmed: boolean;
  force: boolean;
}

/** Ask before suspending, showing the preflight. */
export async function confirmSuspend(
  view: IPreflightView,
  trans: TranslationBundle
): Promise<IConfirmResult> {
  const blocked = view.blocking.length > 0;
  // The primary button says what will really happen: with something in the
  // way, keep running (the default) or force, never a Suspend that aborts.
  const buttons = blocked
    ? [
        Dialog.warnButton({
          label: trans.__('Force suspend (running cells are lost)'),
          caption: trans.__(
            'Busy kernels cannot write their checkpoints; their running cell and unsaved variables are lost.'
          ),
          actions: ['force']
        }),
        Dialog.okButton({
          label: trans.__('Keep running'),
          caption: trans.__(
            'Cancel: wait for the cell to finish or interrupt it, then suspend'
          ),
          accept: false
        })
      ]
    : [
        Dialog.cancelButton({ label: trans.__('Cancel') }),
        Dialog.warnButton({ label: trans.__('Suspend') })
      ];
  const result = await showDialog({
    title: blocked
      ? trans.__('A suspend now would be aborted')
      : trans.__('Suspend this environment?'),
    body: <PreflightBody view={view} trans={trans} />,
    buttons,
    defaultButton: blocked ? 1 : 0
  });
  const force = result.button.actions.includes('force');
  return {
    confirmed: blocked ? force : result.button.accept,
    force
  };
}

/** The timeline: one row per cycle, newest first. */
/** The timeline's GPU-hours total: "not measured" when no cycle was (never 0), and how many were not. */
export function gpuHoursText(
  totals: ITimeline['totals'],
  trans: TranslationBundle
): string {
  if (totals.gpu_hours_released === null) {
    return trans.__('not measured');
  }
  const text = totals.gpu_hours_released.toFixed(3);
  return totals.gpu_hours_unknown_cycles > 0
    ? trans.__(
        '%1 (%2 cycle(s) not measured)',
        text,
        totals.gpu_hours_unknown_cycles
      )
    : text;
}

export function TimelineBody(props: {
  timeline: ITimeline;
  trans: TranslationBundle;
}): React.ReactElement {
  const { timeline, trans } = props;
  const cycles: ICycle[] = timeline.cycles.slice().reverse().slice(0, 20);
  if (cycles.length === 0) {
    return (
      <div className="jp-suspend-timeline">
        {trans.__('No suspend has been recorded yet.')}
      </div>
    );
  }
  return (
    <div className="jp-suspend-timeline">
      <p>
        {trans.__(
          '%1 cycle(s), %2 resumed, %3 aborted; GPU hours released: %4',
          timeline.totals.cycles,
          timeline.totals.resumed,
          timeline.totals.aborted,
          gpuHoursText(timeline.totals, trans)
        )}
      </p>
      <table className="jp-suspend-timeline-table">
        <thead>
          <tr>
            <th>{trans.__('Suspended at')}</th>
            <th>{trans.__('Outcome')}</th>
            <th>{trans.__('Flush')}</th>
            <th>{trans.__('Suspend')}</th>
            <th>{trans.__('Suspended for')}</th>
            <th>{trans.__('Resume → runnable')}</th>
          </tr>
        </thead>
        <tbody>
          {cycles.map(cycle => (
            <tr key={cycle.id} title={describeCycle(cycle, trans).join('\n')}>
              <td>
                {cycle.times['suspend_requested']
                  ? formatClock(cycle.times['suspend_requested'])
                  : '—'}
              </td>
              <td>
                {cycle.outcome}
                {cycle.restore ? ` (${cycle.restore})` : ''}
              </td>
              <td>{formatSeconds(cycle.durations['flush'], trans)}</td>
              <td>{formatSeconds(cycle.durations['suspend'], trans)}</td>
              <td>{formatSeconds(cycle.durations['suspended'], trans)}</td>
              <td>
                {formatSeconds(cycle.durations['resume_to_runnable'], trans)}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

export async function showTimeline(
  timeline: ITimeline,
  trans: TranslationBundle
): Promise<void> {
  await showDialog({
    title: trans.__('Suspend timeline'),
    body: <TimelineBody timeline={timeline} trans={trans} />,
    buttons: [Dialog.okButton({ label: trans.__('Close') })]
  });
}

/** The verdict of the verify helper, plainly. */
export function VerdictBody(props: {
  result: IVerifyResult;
  trans: TranslationBundle;
}): React.ReactElement {
  const { result, trans } = props;
  if (!result.verdict) {
    return (
      <div className="jp-suspend-verdict" data-verdict="NONE">
        <div className="jp-suspend-verdict-word">{trans.__('NO VERDICT')}</div>
        <p>
          {result.error ??
            trans.__(
              'The kernel published no verdict (is jupyter_suspend installed in it?)'
            )}
        </p>
      </div>
    );
  }
  const { verdict } = result;
  return (
    <div
      className={`jp-suspend-verdict jp-suspend-verdict-${verdict.verdict}`}
      data-verdict={verdict.verdict}
    >
      <div className="jp-suspend-verdict-word">{verdict.verdict}</div>
      <p className="jp-suspend-verdict-message">{verdict.message}</p>
      {verdict.details !== undefined && verdict.details !== null && (
        <details>
          <summary>{trans.__('Details')}</summary>
          <pre>{JSON.stringify(verdict.details, null, 2)}</pre>
        </details>
      )}
    </div>
  );
}

export async function showVerdict(
  result: IVerifyResult,
  trans: TranslationBundle
): Promise<void> {
  await showDialog({
    title: trans.__('Live state verification'),
    body: <VerdictBody result={result} trans={trans} />,
    buttons: [Dialog.okButton({ label: trans.__('Close') })]
  });
}

/** Plain text that keeps its line breaks (reasons, next steps, paths). */
export function TextBody(props: { text: string }): React.ReactElement {
  return <div className="jp-suspend-text">{props.text}</div>;
}
