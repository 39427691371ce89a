import { Notification } from '@jupyterlab/apputils';

import type { IdleWarning } from '../_generated/schemas';
import {
  IdleWarningNotifier,
  secondsLeft,
  warningLabel,
  warningMessage
} from '../idle';
import type { ISuspendModel, IStatus } from '../tokens';
import { statusRunning } from './fixtures';
import { FakeModel, trans } from './helpers';

function warning(patch: Partial<IdleWarning> = {}): IdleWarning {
  return {
    started_at: '2026-12-03T15:00:00+00:00',
    ends_at: '2026-12-03T15:02:00+00:00',
    seconds_left: 120,
    workload_class: 'interactive-gpu',
    reason: 'idle 1800 s (threshold 1800 s, class interactive-gpu)',
    ...patch
  };
}

function warned(patch: Partial<IdleWarning> = {}): IStatus {
  return { ...statusRunning(), idle_warning: warning(patch) };
}

/** The model as the notifier reads it, with the fetch time and a refresh it counts. */
class Model extends FakeModel {
  fetchedAt = Date.now();
  refreshed = 0;
  refresh(): Promise<void> {
    this.refreshed += 1;
    return Promise.resolve();
  }
}

function setUp(keep: () => Promise<unknown> = () => Promise.resolve({})) {
  const model = new Model();
  const calls: string[] = [];
  const notifier = new IdleWarningNotifier({
    model: model as unknown as ISuspendModel,
    trans,
    keepRunning: () => {
      calls.push('keep-running');
      return keep();
    }
  });
  const shown = () => Notification.manager.notifications;
  return { model, notifier, calls, shown };
}

describe('the warning text', () => {
  it('counts down from the fetch time', () => {
    const w = warning({ seconds_left: 120 });
    expect(secondsLeft(w, 10_000, 40_000)).toBe(90);
    expect(secondsLeft(w, 10_000, 500_000)).toBe(0);
    expect(secondsLeft(w, 10_000, 5_000)).toBe(120); // a clock that went back
  });

  it('says when and which class, briefly', () => {
    const message = warningMessage(warning(), 44.2, trans);
    expect(message).toContain('interactive-gpu');
    expect(message).toContain('in 45 s');
    expect(message.length).toBeLessThanOrEqual(140);
  });

  it('labels the status bar only while a warning is pending', () => {
    expect(warningLabel(statusRunning(), 0, trans)).toBe(null);
    expect(warningLabel(null, 0, trans)).toBe(null);
    expect(warningLabel(warned({ seconds_left: 30 }), 1000, trans, 1000)).toBe(
      'Auto-suspend in 30 s'
    );
  });
});

describe('IdleWarningNotifier', () => {
  afterEach(() => {
    Notification.dismiss();
  });

  it('shows one notification per warning, with Keep running', () => {
    const { model, notifier, shown } = setUp();
    model.set(statusRunning());
    expect(shown()).toHaveLength(0);
    model.set(warned());
    model.set(warned()); // the same warning, polled again
    expect(shown()).toHaveLength(1);
    const [toast] = shown();
    expect(toast.id).toBe(notifier.notificationId);
    expect(toast.type).toBe('warning');
    expect(toast.options.autoClose).toBe(false);
    expect(toast.options.actions?.map(a => a.label)).toEqual(['Keep running']);
    notifier.dispose();
  });

  it('Keep running asks the server, then refreshes the status', async () => {
    const { model, notifier, calls, shown } = setUp();
    model.set(warned());
    shown()[0].options.actions![0].callback(new MouseEvent('click'));
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(calls).toEqual(['keep-running']);
    expect(model.refreshed).toBe(1);
    // The server's next status has no warning: the notification goes.
    model.set(statusRunning());
    expect(shown()).toHaveLength(0);
    expect(notifier.notificationId).toBe(null);
    notifier.dispose();
  });

  it('says why Keep running failed (the warning ended meanwhile)', async () => {
    const { model, notifier, shown } = setUp(() =>
      Promise.reject(new Error('no automatic suspend is announced'))
    );
    model.set(warned());
    shown()[0].options.actions![0].callback(new MouseEvent('click'));
    await new Promise(resolve => setTimeout(resolve, 0));
    const error = shown().find(n => n.type === 'error');
    expect(error?.message).toContain('no automatic suspend is announced');
    notifier.dispose();
  });

  it('replaces the notification for a new warning, and ends with the suspend', () => {
    const { model, notifier, shown } = setUp();
    model.set(warned());
    const first = notifier.notificationId;
    model.set(warned({ started_at: '2026-12-03T16:00:00+00:00' }));
    expect(shown()).toHaveLength(1);
    expect(notifier.notificationId).not.toBe(first);
    model.set({ ...statusRunning(), state: 'flushing', idle_warning: null });
    expect(shown()).toHaveLength(0);
    notifier.dispose();
  });
});
