/**
 * Reading `GET status`: what may start now, the backend's own words, and the
 * transitions the plugin reacts to.
 *
 * The server decides what may start (`can_suspend`, `can_resume`,
 * `can_checkpoint`, `can_acknowledge`) and words what a suspend does
 * (`backend.text`); the plugin reads both and never re-derives the state
 * table. Servers older than those fields get one small fallback each.
 */
import type { TranslationBundle } from '@jupyterlab/translation';

import type {
  IBackendText,
  ICapabilities,
  IPreflight,
  IStatus
} from './tokens';

/** The operations a user can start, as the commands name them. */
export interface IAllowed {
  suspend: boolean;
  resume: boolean;
  /** Write application checkpoints without suspending. */
  checkpoint: boolean;
  /** Leave the failed state without resuming. */
  acknowledge: boolean;
}

/**
 * What may start now, as the server says. Before the first answer only a
 * suspend and a checkpoint are offered: their flows ask the server first and
 * say why when it refuses.
 */
export function allowedActions(status: IStatus | null): IAllowed {
  if (!status) {
    return {
      suspend: true,
      resume: false,
      checkpoint: true,
      acknowledge: false
    };
  }
  const older =
    status.can_checkpoint === undefined || status.can_acknowledge === undefined
      ? olderServerAllowed(status)
      : null;
  return {
    suspend: status.can_suspend,
    resume: status.can_resume,
    checkpoint: status.can_checkpoint ?? older!.checkpoint,
    acknowledge: status.can_acknowledge ?? older!.acknowledge
  };
}

/**
 * For a server without `can_checkpoint` / `can_acknowledge`: a checkpoint may
 * start wherever a suspend may, and in the failed state; an acknowledge only
 * in the failed state; neither while an operation runs.
 */
function olderServerAllowed(
  status: IStatus
): Pick<IAllowed, 'checkpoint' | 'acknowledge'> {
  const failed = status.state === 'failed' && !status.operation?.in_progress;
  return { checkpoint: status.can_suspend || failed, acknowledge: failed };
}

/** A key that changes whenever `allowedActions` does. */
export function allowedKey(status: IStatus | null): string {
  const allowed = allowedActions(status);
  return (Object.keys(allowed) as (keyof IAllowed)[])
    .filter(action => allowed[action])
    .join(',');
}

/** One thing a suspend may keep: its capability flag, preflight key, words. */
export interface IKeptItem {
  capability: keyof ICapabilities;
  preflight: keyof IPreflight['keeps'];
  label: string;
}

/**
 * What a suspend may keep, in the words the UI uses when the server gives
 * none (a server older than `backend.text`).
 */
export function keptItems(trans: TranslationBundle): IKeptItem[] {
  return [
    {
      capability: 'keeps_files',
      preflight: 'files',
      label: trans.__('Files and saved notebooks')
    },
    {
      capability: 'keeps_application_checkpoints',
      preflight: 'application_checkpoints',
      label: trans.__('Application checkpoints')
    },
    {
      capability: 'keeps_live_memory',
      preflight: 'live_memory',
      label: trans.__('Live memory (variables of running kernels)')
    },
    {
      capability: 'keeps_gpu_memory',
      preflight: 'gpu_memory',
      label: trans.__('GPU memory')
    }
  ];
}

/**
 * The backend's words for what a suspend keeps, loses and does
 * (`backend.text` of the status). A server without them gets plain words
 * built from the capability flags.
 */
export function backendText(
  status: IStatus | null,
  trans: TranslationBundle
): IBackendText {
  const text = status?.backend.text;
  if (text) {
    return text;
  }
  const capabilities = status?.backend.capabilities;
  const keeps: string[] = [];
  const loses: string[] = [];
  if (capabilities) {
    for (const item of keptItems(trans)) {
      (capabilities[item.capability] ? keeps : loses).push(item.label);
    }
  }
  return {
    keeps,
    loses,
    release_step: trans.__('releasing the environment'),
    restore_step: trans.__('bringing the environment back'),
    while_suspended: '',
    resume_by: ''
  };
}

/**
 * Whether `status` shows a resume that ended (ready) since `previous`: the
 * state became ready, or a later restore replaced the one seen before. A
 * first status (no `previous`) shows none: that restore happened before this
 * page looked.
 */
export function resumedSince(
  previous: IStatus | null,
  status: IStatus
): boolean {
  if (!previous || status.state !== 'ready') {
    return false;
  }
  return (
    previous.state !== 'ready' ||
    previous.last_restore?.operation_id !== status.last_restore?.operation_id
  );
}

/** Whether `status` shows the environment newly suspended since `previous`. */
export function suspendedSince(
  previous: IStatus | null,
  status: IStatus
): boolean {
  return (
    !!previous && previous.state !== 'suspended' && status.state === 'suspended'
  );
}
