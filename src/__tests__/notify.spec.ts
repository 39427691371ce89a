import { Notification } from '@jupyterlab/apputils';
import { StateDB } from '@jupyterlab/statedb';
import { CommandRegistry } from '@lumino/commands';

import { operationEnded } from '../flows';
import {
  announcementKey,
  announcementMessage,
  ColdStartNotifier
} from '../notify';
import type { IStatus } from '../tokens';
import {
  operation,
  statusIn,
  statusReadyCold,
  statusRunning,
  statusSuspended
} from './fixtures';
import { trans } from './helpers';

/** A server that started while its kernels were being shut down. */
function startedCold(): IStatus {
  return statusIn('suspended', {
    cold_start: {
      previous_state: 'snapshotting',
      previous_time: '2026-12-01T20:00:00+00:00',
      message: 'The server stopped while kernels were being shut down.',
      next_step: ''
    }
  });
}

describe('announcementKey', () => {
  it('names a cold restore by its operation id', () => {
    const status = statusReadyCold();
    expect(announcementKey(status)).toBe(
      `restore:${status.last_restore!.operation_id}`
    );
  });

  it('does not announce a live restore or a running session', () => {
    expect(announcementKey(statusIn('ready', { restore: 'live' }))).toBe(null);
    expect(announcementKey(statusRunning())).toBe(null);
    expect(announcementKey(statusSuspended())).toBe(null);
  });

  it('announces a server that started cold', () => {
    const status = startedCold();
    expect(announcementKey(status)).toBe(
      'cold-start:snapshotting:2026-12-01T20:00:00+00:00'
    );
    expect(announcementMessage(status, trans)).toContain(
      'The server started cold: The server stopped while kernels'
    );
  });

  it('explains a cold restore with the numbers', () => {
    const status = statusReadyCold();
    status.last_restore!.checkpoints_restored_count = 2;
    const message = announcementMessage(status, trans);
    expect(message).toBe(
      'Cold restore: 1 kernel restarted, in-memory variables are gone. Files are intact; 2 checkpoints restored.'
    );
    expect(message.length).toBeLessThanOrEqual(140);
  });
});

describe('ColdStartNotifier', () => {
  afterEach(() => {
    Notification.dismiss();
  });

  it('announces a restore once, on the page that saw it end', async () => {
    const state = new StateDB();
    const commands = new CommandRegistry();
    const first = new ColdStartNotifier({ commands, trans, state });
    const status = statusReadyCold();

    expect(await first.check(statusSuspended())).toBe(null);
    const id = await first.check(status);
    expect(id).not.toBe(null);
    const shown = Notification.manager.notifications.find(n => n.id === id)!;
    expect(shown.type).toBe('warning');
    expect(shown.options.autoClose).toBe(false);
    expect(shown.options.actions?.map(a => a.label)).toEqual([
      'Load checkpoints',
      'Timeline'
    ]);
    expect(await first.check(status)).toBe(null);

    // A reload of the page (same state database) does not announce it again.
    const reloaded = new ColdStartNotifier({ commands, trans, state });
    expect(await reloaded.check(status)).toBe(null);

    // The next restore it sees end is new.
    const next = statusReadyCold();
    next.last_restore!.operation_id = 'another-restore';
    expect(await reloaded.check(next)).not.toBe(null);
  });

  it('does not announce a restore that ended before the page opened', async () => {
    // Another browser, or a state database that remembers nothing (Galata):
    // the first status it sees is ready after an old cold restore.
    const commands = new CommandRegistry();
    for (const state of [new StateDB(), null]) {
      const page = new ColdStartNotifier({ commands, trans, state });
      expect(await page.check(statusReadyCold())).toBe(null);
      expect(await page.check(statusReadyCold())).toBe(null);
      expect(Notification.manager.count).toBe(0);
    }
  });

  it('still announces a cold start of the server to a page opened later', async () => {
    const state = new StateDB();
    const commands = new CommandRegistry();
    const status = startedCold();
    const page = new ColdStartNotifier({ commands, trans, state });
    expect(await page.check(status)).not.toBe(null);
    const reloaded = new ColdStartNotifier({ commands, trans, state });
    expect(await reloaded.check(status)).toBe(null);
  });

  it('runs the load-checkpoints command from its action', async () => {
    const commands = new CommandRegistry();
    const ran: string[] = [];
    commands.addCommand('jupyter-suspend:restore-checkpoints', {
      execute: () => {
        ran.push('restore');
      }
    });
    const notifier = new ColdStartNotifier({ commands, trans, state: null });
    await notifier.check(statusIn('restoring'));
    const id = await notifier.check(statusReadyCold());
    const shown = Notification.manager.notifications.find(n => n.id === id)!;
    shown.options.actions![0].callback(new MouseEvent('click'));
    await Promise.resolve();
    expect(ran).toEqual(['restore']);
  });
});

describe('operationEnded', () => {
  const started = '2026-12-02T15:33:12.500000+00:00';

  it('waits for our operation to finish', () => {
    const running = statusIn('flushing');
    expect(operationEnded(running, 'op-suspend', started)).toBe(false);
    const done = statusIn('running', {
      operation: operation('suspend', [], false)
    });
    expect(operationEnded(done, 'op-suspend', started)).toBe(true);
  });

  it('does not take a status from before the operation for its end', () => {
    // GET status answered before the POST was processed: no operation yet.
    expect(operationEnded(statusRunning(), 'op-suspend', started)).toBe(false);
    const older = statusIn('running', {
      operation: {
        ...operation('checkpoint', [], false),
        started: '2026-12-02T15:00:00+00:00'
      }
    });
    expect(operationEnded(older, 'op-suspend', started)).toBe(false);
  });

  it('a later operation means ours is over (one at a time)', () => {
    const later = statusIn('restoring', {
      operation: {
        ...operation('resume', []),
        started: '2026-12-02T15:40:00+00:00'
      }
    });
    expect(operationEnded(later, 'op-suspend', started)).toBe(true);
  });
});
