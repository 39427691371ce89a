/**
 * Server answers for the unit tests.
 *
 * `fixtures.json` was recorded from a real jupyter_server with this
 * extension (local backend): GET status while running, the dry-run preflight,
 * a suspend, the status once suspended, after the cold resume, and the
 * timeline of that cycle. Other states are derived from those answers the way
 * `lifecycle.py` builds them.
 *
 * A status here is that of a current server: what may start (`can_*`) and the
 * backend's words (`backend.text`) are added where the recording lacks them;
 * `olderServer` takes them away again.
 */
import type {
  IBackendText,
  IOperation,
  IPreflight,
  IStarted,
  IStatus,
  IStep,
  ITimeline,
  State
} from '../tokens';

import recordedJSON from './fixtures.json';

/** Server JSON, typed as the frontend reads it. */
const recorded = recordedJSON as unknown as {
  status_running: IStatus;
  status_suspended: IStatus;
  status_ready_cold: IStatus;
  preflight: IPreflight;
  started_suspend: IStarted;
  timeline: ITimeline;
};

/** A fresh deep copy, so a test can change it freely. */
function copy<T>(value: T): T {
  return JSON.parse(JSON.stringify(value)) as T;
}

/**
 * The local backend's words (`backend.text`), as the server sends them
 * (`jupyter_suspend/server/wording.py`).
 */
export const LOCAL_TEXT: IBackendText = {
  keeps: ['notebooks and other files', 'application checkpoints'],
  loses: [
    'variables in kernel memory that are not in application checkpoints',
    'tensors in GPU memory (reloaded from checkpoints)'
  ],
  release_step: 'stopping the kernels and releasing their memory',
  restore_step: 'restarting the recorded sessions',
  while_suspended:
    'This server keeps answering; the kernels are stopped and their memory is free.',
  resume_by: 'this server: Resume restarts the recorded sessions'
};

/** `status` as a current server sends it (fields the recording lacks added). */
function current(status: IStatus): IStatus {
  const idle = !status.operation?.in_progress;
  const failed = status.state === 'failed' && idle;
  status.backend.text ??= copy(LOCAL_TEXT);
  status.can_checkpoint ??= status.can_suspend || failed;
  status.can_acknowledge ??= failed;
  return status;
}

/** `status` as a server older than `can_checkpoint` and `backend.text`. */
export function olderServer<T extends IStatus | IPreflight>(answer: T): T {
  const older = copy(answer);
  delete older.backend.text;
  if ('can_checkpoint' in older) {
    delete older.can_checkpoint;
  }
  if ('can_acknowledge' in older) {
    delete older.can_acknowledge;
  }
  return older;
}

export const statusRunning = (): IStatus =>
  current(copy(recorded.status_running));
export const statusSuspended = (): IStatus =>
  current(copy(recorded.status_suspended));
export const statusReadyCold = (): IStatus =>
  current(copy(recorded.status_ready_cold));
export const preflight = (): IPreflight => {
  const answer = copy(recorded.preflight);
  answer.backend.text ??= copy(LOCAL_TEXT);
  return answer;
};
export const startedSuspend = (): IStarted => copy(recorded.started_suspend);
export const timeline = (): ITimeline => copy(recorded.timeline);

export function step(
  name: string,
  status: IStep['status'] = 'running',
  message = ''
): IStep {
  return {
    name,
    status,
    message,
    started: '2026-12-02T15:33:12.516031+00:00',
    finished: status === 'running' ? null : '2026-12-02T15:33:13+00:00',
    detail: {}
  };
}

export function operation(
  kind: IOperation['kind'],
  steps: IStep[],
  inProgress = true
): IOperation {
  return {
    id: `op-${kind}`,
    kind,
    reason: '',
    in_progress: inProgress,
    started: '2026-12-02T15:33:12.500000+00:00',
    finished: inProgress ? null : '2026-12-02T15:33:14+00:00',
    outcome: inProgress ? null : 'succeeded',
    message: '',
    steps
  };
}

/** A status in `state`, as `Lifecycle.status()` reports it. */
export function statusIn(state: State, patch: Partial<IStatus> = {}): IStatus {
  const base = state === 'ready' ? statusReadyCold() : statusRunning();
  const status: IStatus = {
    ...base,
    state,
    restore: null,
    failure: null,
    can_suspend: state === 'running' || state === 'ready',
    can_resume: false,
    can_checkpoint: undefined,
    can_acknowledge: undefined
  };
  switch (state) {
    case 'flushing':
      status.message = 'saving notebooks and application checkpoints';
      status.operation = operation('suspend', [
        step('flush.notebooks', 'ok'),
        step('flush.kernels')
      ]);
      break;
    case 'snapshotting':
      status.message = 'releasing the environment';
      status.operation = operation('suspend', [
        step('flush.notebooks', 'ok'),
        step('flush.kernels', 'ok'),
        step('release')
      ]);
      break;
    case 'suspended':
      return current({ ...statusSuspended(), ...patch });
    case 'waiting_for_capacity':
      status.message = '0.5 GiB memory available, 8.0 GiB required to restore';
      status.operation = operation('resume', [step('restore')]);
      break;
    case 'restoring':
      status.message = 'restarting the recorded sessions';
      status.operation = operation('resume', [step('restore')]);
      break;
    case 'ready':
      status.restore = 'cold';
      break;
    case 'failed':
      status.message = 'no kernel could be restarted';
      status.failure = {
        reason:
          'no kernel could be restarted: nb.ipynb (NoSuchKernel: No such kernel named python3)',
        next_step:
          'Open the notebook and start a kernel by hand, then run it from the top or restore the application checkpoints with %checkpoint restore. POST resume retries.'
      };
      status.can_resume = true;
      break;
  }
  return current({ ...status, ...patch });
}
