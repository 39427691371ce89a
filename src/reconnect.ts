/**
 * Reconnect open notebooks and consoles to kernels that a resume restarted.
 *
 * The local backend stops kernels on suspend and starts them again under the
 * SAME kernel and session ids. Meanwhile JupyterLab's session manager polls
 * `/api/sessions`, sees the session gone and disposes the notebook's session
 * connection (the kernel connection is disposed with it, or marked dead by
 * the kernel manager). Nothing in JupyterLab connects it again, so the
 * notebook would show "No Kernel" until the user picks one, which would even
 * start a *second* kernel. Here, once the state is ready, each open notebook
 * whose path has a server session again is pointed back at it.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel, Session, ServiceManager } from '@jupyterlab/services';
import type { ISignal } from '@lumino/signaling';

import { DisposableOnce } from './disposable';
import { resumedSince, suspendedSince } from './status';
import type { IStatus } from './tokens';

export type ReconnectOutcome =
  | 'connected' // was already fine
  | 'reconnected' // adopted the restored session
  | 'no-session' // no server session for this path
  | 'other-session'; // the user moved on to another session: left alone

/** Whether a session context is connected to the kernel of `model`. */
function isHealthy(ctx: ISessionContext, model: Session.IModel): boolean {
  const session = ctx.session;
  const kernel = session?.kernel;
  return (
    !!session &&
    !session.isDisposed &&
    session.id === model.id &&
    !!kernel &&
    !kernel.isDisposed &&
    kernel.id === model.kernel?.id &&
    kernel.status !== 'dead' &&
    kernel.connectionStatus === 'connected'
  );
}

/**
 * Wait until the context's kernel connection is open; false at `timeoutMs`.
 * Fails at once when the connection is dropped meanwhile (a stale session or
 * kernel list disposed it): waiting on would only run out the clock, and the
 * caller can reattach instead.
 */
async function waitConnected(
  ctx: ISessionContext,
  timeoutMs: number
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (ctx.isDisposed || dropped(ctx)) {
      throw new Error('the connection was dropped while reconnecting');
    }
    const kernel = ctx.session?.kernel;
    if (kernel && kernel.connectionStatus === 'connected') {
      return true;
    }
    if (Date.now() >= deadline) {
      return false;
    }
    await new Promise<void>(resolve => {
      const done = (): void => {
        clearTimeout(timer);
        ctx.connectionStatusChanged.disconnect(done);
        ctx.kernelChanged.disconnect(done);
        ctx.sessionChanged.disconnect(done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, deadline - Date.now()));
      ctx.connectionStatusChanged.connect(done);
      ctx.kernelChanged.connect(done);
      ctx.sessionChanged.connect(done);
    });
  }
}

/** What `settleKernelStatus` reads and calls on a kernel connection. */
export type StatusKernel = Pick<
  Kernel.IKernelConnection,
  | 'status'
  | 'connectionStatus'
  | 'isDisposed'
  | 'statusChanged'
  | 'requestKernelInfo'
  | 'reconnect'
  | 'id'
>;

/**
 * Make sure an open kernel connection learns its kernel's status; true once it
 * is known.
 *
 * JupyterLab learns a kernel's status only from IOPub `status` messages; on
 * connect it sends a kernel_info request and waits for its busy/idle. But
 * jupyter_server skips its IOPub "nudge" for a kernel it believes busy (a
 * restarted kernel that just loaded its checkpoints can look busy for a moment)
 * and a status published before the server's new IOPub subscription is up is
 * lost (ZMQ's slow joiner): the connection is open, the status stays 'unknown'
 * for good, and whatever waits for an idle kernel waits forever. One more
 * kernel_info request, once the subscription stands, brings the status back.
 *
 * A connection can also be deaf: opened while the resume restarted the kernel
 * under the same id, under load it stayed connected with no answer to any
 * kernel_info for minutes. When asking again has not helped for `reopenMs`,
 * the websocket is reopened (the server then opens fresh channels to the
 * kernel), once per `reopenMs`, until `timeoutMs`.
 */
export async function settleKernelStatus(
  kernel: StatusKernel,
  options: {
    graceMs?: number;
    retryMs?: number;
    reopenMs?: number;
    timeoutMs?: number;
  } = {}
): Promise<boolean> {
  const {
    graceMs = 1000,
    retryMs = 2000,
    reopenMs = 10000,
    timeoutMs = 60000
  } = options;
  const deadline = Date.now() + timeoutMs;
  const known = (): boolean => kernel.status !== 'unknown';
  let wait = graceMs;
  let reopenAt = Date.now() + reopenMs;
  let reopened = false;
  while (!kernel.isDisposed) {
    const left = deadline - Date.now();
    if (kernel.connectionStatus !== 'connected') {
      // Not ours to settle, unless it is our own reopen still connecting.
      if (!reopened || left <= 0) {
        return known();
      }
      await sleep(Math.min(100, left));
      continue;
    }
    if (known()) {
      return true;
    }
    if (left <= 0) {
      return false;
    }
    await statusOrTimeout(kernel, Math.min(wait, left));
    if (
      known() ||
      kernel.isDisposed ||
      kernel.connectionStatus !== 'connected'
    ) {
      continue;
    }
    if (Date.now() >= reopenAt) {
      trace(
        `kernel ${kernel.id}: status unknown for ${reopenMs} ms, reopening`
      );
      reopened = true;
      reopenAt = Date.now() + reopenMs;
      wait = graceMs;
      kernel.reconnect().catch(() => undefined);
      continue;
    }
    // Its busy/idle answer is all that is wanted: the reply itself may never
    // resolve (JupyterLab's future also waits for an idle that may be lost).
    kernel.requestKernelInfo().catch(() => undefined);
    wait = retryMs;
  }
  return known();
}

/**
 * One line per reconnect step in the browser console (debug level): a
 * reconnect that hangs under load says where.
 */
function trace(...parts: unknown[]): void {
  console.debug('jupyter-suspend reconnect:', ...parts);
}

function sleep(ms: number): Promise<void> {
  return new Promise(resolve => setTimeout(resolve, ms));
}

function statusOrTimeout(kernel: StatusKernel, ms: number): Promise<void> {
  return new Promise<void>(resolve => {
    const done = (): void => {
      clearTimeout(timer);
      kernel.statusChanged.disconnect(done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    kernel.statusChanged.connect(done);
  });
}

/** Deadlines of `reconnectContext`. */
export interface IReconnectOptions {
  /** The whole reconnect of one notebook or console ends by then (ms). */
  timeoutMs?: number;
  /**
   * A connection not open, or open with its kernel's status still unknown,
   * after this long is replaced by a fresh one (ms).
   */
  attemptMs?: number;
}

/**
 * Point one notebook's session context back at its restored session.
 *
 * Each attempt adopts a fresh session connection (a new client id, so the
 * server opens new channels rather than replaying a buffer kept for an old
 * one) and waits until it is open and its kernel's status is known. One that
 * is still connecting (JupyterLab's own reconnect backs off for up to a
 * minute) or stays deaf after `attemptMs` is replaced, until `timeoutMs`:
 * then this throws, and the notebook is left to the `AttachmentKeeper`.
 */
export async function reconnectContext(
  ctx: ISessionContext,
  sessions: Session.IManager,
  options: IReconnectOptions = {}
): Promise<ReconnectOutcome> {
  const { timeoutMs = 60000, attemptMs = 20000 } = options;
  const deadline = Date.now() + timeoutMs;
  if (ctx.isDisposed) {
    return 'no-session';
  }
  let model = serverSession(ctx, sessions);
  if (!model?.kernel) {
    trace(`${ctx.path}: no server session`);
    return 'no-session';
  }
  if (isHealthy(ctx, model)) {
    trace(`${ctx.path}: connected to kernel ${model.kernel.id}, settling`);
    if (await settleStatus(ctx, Math.min(attemptMs, timeoutMs))) {
      return 'connected';
    }
    trace(`${ctx.path}: connected but deaf, adopting a fresh connection`);
  } else {
    const current = ctx.session;
    if (current && !current.isDisposed && current.id !== model.id) {
      trace(`${ctx.path}: on another session, left alone`);
      return 'other-session';
    }
  }
  for (let attempt = 1; ; attempt++) {
    const attemptEnd = Math.min(deadline, Date.now() + attemptMs);
    await adoptSession(ctx, sessions, model, attempt);
    // A connection dropped meanwhile throws: the keeper reattaches it.
    if (await waitConnected(ctx, attemptEnd - Date.now())) {
      trace(`${ctx.path}: connected, settling`);
      if (await settleStatus(ctx, attemptEnd - Date.now())) {
        trace(
          `${ctx.path}: reconnected, status ${ctx.session?.kernel?.status}`
        );
        return 'reconnected';
      }
    }
    if (Date.now() >= deadline) {
      throw new Error(
        `the kernel connection did not open with a known status within ${timeoutMs} ms (${attempt} attempts)`
      );
    }
    model = serverSession(ctx, sessions);
    if (!model?.kernel) {
      trace(`${ctx.path}: the server session went away`);
      return 'no-session';
    }
    trace(`${ctx.path}: attempt ${attempt} not settled in ${attemptMs} ms`);
  }
}

function serverSession(
  ctx: ISessionContext,
  sessions: Session.IManager
): Session.IModel | undefined {
  return Array.from(sessions.running()).find(m => m.path === ctx.path);
}

/** Replace the context's client-side connection with a fresh one to `model`. */
async function adoptSession(
  ctx: ISessionContext,
  sessions: Session.IManager,
  model: Session.IModel,
  attempt: number
): Promise<void> {
  const current = ctx.session;
  trace(
    `${ctx.path}: attempt ${attempt}: adopting session ${model.id} (kernel ${model.kernel?.id}; was`,
    current?.kernel?.connectionStatus ?? 'none',
    current?.kernel?.status ?? 'none',
    ')'
  );
  // Drop the stale client-side connection; the server session stays.
  current?.dispose();
  const session = sessions.connectTo({ model });
  // SessionContext has no public "adopt this existing session" call: its
  // initialize() does exactly this with the private _handleNewSession. The
  // public fallback (changeKernel with the kernel id) works too but makes the
  // server record a second session row for the same notebook.
  const adopt = (
    ctx as unknown as {
      _handleNewSession?: (s: Session.ISessionConnection) => unknown;
    }
  )._handleNewSession;
  if (typeof adopt === 'function') {
    adopt.call(ctx, session);
  } else {
    session.dispose();
    await ctx.changeKernel({ id: model.kernel!.id });
  }
}

/** Whether the context's kernel status became known within `timeoutMs`. */
async function settleStatus(
  ctx: ISessionContext,
  timeoutMs: number
): Promise<boolean> {
  const kernel = ctx.session?.kernel;
  if (!kernel) {
    return false;
  }
  if (await settleKernelStatus(kernel, { timeoutMs: Math.max(0, timeoutMs) })) {
    return true;
  }
  console.warn(
    `jupyter-suspend: the kernel of ${ctx.path} is connected but its status stayed unknown for ${Math.round(timeoutMs / 1000)} s`
  );
  return false;
}

/**
 * After a resume: refresh what the browser knows of sessions and kernels and
 * reconnect every open notebook and console (their session contexts). Returns
 * the outcome per session path.
 */
export async function reconnectAll(
  contexts: ISessionContext[],
  services: ServiceManager.IManager
): Promise<Map<string, ReconnectOutcome>> {
  trace(`refreshing sessions and kernels for ${contexts.length} open`);
  await refreshSessionsAndKernels(services);
  const outcomes = new Map<string, ReconnectOutcome>();
  await Promise.all(
    contexts.map(async ctx => {
      try {
        outcomes.set(ctx.path, await reconnectContext(ctx, services.sessions));
      } catch (reason) {
        console.warn(
          `jupyter-suspend: could not reconnect ${ctx.path}`,
          reason
        );
      }
    })
  );
  return outcomes;
}

/**
 * Keep notebooks and consoles attached to their server sessions when their
 * connections are dropped behind the user's back while the environment is
 * steady.
 *
 * JupyterLab's session and kernel lists are polled; one computed while a
 * suspend had stopped the kernels can arrive after the resume and dispose a
 * connection that was already restored (or that reconnected on its own), and
 * nothing in JupyterLab connects it again: the next cell run would silently
 * be dropped, or start a second kernel. The server session still exists, so
 * the notebook is pointed back at it. A user's own shutdown removes the
 * server session too, and then nothing happens.
 *
 * A drop while the environment is not steady (during an operation, or while
 * the resume's own reconnect runs) is left to that operation; call
 * `recheckAll` when it becomes steady again, or such a drop would stay.
 */
export class AttachmentKeeper {
  constructor(
    private readonly _sessions: Session.IManager,
    private readonly _steady: () => boolean
  ) {}

  /** Watch one notebook's or console's session context. */
  watch(ctx: ISessionContext): void {
    this._contexts.add(ctx);
    ctx.disposed.connect(() => this._contexts.delete(ctx));
    ctx.sessionChanged.connect(() => void this.check(ctx));
    ctx.connectionStatusChanged.connect(() => void this.check(ctx));
  }

  /** Check every watched context (the environment just became steady). */
  recheckAll(): void {
    for (const ctx of this._contexts) {
      void this.check(ctx);
    }
  }

  /** Reattach `ctx` if it was dropped and the environment is steady. */
  async check(ctx: ISessionContext): Promise<void> {
    if (this._checking.has(ctx)) {
      // Look again when this check ends: what it saw may be stale already.
      this._again.add(ctx);
      return;
    }
    if (ctx.isDisposed || !this._steady() || !dropped(ctx)) {
      return;
    }
    this._checking.add(ctx);
    try {
      await this._sessions.refreshRunning();
      // A reconnect running elsewhere may have attached it meanwhile.
      if (!ctx.isDisposed && this._steady() && dropped(ctx)) {
        await reconnectContext(ctx, this._sessions);
      }
    } catch (reason) {
      console.warn(`jupyter-suspend: could not reattach ${ctx.path}`, reason);
    } finally {
      this._checking.delete(ctx);
      if (this._again.delete(ctx)) {
        void this.check(ctx);
      }
    }
  }

  private readonly _contexts = new Set<ISessionContext>();
  private readonly _checking = new Set<ISessionContext>();
  private readonly _again = new Set<ISessionContext>();
}

/** No session, or a session whose kernel connection was disposed. */
function dropped(ctx: ISessionContext): boolean {
  const session = ctx.session;
  return !session || session.isDisposed || !!session.kernel?.isDisposed;
}

/**
 * Refresh what the browser knows of sessions and kernels now rather than at
 * its next 10 s poll: after a suspend, so notebooks show at once that their
 * kernels are gone; after a resume, before reconnecting them.
 */
export async function refreshSessionsAndKernels(
  services: ServiceManager.IManager
): Promise<void> {
  await services.kernels.refreshRunning();
  await services.sessions.refreshRunning();
}

/** What the reconnector reads of the model (`SuspendModel` has it all). */
export interface IReconnectModel {
  readonly status: IStatus | null;
  readonly reconnecting: boolean;
  /** Emits after each status (the server's state). */
  readonly changed: ISignal<unknown, void>;
  /** Emits after each change, `reconnecting` included. */
  readonly stateChanged: ISignal<unknown, void>;
  setReconnecting(started: boolean): void;
}

/** Widgets with a session: the notebook tracker, the console tracker. */
export interface ISessionWidgets {
  forEach(fn: (widget: { sessionContext: ISessionContext }) => void): void;
  readonly widgetAdded: ISignal<unknown, { sessionContext: ISessionContext }>;
}

/**
 * Keep open notebooks and consoles on their kernels across a suspend and a
 * resume, whoever caused them (this tab, another tab, the `%suspend` magic,
 * the platform):
 *
 * - once suspended: refresh the browser's sessions and kernels, so notebooks
 *   show at once that their kernels are gone;
 * - once a resume ended (ready): point every open notebook and console back
 *   at its restored session (`reconnectAll`), with `reconnecting` set on the
 *   model meanwhile;
 * - between operations: an `AttachmentKeeper` reattaches connections dropped
 *   behind the user's back, and rechecks them all when the environment
 *   becomes steady again.
 */
export class ResumeReconnector extends DisposableOnce {
  constructor(options: ResumeReconnector.IOptions) {
    super();
    this._model = options.model;
    this._services = options.services;
    this._widgets = options.widgets.filter(
      (w): w is ISessionWidgets => w !== null
    );
    this._keeper = new AttachmentKeeper(this._services.sessions, () =>
      this.steady()
    );
    for (const widgets of this._widgets) {
      widgets.forEach(widget => this._keeper.watch(widget.sessionContext));
      widgets.widgetAdded.connect(this._onWidgetAdded, this);
    }
    this._wasSteady = this.steady();
    this._model.stateChanged.connect(this._onStateChanged, this);
    this._model.changed.connect(this._onStatus, this);
  }

  /** The keeper of attachments between operations. */
  get keeper(): AttachmentKeeper {
    return this._keeper;
  }

  /**
   * Steady: running or ready, no operation in progress and no reconnect
   * running. During a suspend or resume sessions come and go on purpose and
   * the ready-time reconnect handles them.
   */
  steady(): boolean {
    const status = this._model.status;
    return (
      !!status &&
      (status.state === 'running' || status.state === 'ready') &&
      !status.operation?.in_progress &&
      !this._model.reconnecting
    );
  }

  /** The last reconnect started (for tests), or null. */
  get lastReconnect(): Promise<Map<string, ReconnectOutcome>> | null {
    return this._lastReconnect;
  }

  protected onDispose(): void {
    for (const widgets of this._widgets) {
      widgets.widgetAdded.disconnect(this._onWidgetAdded, this);
    }
    this._model.stateChanged.disconnect(this._onStateChanged, this);
    this._model.changed.disconnect(this._onStatus, this);
  }

  private _onWidgetAdded(
    _: unknown,
    widget: { sessionContext: ISessionContext }
  ): void {
    this._keeper.watch(widget.sessionContext);
  }

  /**
   * A connection dropped while not steady (a stale session list landing
   * during the resume's own reconnect) is looked at once it is steady.
   */
  private _onStateChanged(): void {
    const now = this.steady();
    if (now && !this._wasSteady) {
      this._keeper.recheckAll();
    }
    this._wasSteady = now;
  }

  private _onStatus(): void {
    const status = this._model.status;
    if (!status) {
      return;
    }
    const previous = this._previous;
    this._previous = status;
    if (suspendedSince(previous, status)) {
      void refreshSessionsAndKernels(this._services).catch(() => undefined);
    }
    if (resumedSince(previous, status)) {
      this._model.setReconnecting(true);
      this._lastReconnect = reconnectAll(
        this._openSessionContexts(),
        this._services
      ).finally(() => this._model.setReconnecting(false));
    }
  }

  /** Every open notebook and console: what a resume has to reconnect. */
  private _openSessionContexts(): ISessionContext[] {
    const contexts: ISessionContext[] = [];
    for (const widgets of this._widgets) {
      widgets.forEach(widget => contexts.push(widget.sessionContext));
    }
    return contexts;
  }

  private readonly _model: IReconnectModel;
  private readonly _services: ServiceManager.IManager;
  private readonly _widgets: ISessionWidgets[];
  private readonly _keeper: AttachmentKeeper;
  private _previous: IStatus | null = null;
  private _wasSteady: boolean;
  private _lastReconnect: Promise<Map<string, ReconnectOutcome>> | null = null;
}

export namespace ResumeReconnector {
  export interface IOptions {
    model: IReconnectModel;
    services: ServiceManager.IManager;
    /** The notebook and console trackers (null when absent). */
    widgets: (ISessionWidgets | null)[];
  }
}
