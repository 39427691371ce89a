import type { Event } from '@jupyterlab/services';
import { VDomModel } from '@jupyterlab/ui-components';
import { IPoll, Poll } from '@lumino/polling';
import { ISignal, IStream, Signal } from '@lumino/signaling';

import { IMisconfiguration, misconfiguration } from './display';
import { IDLE_EVENT_SCHEMA_ID } from './idle';
import {
  EVENT_SCHEMA_ID,
  ILifecycleEvent,
  IStatus,
  ISuspendModel,
  ITimeline
} from './tokens';

/** Poll this often while an operation runs, to show its steps. */
export const BUSY_INTERVAL_MS = 1000;

/** Longest back-off between polls while the server does not answer. */
export const MAX_INTERVAL_MS = 5 * 60 * 1000;

export namespace SuspendModel {
  export interface IOptions {
    /** `GET status` (injected so the model is testable without a server). */
    fetchStatus: () => Promise<IStatus>;
    /** `GET timeline`. */
    fetchTimeline: () => Promise<ITimeline>;
    /** The server's event stream (`app.serviceManager.events.stream`). */
    events?: IStream<unknown, Event.Emission> | null;
    /** Idle poll interval, in milliseconds. */
    interval: number;
    /** Poll interval while an operation is in progress, in milliseconds. */
    busyInterval?: number;
  }
}

/**
 * The suspend state of this environment.
 *
 * One `Poll` keeps it fresh: slow (the `pollInterval` setting) while nothing
 * happens, fast only while an operation is in progress, backing off while the
 * server does not answer and standing by while the page is hidden. Every
 * lifecycle event from the server's event bus triggers an immediate refresh,
 * so transitions show without waiting for the next tick.
 */
export class SuspendModel extends VDomModel implements ISuspendModel {
  constructor(options: SuspendModel.IOptions) {
    super();
    this._fetchStatus = options.fetchStatus;
    this._fetchTimeline = options.fetchTimeline;
    this._interval = options.interval;
    this._busyInterval = options.busyInterval ?? BUSY_INTERVAL_MS;
    this._events = options.events ?? null;
    this._events?.connect(this._onEmission, this);
    this._poll = new Poll({
      auto: false,
      factory: () => this._tick(),
      frequency: this._frequency(false),
      name: 'jupyter-suspend:status',
      standby: 'when-hidden'
    });
  }

  get status(): IStatus | null {
    return this._status;
  }

  get error(): string | null {
    return this._error;
  }

  /** Set while the server answers 503 "Misconfigured" (an invalid setting), else null. */
  get misconfigured(): IMisconfiguration | null {
    return this._misconfigured;
  }

  get fetchedAt(): number {
    return this._fetchedAt;
  }

  get timeline(): ITimeline | null {
    return this._timeline;
  }

  get changed(): ISignal<ISuspendModel, void> {
    return this._changed;
  }

  get lifecycleEvent(): ISignal<ISuspendModel, ILifecycleEvent> {
    return this._lifecycleEvent;
  }

  get reconnecting(): boolean {
    return this._reconnecting > 0;
  }

  /**
   * Track open notebooks being pointed back at their restored kernels (one
   * call with `true` per reconnect started, one with `false` when it ends).
   * Only the views re-render: `changed` is about the server's state.
   */
  setReconnecting(started: boolean): void {
    const before = this.reconnecting;
    this._reconnecting = Math.max(0, this._reconnecting + (started ? 1 : -1));
    if (this.reconnecting !== before) {
      this.stateChanged.emit();
    }
  }

  /** The poll's current interval in ms (exposed for tests and diagnostics). */
  get pollInterval(): number {
    return this._poll.frequency.interval;
  }

  /** Start polling. */
  start(): Promise<void> {
    return this._poll.start();
  }

  /** Change the idle poll interval (the `pollInterval` setting, in ms). */
  setInterval(interval: number): void {
    this._interval = interval;
    this._poll.frequency = this._frequency(this._busy());
  }

  async refresh(): Promise<void> {
    await this._poll.refresh();
    await this._poll.tick;
  }

  waitFor(
    predicate: (status: IStatus) => boolean,
    timeoutMs = 10 * 60 * 1000
  ): Promise<IStatus> {
    return new Promise<IStatus>((resolve, reject) => {
      const check = (): boolean => {
        if (this._status && predicate(this._status)) {
          cleanup();
          resolve(this._status);
          return true;
        }
        return false;
      };
      const onChanged = (): void => {
        check();
      };
      // 0: no deadline (the server ends every operation, however long a
      // snapshot upload or a wait for capacity takes).
      const timer =
        timeoutMs > 0
          ? setTimeout(() => {
              cleanup();
              reject(new Error('timed out waiting for the suspend state'));
            }, timeoutMs)
          : null;
      const cleanup = (): void => {
        if (timer !== null) {
          clearTimeout(timer);
        }
        this._changed.disconnect(onChanged);
      };
      if (!check()) {
        this._changed.connect(onChanged);
        void this.refresh().catch(() => undefined);
      }
    });
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._events?.disconnect(this._onEmission, this);
    this._poll.dispose();
    Signal.clearData(this);
    super.dispose();
  }

  private _busy(): boolean {
    // An announced automatic suspend counts too: its countdown and its end show promptly.
    return (
      !!this._status?.operation?.in_progress || !!this._status?.idle_warning
    );
  }

  private _frequency(busy: boolean): IPoll.Frequency {
    return {
      interval: busy ? this._busyInterval : this._interval,
      backoff: true,
      max: Math.max(MAX_INTERVAL_MS, this._interval)
    };
  }

  private async _tick(): Promise<void> {
    // An event refreshes the poll while a fetch may still be on its way; the
    // older answer must not overwrite a newer one (ready -> restoring -> ready
    // would run the reconnect after a restore twice).
    const sequence = ++this._fetchSequence;
    let status: IStatus;
    try {
      status = await this._fetchStatus();
    } catch (reason) {
      if (sequence < this._appliedSequence) {
        return;
      }
      const message = reason instanceof Error ? reason.message : String(reason);
      const misconfigured = misconfiguration(reason);
      if (
        message !== this._error ||
        JSON.stringify(misconfigured) !== JSON.stringify(this._misconfigured)
      ) {
        this._error = message;
        this._misconfigured = misconfigured;
        if (misconfigured) {
          // Nothing is known of the state while it refuses to work.
          this._status = null;
        }
        this._emitChanged();
      }
      // Rejecting makes the poll back off until the server answers again.
      throw reason;
    }
    if (sequence < this._appliedSequence) {
      return;
    }
    this._appliedSequence = sequence;
    this._status = status;
    this._error = null;
    this._misconfigured = null;
    this._fetchedAt = Date.now();
    // Faster only while something happens; the next tick uses this.
    this._poll.frequency = this._frequency(this._busy());
    this._maybeFetchTimeline(status);
    this._emitChanged();
  }

  /** The timeline reads the whole journal: fetch it only when it changed. */
  private _maybeFetchTimeline(status: IStatus): void {
    const op = status.operation;
    const key = `${status.state}|${status.since}|${op?.id ?? ''}|${op?.outcome ?? ''}`;
    if (key === this._timelineKey) {
      return;
    }
    this._timelineKey = key;
    this._fetchTimeline()
      .then(timeline => {
        this._timeline = timeline;
        this._emitChanged();
      })
      .catch(() => {
        // The timeline is a detail; the status itself stays accurate.
        this._timelineKey = '';
      });
  }

  private _onEmission(_: unknown, emission: Event.Emission): void {
    if (emission.schema_id === IDLE_EVENT_SCHEMA_ID) {
      void this._poll.refresh(); // the status carries the warning
      return;
    }
    if (emission.schema_id !== EVENT_SCHEMA_ID) {
      return;
    }
    this._lifecycleEvent.emit(emission as unknown as ILifecycleEvent);
    void this._poll.refresh();
  }

  private _emitChanged(): void {
    this.stateChanged.emit();
    this._changed.emit();
  }

  private _fetchStatus: () => Promise<IStatus>;
  private _fetchTimeline: () => Promise<ITimeline>;
  private _events: IStream<unknown, Event.Emission> | null;
  private _interval: number;
  private _busyInterval: number;
  private _poll: Poll;
  private _status: IStatus | null = null;
  private _error: string | null = null;
  private _misconfigured: IMisconfiguration | null = null;
  private _fetchedAt = 0;
  private _timeline: ITimeline | null = null;
  private _timelineKey = '';
  private _fetchSequence = 0;
  private _appliedSequence = 0;
  private _reconnecting = 0;
  private _changed = new Signal<ISuspendModel, void>(this);
  private _lifecycleEvent = new Signal<ISuspendModel, ILifecycleEvent>(this);
}
