import { Token } from '@lumino/coreutils';
import { ISignal } from '@lumino/signaling';

import type * as api from './_generated/schemas';

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

/*
 * The server's answers, as the schemas in jupyter_suspend/common/schemas/
 * define them: the types are generated from those schemas
 * (src/_generated/schemas.ts, `jlpm build:schema-types`) and the jest contract
 * test holds the recorded answers to the same schemas.
 */

/** Lifecycle states, spelled exactly as the server spells them. */
export type State = api.State;

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

/** `T` with the properties `K` optional (fields newer than some servers). */
type Optional<T, K extends keyof T> = {
  [P in keyof T as P extends K ? never : P]: T[P];
} & { [P in K]?: T[P] };

export type RestoreKind = api.RestoreKind;
export type OperationKind = api.OperationKind;
export type Outcome = api.Outcome;

/** One step of an operation (`operation.steps[]` of GET status). */
export type IStep = api.Step;

/** The current or last operation. */
export type IOperation = api.Operation;

export type IFailure = api.Failure;

export type ICapabilities = api.Capabilities;

/**
 * The backend's own words for what a suspend keeps, loses and does
 * (`backend.text` of GET status): the UI shows these rather than its own.
 */
export type IBackendText = api.BackendText;

/** `text` is absent from servers older than it (the plugin falls back to its own words). */
export type IBackend = Optional<api.Backend, 'text'>;

export type IColdStart = api.ColdStart;

/** Per kernel: what `POST resume` put back (`last_restore.checkpoints_restored`). */
export type IRestoredCheckpoints = api.RestoredCheckpoints;

export type ILastRestore = api.LastRestore;

/**
 * `GET jupyter-suspend/api/status`. `can_checkpoint`, `can_acknowledge` and
 * `backend.text` are absent from servers older than them (the plugin falls back).
 */
export type IStatus = Optional<
  Omit<api.Status, 'backend'>,
  'can_checkpoint' | 'can_acknowledge'
> & { backend: IBackend };

/** One kernel in the dry-run preflight. */
export type IPreflightKernel = api.PreflightKernel;

/** `POST suspend {"dry_run": true}`. */
export type IPreflight = Omit<api.Preflight, 'backend'> & { backend: IBackend };

/** The answer of a POST that started an operation (202). */
export type IStarted = api.OperationStarted;

/** One suspend/resume cycle of `GET timeline`. */
export type ICycle = api.Cycle;

/** `GET jupyter-suspend/api/timeline`. */
export type ITimeline = api.Timeline;

/** A lifecycle event as it reaches the browser on `/api/events/subscribe`. */
export type ILifecycleEvent = api.LifecycleEvent & {
  /** Added by jupyter_events: `EVENT_SCHEMA_ID`. */
  schema_id: string;
};

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
