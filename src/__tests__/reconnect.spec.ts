import type { ISessionContext } from '@jupyterlab/apputils';
import type { ServiceManager, Session } from '@jupyterlab/services';
import { Signal } from '@lumino/signaling';

import {
  AttachmentKeeper,
  IReconnectModel,
  IReconnectOptions,
  ISessionWidgets,
  reconnectContext,
  ResumeReconnector,
  settleKernelStatus
} from '../reconnect';
import type { IStatus } from '../tokens';
import { statusReadyCold, statusRunning, statusSuspended } from './fixtures';

/** A kernel connection as far as the reconnect logic looks at it. */
function kernel(id: string, connected = true) {
  return {
    id,
    isDisposed: false,
    status: 'idle',
    connectionStatus: connected ? 'connected' : 'connecting',
    dispose(): void {
      this.isDisposed = true;
    }
  };
}

type FakeKernel = ReturnType<typeof kernel>;

function sessionConnection(id: string, k: FakeKernel) {
  return {
    id,
    kernel: k,
    isDisposed: false,
    dispose(): void {
      this.isDisposed = true;
      this.kernel.dispose();
    }
  };
}

type FakeSession = ReturnType<typeof sessionConnection>;

/** A notebook's session context: the private adopt call JupyterLab has. */
class FakeContext {
  path = 'work/model.ipynb';
  isDisposed = false;
  session: FakeSession | null = null;
  readonly sessionChanged = new Signal<this, unknown>(this);
  readonly connectionStatusChanged = new Signal<this, unknown>(this);
  readonly kernelChanged = new Signal<this, unknown>(this);
  readonly disposed = new Signal<this, void>(this);
  adopted: FakeSession[] = [];

  drop(): void {
    this.session?.dispose();
    this.session = null;
    this.sessionChanged.emit(null);
  }

  _handleNewSession(session: FakeSession): void {
    this.adopted.push(session);
    this.session = session;
    this.sessionChanged.emit(session);
  }
}

/** The server's sessions, as the session manager lists them. */
class FakeSessions {
  models: Session.IModel[] = [];
  refreshes = 0;

  running(): IterableIterator<Session.IModel> {
    return this.models[Symbol.iterator]();
  }

  async refreshRunning(): Promise<void> {
    this.refreshes += 1;
  }

  /** Whether the connections handed out are open at once. */
  connects = true;

  connectTo({ model }: { model: Session.IModel }): FakeSession {
    return sessionConnection(model.id, kernel(model.kernel!.id, this.connects));
  }
}

function model(path: string): Session.IModel {
  return {
    id: 'session-1',
    path,
    name: path,
    type: 'notebook',
    kernel: { id: 'kernel-1', name: 'python3' }
  };
}

// The reconnect's step-by-step trace (console.debug) is for browsers' logs.
beforeAll(() => {
  jest.spyOn(console, 'debug').mockImplementation(() => undefined);
});

async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await new Promise(resolve => setTimeout(resolve, 0));
  }
}

describe('AttachmentKeeper', () => {
  let ctx: FakeContext;
  let sessions: FakeSessions;
  let steady: boolean;
  let keeper: AttachmentKeeper;

  beforeEach(() => {
    ctx = new FakeContext();
    sessions = new FakeSessions();
    steady = true;
    ctx.session = sessionConnection('session-1', kernel('kernel-1'));
    keeper = new AttachmentKeeper(
      sessions as unknown as Session.IManager,
      () => steady
    );
    keeper.watch(ctx as unknown as ISessionContext);
  });

  it('points a dropped notebook back at its server session', async () => {
    sessions.models = [model(ctx.path)];
    ctx.drop();
    await settle();
    expect(sessions.refreshes).toBe(1);
    expect(ctx.adopted).toHaveLength(1);
    expect(ctx.session?.id).toBe('session-1');
    expect(ctx.session?.kernel.id).toBe('kernel-1');
  });

  it('reattaches when only the kernel connection was disposed', async () => {
    sessions.models = [model(ctx.path)];
    ctx.session!.kernel.dispose();
    ctx.connectionStatusChanged.emit('disconnected');
    await settle();
    expect(ctx.adopted).toHaveLength(1);
    expect(ctx.session?.kernel.isDisposed).toBe(false);
  });

  it('leaves a notebook alone when the server session is gone too', async () => {
    // The user shut the kernel down: no session on the server either.
    sessions.models = [];
    ctx.drop();
    await settle();
    expect(sessions.refreshes).toBe(1);
    expect(ctx.adopted).toHaveLength(0);
    expect(ctx.session).toBe(null);
  });

  it('does nothing while the notebook is attached', async () => {
    sessions.models = [model(ctx.path)];
    ctx.connectionStatusChanged.emit('connected');
    await settle();
    expect(sessions.refreshes).toBe(0);
    expect(ctx.adopted).toHaveLength(0);
  });

  it('does nothing during an operation, and reattaches once steady again', async () => {
    // A stale session list lands while the resume's reconnect still runs.
    sessions.models = [model(ctx.path)];
    steady = false;
    ctx.drop();
    await settle();
    expect(sessions.refreshes).toBe(0);
    expect(ctx.adopted).toHaveLength(0);
    steady = true;
    keeper.recheckAll();
    await settle();
    expect(ctx.adopted).toHaveLength(1);
    expect(ctx.session?.kernel.isDisposed).toBe(false);
  });

  it('looks again when a drop lands during its own check', async () => {
    const warn = jest.spyOn(console, 'warn').mockImplementation(() => {});
    sessions.models = [model(ctx.path)];
    sessions.connects = false;
    ctx.drop();
    await settle();
    // Reattached, still opening; then a stale list drops it again.
    expect(ctx.adopted).toHaveLength(1);
    ctx.drop();
    await settle();
    expect(sessions.refreshes).toBe(2);
    expect(ctx.adopted).toHaveLength(2);
    expect(ctx.session?.isDisposed).toBe(false);
    expect(warn).toHaveBeenCalledTimes(1);
    warn.mockRestore();
  });
});

describe('reconnectContext', () => {
  /** A notebook whose server session exists; `connects`: whether connections open. */
  function notebook(connects: boolean) {
    const ctx = new FakeContext();
    const sessions = new FakeSessions();
    sessions.models = [model(ctx.path)];
    sessions.connects = connects;
    const reconnect = (options: IReconnectOptions) =>
      reconnectContext(
        ctx as unknown as ISessionContext,
        sessions as unknown as Session.IManager,
        options
      );
    return { ctx, sessions, reconnect };
  }

  it('fails at once when the new connection is dropped while opening', async () => {
    const { ctx, reconnect } = notebook(false);
    const started = Date.now();
    const outcome = reconnect({ timeoutMs: 60000 });
    await settle();
    expect(ctx.adopted).toHaveLength(1);
    ctx.drop();
    await expect(outcome).rejects.toThrow('dropped while reconnecting');
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('resolves once the adopted connection opens', async () => {
    const { ctx, reconnect } = notebook(false);
    const outcome = reconnect({ timeoutMs: 60000 });
    await settle();
    ctx.session!.kernel.connectionStatus = 'connected';
    ctx.connectionStatusChanged.emit('connected');
    await expect(outcome).resolves.toBe('reconnected');
  });

  it('replaces a connection that never opens with a fresh one', async () => {
    const { ctx, sessions, reconnect } = notebook(false);
    const outcome = reconnect({ timeoutMs: 5000, attemptMs: 100 });
    await settle();
    expect(ctx.adopted).toHaveLength(1);
    sessions.connects = true;
    await expect(outcome).resolves.toBe('reconnected');
    expect(ctx.adopted).toHaveLength(2);
    expect(ctx.adopted[0].isDisposed).toBe(true);
    expect(ctx.session).toBe(ctx.adopted[1]);
  });

  it('replaces an open connection that stays deaf with a fresh one', async () => {
    const { ctx, reconnect } = notebook(true);
    // Open, same session and kernel, but no status ever reaches it.
    const deaf = Object.assign(kernel('kernel-1'), {
      status: 'unknown',
      statusChanged: new Signal<unknown, string>({}),
      requestKernelInfo: () => new Promise<undefined>(() => undefined),
      reconnect: () => Promise.resolve()
    });
    const old = sessionConnection('session-1', deaf);
    ctx.session = old;
    const outcome = await reconnect({ timeoutMs: 5000, attemptMs: 150 });
    expect(outcome).toBe('reconnected');
    expect(old.isDisposed).toBe(true);
    expect(ctx.adopted).toHaveLength(1);
    expect(ctx.session!.kernel.status).toBe('idle');
  });

  it('gives up at its deadline, having tried fresh connections', async () => {
    const { ctx, reconnect } = notebook(false);
    const started = Date.now();
    await expect(reconnect({ timeoutMs: 400, attemptMs: 100 })).rejects.toThrow(
      'did not open with a known status within 400 ms'
    );
    expect(Date.now() - started).toBeLessThan(2000);
    expect(ctx.adopted.length).toBeGreaterThanOrEqual(3);
    expect(ctx.adopted.slice(0, -1).every(s => s.isDisposed)).toBe(true);
  });

  it('stops when the server session goes away between attempts', async () => {
    const { ctx, sessions, reconnect } = notebook(false);
    const outcome = reconnect({ timeoutMs: 5000, attemptMs: 100 });
    await settle();
    sessions.models = [];
    await expect(outcome).resolves.toBe('no-session');
    expect(ctx.adopted).toHaveLength(1);
  });
});

/** The model as the reconnector reads it. */
class FakeModel {
  status: IStatus | null = null;
  reconnectingCalls: boolean[] = [];
  private _reconnecting = 0;
  readonly changed = new Signal<this, void>(this);
  readonly stateChanged = new Signal<this, void>(this);

  get reconnecting(): boolean {
    return this._reconnecting > 0;
  }

  setReconnecting(started: boolean): void {
    this.reconnectingCalls.push(started);
    this._reconnecting += started ? 1 : -1;
    this.stateChanged.emit();
  }

  set(status: IStatus): void {
    this.status = status;
    this.stateChanged.emit();
    this.changed.emit();
  }
}

/** A notebook tracker: its panels' session contexts. */
class FakeTracker {
  panels: { sessionContext: FakeContext }[] = [];
  readonly widgetAdded = new Signal<this, { sessionContext: FakeContext }>(
    this
  );

  add(ctx: FakeContext): void {
    const panel = { sessionContext: ctx };
    this.panels.push(panel);
    this.widgetAdded.emit(panel);
  }

  forEach(fn: (panel: { sessionContext: FakeContext }) => void): void {
    this.panels.forEach(fn);
  }
}

describe('ResumeReconnector', () => {
  let states: FakeModel;
  let sessions: FakeSessions;
  let kernelRefreshes: number;
  let tracker: FakeTracker;
  let reconnector: ResumeReconnector;

  beforeEach(() => {
    states = new FakeModel();
    sessions = new FakeSessions();
    kernelRefreshes = 0;
    tracker = new FakeTracker();
    const services = {
      sessions,
      kernels: {
        refreshRunning: async () => {
          kernelRefreshes += 1;
        }
      }
    };
    reconnector = new ResumeReconnector({
      model: states as unknown as IReconnectModel,
      services: services as unknown as ServiceManager.IManager,
      widgets: [tracker as unknown as ISessionWidgets, null]
    });
  });

  afterEach(() => {
    reconnector.dispose();
  });

  it('refreshes sessions and kernels once suspended', async () => {
    states.set(statusRunning());
    states.set(statusSuspended());
    await settle();
    expect(kernelRefreshes).toBe(1);
    expect(sessions.refreshes).toBe(1);
    // Not again while it stays suspended.
    states.set(statusSuspended());
    await settle();
    expect(kernelRefreshes).toBe(1);
  });

  it('reconnects open notebooks when a resume ends', async () => {
    const ctx = new FakeContext();
    tracker.add(ctx);
    states.set(statusSuspended());
    sessions.models = [model(ctx.path)];
    states.set(statusReadyCold());
    expect(states.reconnecting).toBe(true);
    const outcomes = await reconnector.lastReconnect!;
    expect(outcomes.get(ctx.path)).toBe('reconnected');
    expect(ctx.adopted).toHaveLength(1);
    expect(states.reconnectingCalls).toEqual([true, false]);
    expect(reconnector.steady()).toBe(true);
  });

  it('does not reconnect for a restore that ended before the page opened', () => {
    states.set(statusReadyCold());
    expect(reconnector.lastReconnect).toBe(null);
    expect(states.reconnectingCalls).toEqual([]);
  });

  it('keeps notebooks attached between operations', async () => {
    states.set(statusRunning());
    const ctx = new FakeContext();
    ctx.session = sessionConnection('session-1', kernel('kernel-1'));
    tracker.add(ctx);
    sessions.models = [model(ctx.path)];
    ctx.drop();
    await settle();
    expect(ctx.adopted).toHaveLength(1);
  });
});

describe('settleKernelStatus', () => {
  /** An open connection whose status only an IOPub status message sets. */
  function openKernel(status: string, answers: boolean) {
    const k = {
      status,
      connectionStatus: 'connected',
      isDisposed: false,
      statusChanged: new Signal<unknown, string>({}),
      infoRequests: 0,
      reopens: 0,
      /** A reopened websocket: connecting for a moment, then (when `healed`) a status arrives. */
      healed: false,
      reconnect(): Promise<void> {
        this.reopens += 1;
        this.connectionStatus = 'connecting';
        setTimeout(() => {
          this.connectionStatus = 'connected';
          if (this.healed) {
            this.status = 'idle';
            this.statusChanged.emit('idle');
          }
        }, 10);
        return Promise.resolve();
      },
      requestKernelInfo(): Promise<undefined> {
        this.infoRequests += 1;
        if (answers) {
          // The busy/idle of this request reaches the browser this time.
          setTimeout(() => {
            this.status = 'idle';
            this.statusChanged.emit('idle');
          }, 5);
        }
        // Like JupyterLab's: its future may never resolve.
        return new Promise<undefined>(() => undefined);
      }
    };
    return k;
  }

  const fast = { graceMs: 20, retryMs: 20, timeoutMs: 500 };

  it('asks again when an open connection never learned the status', async () => {
    const k = openKernel('unknown', true);
    await expect(settleKernelStatus(k as never, fast)).resolves.toBe(true);
    expect(k.status).toBe('idle');
    expect(k.infoRequests).toBe(1);
  });

  it('asks nothing when the status is known', async () => {
    const k = openKernel('idle', true);
    await expect(settleKernelStatus(k as never, fast)).resolves.toBe(true);
    expect(k.infoRequests).toBe(0);
  });

  it('waits out the grace period for the status JupyterLab asked for itself', async () => {
    const k = openKernel('unknown', false);
    setTimeout(() => {
      k.status = 'idle';
      k.statusChanged.emit('idle');
    }, 5);
    await expect(
      settleKernelStatus(k as never, { ...fast, graceMs: 200 })
    ).resolves.toBe(true);
    expect(k.infoRequests).toBe(0);
  });

  it('reopens a connection that stays deaf to every request', async () => {
    const k = openKernel('unknown', false);
    k.healed = true;
    await expect(
      settleKernelStatus(k as never, {
        graceMs: 20,
        retryMs: 20,
        reopenMs: 100,
        timeoutMs: 2000
      })
    ).resolves.toBe(true);
    expect(k.reopens).toBe(1);
    expect(k.infoRequests).toBeGreaterThan(1); // asked first, reopened only then
    expect(k.status).toBe('idle');
  });

  it('does not reopen a connection that is merely slow to answer', async () => {
    const k = openKernel('unknown', true);
    await expect(
      settleKernelStatus(k as never, { ...fast, reopenMs: 100 })
    ).resolves.toBe(true);
    expect(k.reopens).toBe(0);
  });

  it('keeps asking until its deadline, then says the status is unknown', async () => {
    const k = openKernel('unknown', false);
    const started = Date.now();
    await expect(
      settleKernelStatus(k as never, {
        graceMs: 20,
        retryMs: 40,
        timeoutMs: 300
      })
    ).resolves.toBe(false);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(k.infoRequests).toBeGreaterThan(2);
    expect(k.reopens).toBe(0); // the default reopen comes after 10 s
  });
});
