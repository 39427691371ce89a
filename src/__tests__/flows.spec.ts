import { Notification } from '@jupyterlab/apputils';
import type { Event, ServiceManager, Session } from '@jupyterlab/services';
import { Stream } from '@lumino/signaling';

import { api } from '../api';
import * as dialogs from '../dialogs';
import { TOAST_SETTLE_MS } from '../flows';
import { KernelStartHold } from '../kernelhold';
import { SuspendModel } from '../model';
import { ColdStartNotifier } from '../notify';
import { ResumeReconnector } from '../reconnect';
import { EVENT_SCHEMA_ID, IStarted, IStatus, ITimeline } from '../tokens';
import { operation, preflight, statusIn, statusRunning } from './fixtures';
import { trans, wireCommands } from './helpers';

afterEach(() => {
  Notification.dismiss();
  jest.restoreAllMocks();
});

it('a suspend the server aborts at once ends in one notification saying why', async () => {
  // Wired as activate wires it: every listener of the model is there.
  let current: IStatus = statusIn('ready', {
    operation: { ...operation('resume', [], false), id: 'earlier' }
  });
  const events = new Stream<unknown, Event.Emission>({});
  const model = new SuspendModel({
    fetchStatus: async () => JSON.parse(JSON.stringify(current)),
    fetchTimeline: async () => ({ cycles: [] }) as unknown as ITimeline,
    events,
    interval: 60000
  });
  await model.start();
  const { commands, flows } = wireCommands(model, {
    shell: { widgets: () => [] }
  });
  const sessions = {
    running: () => [][Symbol.iterator](),
    refreshRunning: async () => undefined
  };
  new ResumeReconnector({
    model,
    services: {
      sessions,
      kernels: { refreshRunning: async () => undefined }
    } as unknown as ServiceManager.IManager,
    widgets: []
  });
  new KernelStartHold({
    model,
    sessions: sessions as unknown as Session.IManager,
    commands,
    trans
  });
  const notifier = new ColdStartNotifier({ commands, trans, state: null });
  model.changed.connect(() => void notifier.check(model.status!));

  const op = {
    ...operation('suspend', [], true),
    id: 'the-suspend',
    started: '2026-12-03T12:25:54.873152+00:00'
  };
  jest.spyOn(api, 'preflight').mockImplementation(async () => preflight());
  jest
    .spyOn(dialogs, 'confirmSuspend')
    .mockImplementation(async () => ({ confirmed: true, force: false }));
  jest.spyOn(api, 'suspend').mockImplementation(async () => {
    // The flush fails at once: aborted before the first status is read.
    current = {
      ...statusRunning(),
      operation: {
        ...op,
        in_progress: false,
        outcome: 'aborted',
        message:
          'suspend aborted, nothing was released: notebook c.ipynb on disk is not valid JSON'
      }
    };
    // The server's events arrive while the answer is on its way.
    events.emit({
      schema_id: EVENT_SCHEMA_ID,
      state: 'flushing'
    } as unknown as Event.Emission);
    events.emit({
      schema_id: EVENT_SCHEMA_ID,
      state: 'running'
    } as unknown as Event.Emission);
    return { operation: op, status: { ...current, operation: op } } as IStarted;
  });

  const started = Date.now();
  const final = await flows.suspend();
  expect(final?.operation?.outcome).toBe('aborted');
  // The operation is over: the next one may start at once (a Resume clicked
  // the moment "Suspended" shows was dropped while the toast settled).
  expect(Date.now() - started).toBeLessThan(TOAST_SETTLE_MS);
  expect(flows.guard.busy).toBe(false);
  await new Promise(resolve => setTimeout(resolve, TOAST_SETTLE_MS + 100));
  const shown = Notification.manager.notifications;
  expect(shown.map(n => n.message)).toEqual([
    'Suspend aborted, nothing was released: notebook c.ipynb on disk is not valid JSON'
  ]);
  // Not sooner than JupyterLab can show the toast: an earlier update is
  // lost and "Suspending…" would stay.
  expect(shown[0].modifiedAt - shown[0].createdAt).toBeGreaterThanOrEqual(
    TOAST_SETTLE_MS - 5
  );
  expect(flows.guard.busy).toBe(false);
  model.dispose();
});
