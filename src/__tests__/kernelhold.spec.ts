import type { ISessionContext } from '@jupyterlab/apputils';
import { Notification } from '@jupyterlab/apputils';
import type { Session } from '@jupyterlab/services';
import { CommandRegistry } from '@lumino/commands';
import { PromiseDelegate } from '@lumino/coreutils';
import { Signal } from '@lumino/signaling';

import { IHoldModel, kernelsAwaitResume, KernelStartHold } from '../kernelhold';
import {
  operation,
  statusIn,
  statusReadyCold,
  statusRunning,
  statusSuspended
} from './fixtures';
import { FakeModel, trans } from './helpers';

/** A notebook's session context, as far as the hold looks at it. */
class FakeContext {
  path = 'work/model.ipynb';
  isDisposed = false;
  isReady = false;
  session: { id: string; kernel: { id: string } | null } | null = null;
  kernelPreference: ISessionContext.IKernelPreference = { name: 'python3' };
  readonly disposed = new Signal<this, void>(this);
  private _ready = new PromiseDelegate<void>();
  started = 0;
  adopted = 0;

  get ready(): Promise<void> {
    return this._ready.promise;
  }

  /** What JupyterLab's initialize does: start a kernel unless told not to. */
  initialize(): void {
    if (this.kernelPreference.shouldStart !== false) {
      this.session = { id: 'new', kernel: { id: 'new-kernel' } };
    }
    this.isReady = true;
    this._ready.resolve();
  }

  async startKernel(): Promise<boolean> {
    this.started += 1;
    this.session = { id: 'new', kernel: { id: 'new-kernel' } };
    return false;
  }

  _handleNewSession(session: { id: string; kernel: { id: string } }): void {
    this.adopted += 1;
    this.session = session;
  }
}

class FakeSessions {
  models: Session.IModel[] = [];

  running(): IterableIterator<Session.IModel> {
    return this.models[Symbol.iterator]();
  }

  async refreshRunning(): Promise<void> {
    // The list is what the test set.
  }

  connectTo({ model }: { model: Session.IModel }) {
    return {
      id: model.id,
      isDisposed: false,
      kernel: {
        id: model.kernel!.id,
        isDisposed: false,
        status: 'idle',
        connectionStatus: 'connected'
      }
    };
  }
}

async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++) {
    await new Promise(resolve => setTimeout(resolve, 0));
  }
}

describe('kernelsAwaitResume', () => {
  it('holds while the recorded kernels are down or coming back', () => {
    expect(kernelsAwaitResume(statusSuspended())).toBe(true);
    expect(kernelsAwaitResume(statusIn('snapshotting'))).toBe(true);
    expect(kernelsAwaitResume(statusIn('restoring'))).toBe(true);
    expect(kernelsAwaitResume(statusIn('waiting_for_capacity'))).toBe(true);
    // Failed with recorded sessions still to resume.
    expect(kernelsAwaitResume(statusIn('failed'))).toBe(true);
    expect(kernelsAwaitResume(statusIn('failed', { can_resume: false }))).toBe(
      false
    );
    expect(kernelsAwaitResume(statusRunning())).toBe(false);
    expect(kernelsAwaitResume(statusReadyCold())).toBe(false);
    expect(
      kernelsAwaitResume(
        statusIn('running', { operation: operation('checkpoint', []) })
      )
    ).toBe(false);
  });
});

describe('KernelStartHold', () => {
  let model: FakeModel;
  let sessions: FakeSessions;
  let commands: CommandRegistry;
  let resumed: number;
  let hold: KernelStartHold;

  beforeEach(() => {
    model = new FakeModel();
    sessions = new FakeSessions();
    commands = new CommandRegistry();
    resumed = 0;
    commands.addCommand('jupyter-suspend:resume', {
      execute: () => {
        resumed += 1;
      }
    });
    hold = new KernelStartHold({
      model: model as unknown as IHoldModel,
      sessions: sessions as unknown as Session.IManager,
      commands,
      trans,
      provisionalMs: 50
    });
  });

  afterEach(() => {
    hold.dispose();
    Notification.dismiss();
  });

  const open = (): FakeContext => {
    const ctx = new FakeContext();
    hold.hold(ctx as unknown as ISessionContext);
    ctx.initialize();
    return ctx;
  };

  const shown = () => Notification.manager.notifications;

  it('starts no kernel for a notebook opened while suspended, and says why', async () => {
    model.set(statusSuspended());
    const ctx = open();
    expect(ctx.session).toBe(null);
    expect(ctx.started).toBe(0);
    expect(shown()).toHaveLength(1);
    expect(shown()[0].message).toContain(
      'The environment is suspended: no kernel was started for work/model.ipynb'
    );
    // The way back is offered.
    const actions = shown()[0].options.actions!;
    expect(actions.map(a => a.label)).toEqual(['Resume', 'Start a new kernel']);
    actions[0].callback(new MouseEvent('click'));
    await settle();
    expect(resumed).toBe(1);
  });

  it('after the resume, points it at its restored session (no second kernel)', async () => {
    model.set(statusSuspended());
    const ctx = open();
    sessions.models = [
      {
        id: 'recorded',
        path: ctx.path,
        name: ctx.path,
        type: 'notebook',
        kernel: { id: 'recorded-kernel', name: 'python3' }
      }
    ];
    model.set(statusIn('restoring'));
    await settle();
    expect(ctx.session).toBe(null);
    model.set(statusReadyCold());
    await settle();
    expect(ctx.started).toBe(0);
    expect(ctx.adopted).toBe(1);
    expect(ctx.session?.kernel?.id).toBe('recorded-kernel');
    expect(ctx.kernelPreference.shouldStart).toBe(undefined);
    expect(shown()).toHaveLength(0);
  });

  it('after the resume, starts the kernel a notebook without a record would have had', async () => {
    model.set(statusSuspended());
    const ctx = open();
    model.set(statusReadyCold());
    await settle();
    expect(ctx.started).toBe(1);
    expect(ctx.adopted).toBe(0);
  });

  it('waits for the resume’s own reconnect first', async () => {
    model.set(statusSuspended());
    const ctx = open();
    model.reconnecting = true;
    model.set(statusReadyCold());
    await settle();
    expect(ctx.started).toBe(0);
    // The reconnect attached it meanwhile.
    ctx.session = { id: 'recorded', kernel: { id: 'recorded-kernel' } };
    model.reconnecting = false;
    model.stateChanged.emit();
    await settle();
    expect(ctx.started).toBe(0);
  });

  it('leaves notebooks alone while running', () => {
    model.set(statusRunning());
    const ctx = open();
    expect(ctx.session?.kernel?.id).toBe('new-kernel');
    expect(hold.held).toHaveLength(0);
    expect(shown()).toHaveLength(0);
  });

  it('holds a notebook opened before the first status only until it arrives', async () => {
    const ctx = new FakeContext();
    hold.hold(ctx as unknown as ISessionContext);
    expect(ctx.kernelPreference.shouldStart).toBe(false);
    expect(shown()).toHaveLength(0);
    // Not yet initialized when the status comes: it starts its own kernel.
    model.set(statusRunning());
    expect(ctx.kernelPreference.shouldStart).toBe(undefined);
    ctx.initialize();
    await settle();
    expect(ctx.session?.kernel?.id).toBe('new-kernel');
    expect(ctx.started).toBe(0);
  });

  it('a page reloaded while suspended keeps holding, and tells', () => {
    const ctx = open();
    expect(shown()).toHaveLength(0);
    model.set(statusSuspended());
    expect(ctx.session).toBe(null);
    expect(shown()).toHaveLength(1);
  });

  it('lets go when the server does not answer', async () => {
    const ctx = open();
    model.set(null, 'Not Found');
    await settle();
    expect(ctx.started).toBe(1);
    // Nor within the provisional time.
    const late = open();
    await new Promise(resolve => setTimeout(resolve, 80));
    await settle();
    expect(late.started).toBe(1);
  });

  it('starts a kernel anyway when asked', async () => {
    model.set(statusSuspended());
    const ctx = open();
    shown()[0].options.actions![1].callback(new MouseEvent('click'));
    await settle();
    expect(ctx.started).toBe(1);
    expect(hold.held).toHaveLength(0);
    expect(shown()).toHaveLength(0);
    // Not held again by the next status.
    model.set(statusSuspended());
    await settle();
    expect(ctx.started).toBe(1);
    expect(shown()).toHaveLength(0);
  });
});
