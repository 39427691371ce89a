/**
 * Pure mapping from the server's JSON to what the UI shows.
 *
 * Nothing here touches the DOM or the network, so every state the server can
 * report is unit-tested (see `src/__tests__/display.spec.ts`).
 */
import type { TranslationBundle } from '@jupyterlab/translation';

import { backendText, keptItems } from './status';
import type {
  IBackendText,
  ICycle,
  IOperation,
  IPreflight,
  IStatus,
  IStep,
  State
} from './tokens';

/** Visual tone of a state; drives the CSS class of the status item. */
export type Tone = 'ok' | 'busy' | 'warn' | 'error' | 'unknown';

/** What the status bar item and its popup show for one status. */
export interface IStatusDisplay {
  state: State | 'unknown';
  tone: Tone;
  /** Short text of the status bar item. */
  label: string;
  /** One-line headline (popup title, first tooltip line). */
  headline: string;
  /** Further lines: server message, reason, next step, notes. */
  details: string[];
}

export interface IDisplayOptions {
  /** Epoch ms now. */
  now: number;
  /** Epoch ms at which the status was fetched. */
  fetchedAt: number;
  showIdleTime: boolean;
  /** Open notebooks are being pointed back at their restored kernels. */
  reconnecting?: boolean;
}

/** The longest failure reason shown in the status bar itself. */
const MAX_LABEL_REASON = 40;

/**
 * A duration the way people say it: "42 s", "5 min", "2 h 05 min", "3 d 4 h".
 */
export function formatDuration(
  seconds: number,
  trans: TranslationBundle
): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return trans.__('%1 s', s);
  }
  const minutes = Math.floor(s / 60);
  if (minutes < 60) {
    return trans.__('%1 min', minutes);
  }
  const hours = Math.floor(minutes / 60);
  if (hours < 24) {
    return trans.__(
      '%1 h %2 min',
      hours,
      String(minutes % 60).padStart(2, '0')
    );
  }
  return trans.__('%1 d %2 h', Math.floor(hours / 24), hours % 24);
}

/** Seconds with one decimal below a minute, else as `formatDuration`. */
export function formatSeconds(
  seconds: number | null | undefined,
  trans: TranslationBundle
): string {
  if (seconds === null || seconds === undefined) {
    return '—';
  }
  if (seconds < 60) {
    return trans.__('%1 s', seconds.toFixed(1));
  }
  return formatDuration(seconds, trans);
}

/**
 * Idle seconds now: the server's `idle_seconds` aged by the time since it was
 * fetched, so the label does not need a poll per second to stay right.
 */
export function idleSecondsNow(
  status: IStatus,
  fetchedAt: number,
  now: number
): number | null {
  if (status.idle_seconds === null || status.idle_seconds === undefined) {
    return null;
  }
  return status.idle_seconds + Math.max(0, now - fetchedAt) / 1000;
}

/** Seconds in the current state now, aged like `idleSecondsNow`. */
export function secondsInStateNow(
  status: IStatus,
  fetchedAt: number,
  now: number
): number | null {
  if (status.seconds_in_state === undefined) {
    return null;
  }
  return status.seconds_in_state + Math.max(0, now - fetchedAt) / 1000;
}

/** "idle 5 min", or "active" right after activity. */
export function formatIdle(seconds: number, trans: TranslationBundle): string {
  if (seconds < 60) {
    return trans.__('active');
  }
  return trans.__('idle %1', formatDuration(seconds, trans));
}

/** The step an operation is on: the running one, else the last one. */
export function currentStep(operation: IOperation | null): IStep | null {
  if (!operation || operation.steps.length === 0) {
    return null;
  }
  const running = operation.steps.filter(s => s.status === 'running');
  return running.length > 0
    ? running[running.length - 1]
    : operation.steps[operation.steps.length - 1];
}

/**
 * A human name for an operation step. The backend words its own steps
 * (`backend.text`: what releasing and restoring mean for it); without
 * `text` they get the words of a server older than that.
 */
export function stepLabel(
  name: string,
  trans: TranslationBundle,
  text: IBackendText = backendText(null, trans)
): string {
  switch (name) {
    case 'flush.notebooks':
      return trans.__('saving notebooks to disk');
    case 'flush.kernels':
      return trans.__('writing application checkpoints');
    case 'release':
      return text.release_step;
    case 'restore':
      return text.restore_step;
    case 'restore.checkpoints':
      return trans.__('loading application checkpoints');
    default:
      return name;
  }
}

/** The human name of a state (used in headlines and notifications). */
export function stateName(
  state: State | 'unknown',
  trans: TranslationBundle
): string {
  switch (state) {
    case 'running':
      return trans.__('Running');
    case 'flushing':
      return trans.__('Suspending: flushing');
    case 'snapshotting':
      return trans.__('Suspending: snapshotting');
    case 'suspended':
      return trans.__('Suspended');
    case 'waiting_for_capacity':
      return trans.__('Waiting for capacity');
    case 'restoring':
      return trans.__('Restoring');
    case 'ready':
      return trans.__('Ready');
    case 'failed':
      return trans.__('Failed');
    default:
      return trans.__('Unknown');
  }
}

/** The number of application checkpoints the last restore put back. */
export function checkpointsRestored(status: IStatus): number {
  return status.last_restore?.checkpoints_restored_count ?? 0;
}

function truncate(text: string, max: number): string {
  return text.length > max ? text.slice(0, max - 1) + '…' : text;
}

function inProgress(status: IStatus): IOperation | null {
  return status.operation && status.operation.in_progress
    ? status.operation
    : null;
}

/**
 * Map one server status to what the status bar and its popup show.
 *
 * `status` null means no answer yet (or the server does not answer):
 * `error` then says why.
 */
/** One invalid setting, as the server names it. */
export interface IMisconfiguredSetting {
  setting: string;
  message: string;
}

/**
 * The server's answer while a setting is invalid: HTTP 503 with
 * `{"reason": "Misconfigured", "message", "problems": [{setting, message}]}`
 * on every REST call (issue 17 item 1).
 */
export interface IMisconfiguration {
  message: string;
  problems: IMisconfiguredSetting[];
}

/** The misconfiguration an error carries (a 503 "Misconfigured" answer), else null. */
export function misconfiguration(reason: unknown): IMisconfiguration | null {
  const data = (reason as { data?: unknown } | null)?.data;
  const status = (reason as { response?: { status?: number } } | null)?.response
    ?.status;
  if (
    status !== 503 ||
    !data ||
    typeof data !== 'object' ||
    (data as { reason?: unknown }).reason !== 'Misconfigured'
  ) {
    return null;
  }
  const body = data as { message?: unknown; problems?: unknown };
  const problems = Array.isArray(body.problems)
    ? body.problems
        .filter(
          (p): p is { setting: unknown; message: unknown } =>
            !!p && typeof p === 'object'
        )
        .map(p => ({
          setting: String(p.setting ?? ''),
          message: String(p.message ?? '')
        }))
    : [];
  return {
    message: typeof body.message === 'string' ? body.message : '',
    problems
  };
}

/** What the status bar shows while the server refuses to work misconfigured. */
export function describeMisconfiguration(
  misconfigured: IMisconfiguration,
  trans: TranslationBundle
): IStatusDisplay {
  const first = misconfigured.problems[0]?.setting;
  return {
    state: 'unknown',
    tone: 'error',
    label: first
      ? trans.__('Suspend: misconfigured (%1)', first)
      : trans.__('Suspend: misconfigured'),
    headline:
      misconfigured.message ||
      trans.__('jupyter-suspend is misconfigured: it does nothing until fixed'),
    details: [
      ...misconfigured.problems.map(p => `${p.setting}: ${p.message}`),
      trans.__(
        'Nothing is suspended automatically or by hand until the setting is fixed and the server restarted.'
      )
    ]
  };
}

export function describeStatus(
  status: IStatus | null,
  options: IDisplayOptions,
  trans: TranslationBundle,
  error: string | null = null
): IStatusDisplay {
  if (!status) {
    return {
      state: 'unknown',
      tone: 'unknown',
      label: error ? trans.__('Suspend: unavailable') : trans.__('Suspend: …'),
      headline: error
        ? trans.__('The suspend service does not answer')
        : trans.__('Asking the server for the suspend state…'),
      details: error ? [error] : []
    };
  }
  const details: string[] = [];
  const operation = inProgress(status);
  const step = currentStep(operation);
  const text = backendText(status, trans);
  const idle =
    options.showIdleTime &&
    (status.state === 'running' || status.state === 'ready')
      ? idleSecondsNow(status, options.fetchedAt, options.now)
      : null;
  const idleText = idle !== null ? formatIdle(idle, trans) : null;
  // How long the environment has been down: what the user weighs a resume against.
  const inState = secondsInStateNow(status, options.fetchedAt, options.now);
  const forText = inState !== null ? formatDuration(inState, trans) : null;
  let tone: Tone;
  let label: string;
  let headline: string;

  switch (status.state) {
    case 'running': {
      tone = 'ok';
      headline = trans.__('Running');
      if (operation && operation.kind === 'checkpoint') {
        label = trans.__('Running · writing application checkpoints…');
        headline = trans.__('Running: writing application checkpoints');
      } else {
        label = idleText
          ? trans.__('Running · %1', idleText)
          : trans.__('Running');
      }
      break;
    }
    case 'flushing':
    case 'snapshotting': {
      tone = 'busy';
      const name = stateName(status.state, trans);
      label = step
        ? trans.__('%1 (%2)', name, stepLabel(step.name, trans, text))
        : name;
      headline = trans.__('Suspending');
      break;
    }
    case 'suspended':
      tone = 'warn';
      label = forText
        ? trans.__('Suspended · %1', forText)
        : trans.__('Suspended');
      headline = status.can_resume
        ? trans.__('Suspended: resume to bring the kernels back')
        : trans.__('Suspended');
      break;
    case 'waiting_for_capacity':
      tone = 'warn';
      label = forText
        ? trans.__('Waiting for capacity · %1', forText)
        : trans.__('Waiting for capacity');
      headline = trans.__(
        'Waiting for capacity: the resume starts as soon as it is free'
      );
      break;
    case 'restoring':
      tone = 'busy';
      label = step
        ? trans.__('Restoring (%1)', stepLabel(step.name, trans, text))
        : trans.__('Restoring');
      headline = trans.__('Restoring');
      break;
    case 'ready': {
      tone = 'ok';
      const lost = status.last_restore?.live_lost ?? [];
      if (status.restore === 'live' && lost.length > 0) {
        // The return was live, but a kernel restarted or stopped since: its
        // memory is not the restored one, and the headline must not say so.
        tone = 'warn';
        headline = trans._n(
          'Ready: the live session came back, but %1 kernel was restarted or stopped since (its restored memory is gone)',
          'Ready: the live session came back, but %1 kernels were restarted or stopped since (their restored memory is gone)',
          lost.length
        );
        label = trans._n(
          'Ready (live, %1 kernel restarted since)',
          'Ready (live, %1 kernels restarted since)',
          lost.length
        );
      } else if (status.restore === 'live') {
        headline = trans.__('Ready: the live session came back');
        label = trans.__('Ready (live)');
      } else if (status.restore === 'cold') {
        const n = checkpointsRestored(status);
        const what = trans._n(
          '%1 checkpoint restored',
          '%1 checkpoints restored',
          n
        );
        headline = trans.__(
          'Ready: cold start, variables come back only from checkpoints (%1)',
          what
        );
        label = trans.__('Ready (cold, %1)', what);
      } else {
        headline = trans.__('Ready');
        label = trans.__('Ready');
      }
      if (options.reconnecting) {
        // Until then a cell run in an open notebook has no kernel to go to.
        label = trans.__('%1 · reconnecting notebooks…', label);
        details.push(
          trans.__('Reconnecting open notebooks to their restored kernels…')
        );
      } else if (operation && operation.kind === 'checkpoint') {
        label = trans.__('%1 · writing application checkpoints…', label);
      } else if (idleText) {
        label = trans.__('%1 · %2', label, idleText);
      }
      break;
    }
    case 'failed': {
      tone = 'error';
      const reason = status.failure?.reason || status.message;
      label = reason
        ? trans.__('Failed: %1', truncate(reason, MAX_LABEL_REASON))
        : trans.__('Failed');
      headline = trans.__('Failed');
      if (status.failure) {
        details.push(trans.__('Reason: %1', status.failure.reason));
        if (status.failure.next_step) {
          details.push(trans.__('Next step: %1', status.failure.next_step));
        }
      }
      break;
    }
    default:
      tone = 'unknown';
      label = String(status.state);
      headline = String(status.state);
  }

  if (status.message && status.state !== 'failed') {
    details.push(status.message);
  }
  if (step && operation) {
    details.push(
      trans.__('Current step: %1', stepLabel(step.name, trans, text)) +
        (step.message ? ` — ${step.message}` : '')
    );
  }
  const last = status.operation;
  if (last && !last.in_progress && last.outcome === 'aborted') {
    details.push(trans.__('Last %1 aborted: %2', last.kind, last.message));
  } else if (
    last &&
    !last.in_progress &&
    last.outcome === 'failed' &&
    status.state !== 'failed'
  ) {
    details.push(trans.__('Last %1 failed: %2', last.kind, last.message));
  }
  if (status.cold_start && status.cold_start.message) {
    details.push(
      trans.__('Server started cold: %1', status.cold_start.message)
    );
  }
  return { state: status.state, tone, label, headline, details };
}

/** "Last cycle: resumed (cold) — reason". */
export function cycleHeadline(cycle: ICycle, trans: TranslationBundle): string {
  const outcome: { [key: string]: string } = {
    in_progress: trans.__('in progress'),
    suspended: trans.__('suspended'),
    resumed: trans.__('resumed'),
    aborted: trans.__('aborted'),
    failed: trans.__('failed')
  };
  const restore =
    cycle.restore === 'live'
      ? trans.__(' (live)')
      : cycle.restore === 'cold'
        ? trans.__(' (cold)')
        : '';
  return (
    trans.__(
      'Last cycle: %1%2',
      outcome[cycle.outcome] ?? cycle.outcome,
      restore
    ) + (cycle.reason ? ` — ${cycle.reason}` : '')
  );
}

/** "flush: 0.4 s", … for each duration the cycle measured. */
export function cycleDurations(
  cycle: ICycle,
  trans: TranslationBundle
): string[] {
  const d = cycle.durations;
  const parts: [string, number | null | undefined][] = [
    [trans.__('idle before'), d['idle_before_suspend']],
    [trans.__('flush'), d['flush']],
    [trans.__('suspend'), d['suspend']],
    [trans.__('suspended for'), d['suspended']],
    [trans.__('waited for capacity'), d['waiting_for_capacity']],
    [trans.__('resume to runnable cell'), d['resume_to_runnable']]
  ];
  return parts
    .filter(([, value]) => value !== null && value !== undefined)
    .map(([name, value]) => `${name}: ${formatSeconds(value, trans)}`);
}

/** Lines describing one suspend/resume cycle (the tooltip). */
export function describeCycle(
  cycle: ICycle,
  trans: TranslationBundle
): string[] {
  const lines = [cycleHeadline(cycle, trans)];
  const requested = cycle.times['suspend_requested'];
  if (requested) {
    lines.push(trans.__('Suspend requested: %1', formatClock(requested)));
  }
  lines.push(...cycleDurations(cycle, trans));
  const totals = cycle.released_totals;
  const gpuHours = totals ? totals.gpu_hours : undefined;
  if (gpuHours === null) {
    // No NVML: unknown, which is not the same as none.
    lines.push(trans.__('GPU hours released: not measured'));
  } else if (gpuHours !== undefined && gpuHours > 0) {
    lines.push(trans.__('GPU hours released: %1', gpuHours.toFixed(3)));
  }
  for (const note of cycle.notes) {
    if (note) {
      lines.push(note);
    }
  }
  return lines;
}

/** The last cycle in one line (the status bar panel). */
export function cycleSummary(cycle: ICycle, trans: TranslationBundle): string {
  return [cycleHeadline(cycle, trans), ...cycleDurations(cycle, trans)].join(
    ' · '
  );
}

/** "14:03:12" in the browser's time zone, from an ISO time. */
export function formatClock(iso: string): string {
  const date = new Date(iso);
  if (isNaN(date.getTime())) {
    return iso;
  }
  return date.toLocaleTimeString();
}

/** A yes/no line of the preflight: what this backend keeps. */
export interface IKeepLine {
  label: string;
  kept: boolean;
}

export interface IPreflightKernelView {
  /** The notebook path, or the kernel when no notebook. */
  title: string;
  subtitle: string;
  keeps: string[];
  loses: string[];
  /** Why the helper did not answer (busy, absent…), if it matters. */
  note: string | null;
}

/** Everything the confirm dialog shows, derived from the dry run. */
export interface IPreflightView {
  backend: string;
  /** What holds while suspended (the backend's words; may be empty). */
  whileSuspended: string;
  /** Who or what resumes it (the backend's words; may be empty). */
  resumeBy: string;
  keeps: IKeepLine[];
  releases: string[];
  kernels: IPreflightKernelView[];
  notes: string[];
  /** Reasons a suspend would abort now (busy kernels…). */
  blocking: string[];
  /** Unsaved documents in open JupyterLab pages, saved before the flush. */
  unsaved?: string[];
  canSuspend: boolean;
}

/** Map the dry-run preflight to the content of the confirm dialog. */
export function preflightToView(
  preflight: IPreflight,
  trans: TranslationBundle
): IPreflightView {
  // The backend's own words when it has them, else the flags.
  const text = preflight.backend.text;
  const keeps: IKeepLine[] = text
    ? [
        ...text.keeps.map(label => ({ label, kept: true })),
        ...text.loses.map(label => ({ label, kept: false }))
      ]
    : keptItems(trans).map(item => ({
        label: item.label,
        kept: preflight.keeps[item.preflight]
      }));
  const releases: string[] = [];
  if (preflight.releases.kernel_memory) {
    releases.push(trans.__('kernel memory and GPU memory'));
  }
  if (preflight.releases.node) {
    releases.push(trans.__('the node and its accelerators'));
  }
  const kernels = preflight.kernels.map(k => {
    let note: string | null = null;
    switch (k.helper) {
      case 'busy':
        note = trans.__(
          'Busy: it cannot write checkpoints now (%1)',
          k.helper_message
        );
        break;
      case 'absent':
        note = trans.__(
          'No checkpoint helper loaded (%load_ext jupyter_suspend): only files are kept'
        );
        break;
      case 'error':
        note = trans.__('The checkpoint helper failed: %1', k.helper_message);
        break;
      case 'not_running':
        note = trans.__('Not running: %1', k.helper_message);
        break;
    }
    return {
      title: k.path || trans.__('kernel %1', k.kernel_id.slice(0, 8)),
      subtitle: trans.__('%1 · %2', k.kernel_name, k.execution_state),
      keeps: k.keeps,
      loses: k.loses,
      note
    };
  });
  return {
    backend: preflight.backend.name,
    whileSuspended: text?.while_suspended ?? '',
    resumeBy: text?.resume_by ?? '',
    keeps,
    releases,
    kernels,
    notes: preflight.notes,
    blocking: preflight.would_abort,
    unsaved: (preflight.unsaved_documents?.unsaved ?? []).map(u => u.path),
    canSuspend: preflight.can_suspend
  };
}

/** "1.5 GiB", "512 MiB", "12 KiB". */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = Math.max(0, bytes);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const digits = unit === 0 || value >= 100 ? 0 : 1;
  return `${value.toFixed(digits)} ${units[unit]}`;
}

/** What a finished suspend released, from its `release` step. */
export function releasedSummary(
  operation: IOperation | null,
  trans: TranslationBundle
): string | null {
  const step = operation?.steps.find(s => s.name === 'release');
  const released = step?.detail['released'] as
    { kernel_memory_bytes?: number; gpu_memory_bytes?: number } | undefined;
  if (!released) {
    return null;
  }
  const parts = [
    trans.__('%1 kernel memory', formatBytes(released.kernel_memory_bytes ?? 0))
  ];
  if (released.gpu_memory_bytes) {
    parts.push(
      trans.__('%1 GPU memory', formatBytes(released.gpu_memory_bytes))
    );
  }
  return trans.__('released %1', parts.join(', '));
}

/** The progress line of an operation in progress (notifications). */
export function progressMessage(
  status: IStatus,
  trans: TranslationBundle
): string {
  const step = currentStep(status.operation);
  const name =
    status.operation?.kind === 'checkpoint'
      ? trans.__('Application checkpoints')
      : stateName(status.state, trans);
  return step
    ? trans.__(
        '%1: %2…',
        name,
        stepLabel(step.name, trans, backendText(status, trans))
      )
    : name;
}
