import { Token } from '@lumino/coreutils';
import { ISignal } from '@lumino/signaling';

/** The id of the main plugin; its settings live in `schema/plugin.json`. */
export const PLUGIN_ID = 'jupyter-suspend:plugin';

/** The `jupyter_events` schema every lifecycle transition is emitted with. */
export const EVENT_SCHEMA_ID =
  'https://schema.jupyter.org/jupyter_suspend/lifecycle/v1';

/** The mime type `%verify_live_state` publishes its verdict with. */
export const VERDICT_MIME = 'application/vnd.jupyter-suspend.verdict+json';

/** Translation domain of every string of this extension. */
export const TRANSLATION_DOMAIN = 'jupyter_suspend';

/**
 * The command ids. The ids are stable (toolbar entries in settings, shortcuts
 * and tests name them); the names here say what each does.
 */
export namespace CommandIDs {
  export const suspend = 'jupyter-suspend:suspend';
  /** Write application checkpoints now, without suspending. */
  export const writeCheckpoints = 'jupyter-suspend:checkpoint';
  export const resume = 'jupyter-suspend:resume';
  /** Leave the failed state without resuming the recorded sessions. */
  export const acknowledge = 'jupyter-suspend:acknowledge';
  /** Run the live-state check (`%verify_live_state`) in a notebook. */
  export const verifyLiveState = 'jupyter-suspend:verify';
  export const timeline = 'jupyter-suspend:timeline';
  /** Load the application checkpoints into kernels a cold restore restarted. */
  export const loadCheckpoints = 'jupyter-suspend:restore-checkpoints';
}

/** Lifecycle states, spelled exactly as the server spells them. */
export type State =
  | 'running'
  | 'flushing'
  | 'snapshotting'
  | 'suspended'
  | 'waiting_for_capacity'
  | 'restoring'
  | 'ready'
  | 'failed';

export const STATES: ReadonlyArray<State> = [
  'running',
  'flushing',
  'snapshotting',
  'suspended',
  'waiting_for_capacity',
  'restoring',
  'ready',
  'failed'
];

export type RestoreKind = 'live' | 'cold';
export type OperationKind = 'suspend' | 'resume' | 'checkpoint';
export type Outcome = 'succeeded' | 'aborted' | 'failed';

/** One step of an operation (`operation.steps[]` of GET status). */
export interface IStep {
  name: string;
  status: 'running' | 'ok' | 'failed' | 'skipped' | string;
  message: string;
  started: string;
  finished: string | null;
  detail: { [key: string]: unknown };
}

/** The current or last operation. */
export interface IOperation {
  id: string;
  kind: OperationKind;
  reason: string;
  in_progress: boolean;
  started: string;
  finished: string | null;
  outcome: Outcome | null;
  message: string;
  steps: IStep[];
}

export interface IFailure {
  reason: string;
  next_step: string;
}

export interface ICapabilities {
  keeps_files: boolean;
  keeps_application_checkpoints: boolean;
  keeps_live_memory: boolean;
  keeps_gpu_memory: boolean;
  releases_kernel_memory: boolean;
  releases_node: boolean;
  needs_sidecar: boolean;
  server_survives_suspend: boolean;
  resume_from_server: boolean;
}

/**
 * The backend's own words for what a suspend keeps, loses and does
 * (`backend.text` of GET status): the UI shows these rather than its own.
 */
export interface IBackendText {
  keeps: string[];
  loses: string[];
  /** The step that releases the environment ("stopping the kernels"). */
  release_step: string;
  /** The step that brings it back ("restarting the recorded sessions"). */
  restore_step: string;
  /** What holds while suspended. */
  while_suspended: string;
  /** Who or what resumes it. */
  resume_by: string;
}

export interface IBackend {
  name: string;
  capabilities: ICapabilities;
  /** Absent from servers older than the field (see `backendText`). */
  text?: IBackendText;
  [key: string]: unknown;
}

export interface IColdStart {
  previous_state: State;
  previous_time: string | null;
  message: string;
  next_step: string;
}

/** Per kernel: what `POST resume` put back (`last_restore.checkpoints_restored`). */
export interface IRestoredCheckpoints {
  path: string | null;
  outcome: string;
  message: string;
  restored: string[];
  missing: string[];
}

export interface ILastRestore {
  operation_id: string | null;
  cycle_id: string | null;
  restore: RestoreKind | null;
  time: string | null;
  first_cell_runnable_at: string | null;
  kernels: { kernel_id: string; path: string | null; error: string | null }[];
  checkpoints_restored: { [kernelId: string]: IRestoredCheckpoints };
  checkpoints_restored_count: number;
  verification: unknown;
}

/** `GET jupyter-suspend/api/status`. */
export interface IStatus {
  state: State;
  since: string;
  message: string;
  restore: RestoreKind | null;
  failure: IFailure | null;
  operation: IOperation | null;
  backend: IBackend;
  last_activity: string | null;
  idle_seconds: number | null;
  /** Seconds since the state was entered (server clock). */
  seconds_in_state?: number;
  can_suspend: boolean;
  can_resume: boolean;
  /** Absent from older servers (see `allowedActions`). */
  can_checkpoint?: boolean;
  /** Absent from older servers (see `allowedActions`). */
  can_acknowledge?: boolean;
  cold_start: IColdStart | null;
  last_restore: ILastRestore | null;
  server?: { boot_id: string };
}

/** One kernel in the dry-run preflight. */
export interface IPreflightKernel {
  kernel_id: string;
  kernel_name: string;
  path: string | null;
  session_id: string | null;
  execution_state: string;
  helper: 'loaded' | 'error' | 'absent' | 'busy' | 'not_running' | string;
  helper_message: string;
  registered: string[];
  keeps: string[];
  loses: string[];
}

/** `POST suspend {"dry_run": true}`. */
export interface IPreflight {
  state: State;
  backend: IBackend;
  keeps: {
    files: boolean;
    application_checkpoints: boolean;
    live_memory: boolean;
    gpu_memory: boolean;
  };
  releases: { kernel_memory: boolean; node: boolean };
  kernels: IPreflightKernel[];
  notes: string[];
  would_abort: string[];
  can_suspend: boolean;
}

/** The answer of a POST that started an operation (202). */
export interface IStarted {
  operation: IOperation;
  status: IStatus;
}

/** One suspend/resume cycle of `GET timeline`. */
export interface ICycle {
  id: string;
  reason: string;
  outcome: 'in_progress' | 'suspended' | 'resumed' | 'aborted' | 'failed';
  restore: RestoreKind | null;
  kernels: number;
  backend?: string | null;
  notes: string[];
  times: { [mark: string]: string | null };
  durations: { [name: string]: number | null };
  released_totals: {
    kernel_memory_gib_hours: number;
    gpu_memory_gib_hours: number;
    gpu_hours: number;
    ongoing: boolean;
  };
  checkpoints_restored?: { [kernelId: string]: IRestoredCheckpoints } | null;
}

export interface ITimeline {
  cycles: ICycle[];
  totals: {
    cycles: number;
    resumed: number;
    aborted: number;
    gpu_hours_released: number;
    kernel_memory_gib_hours_released: number;
  };
}

/** A lifecycle event as it reaches the browser on `/api/events/subscribe`. */
export interface ILifecycleEvent {
  schema_id: string;
  state: State;
  previous_state: State;
  message?: string;
  backend: string;
  operation_id?: string;
  operation_kind?: OperationKind;
  outcome?: Outcome;
  restore?: RestoreKind;
  reason?: string;
  next_step?: string;
}

/** The verdict `%verify_live_state` publishes. */
export type VerdictKind = 'LIVE' | 'COLD' | 'MISMATCH';

export interface IVerdict {
  verdict: VerdictKind;
  kernel_id?: string;
  message: string;
  details?: unknown;
  checkpoints_restored?: unknown[];
}

/** The user's settings (see `schema/plugin.json`). */
export interface ISettings {
  confirmBeforeSuspend: boolean;
  pollInterval: number;
  showIdleTime: boolean;
  verifyMode: 'insert-cell' | 'scratch';
}

export const DEFAULT_SETTINGS: ISettings = {
  confirmBeforeSuspend: true,
  pollInterval: 15,
  showIdleTime: true,
  verifyMode: 'insert-cell'
};

/** The shared model of the environment's suspend state. */
export interface ISuspendModel {
  /** The last status fetched, or null before the first answer. */
  readonly status: IStatus | null;
  /** The last error fetching the status, or null. */
  readonly error: string | null;
  /** Epoch ms at which `status` was fetched (to age `idle_seconds`). */
  readonly fetchedAt: number;
  /** The last timeline fetched (refreshed when an operation ends). */
  readonly timeline: ITimeline | null;
  /** Emits after every change of status, error or timeline. */
  readonly changed: ISignal<ISuspendModel, void>;
  /** Whether open notebooks are being reconnected after a restore. */
  readonly reconnecting: boolean;
  /** Emits each lifecycle event received from the server. */
  readonly lifecycleEvent: ISignal<ISuspendModel, ILifecycleEvent>;
  /** Fetch the status now; resolves once it arrived. */
  refresh(): Promise<void>;
  /**
   * Wait until `predicate(status)` holds, refreshing on events; rejects after
   * `timeoutMs` (default 10 min; 0 waits as long as it takes).
   */
  waitFor(
    predicate: (status: IStatus) => boolean,
    timeoutMs?: number
  ): Promise<IStatus>;
}

export const ISuspendModel = new Token<ISuspendModel>(
  'jupyter-suspend:ISuspendModel',
  'The suspend state of this environment, polled and event-driven.'
);
