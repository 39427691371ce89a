/**
 * Issue 17 item 1: a misconfigured server is never silent. While a setting is
 * invalid the server answers every REST call with HTTP 503 and
 * `{"reason": "Misconfigured", "message", "problems": [{setting, message}]}`;
 * the status bar item and its panel say so, naming the setting.
 */
import { ServerConnection } from '@jupyterlab/services';
import { CommandRegistry } from '@lumino/commands';
import { MessageLoop } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import type { SnapshotDeleted, Snapshots } from '../_generated/schemas';
import { requestAPI } from '../request';
import { SuspendModel } from '../model';
import { SuspendPanel, SuspendStatusItem } from '../statusbar';
import { DEFAULT_SETTINGS, IStatus, ITimeline } from '../tokens';
import { trans } from './helpers';

const BODY = {
  reason: 'Misconfigured',
  message:
    'jupyter-suspend is off: IdlePolicy.workload_classes has an unknown key.',
  problems: [
    {
      setting: 'IdlePolicy.workload_classes',
      message: "class 'gpu': unknown key 'idle_secs' (allowed: idle_seconds, …)"
    }
  ]
};

/** `requestAPI` against a server that answers the misconfiguration contract. */
function misconfiguredServer(): ServerConnection.ISettings {
  return ServerConnection.makeSettings({
    baseUrl: 'http://localhost:8888/',
    fetch: (async () => ({
      ok: false,
      status: 503,
      statusText: 'Service Unavailable',
      headers: new Map([['Content-Type', 'application/json']]),
      text: async () => JSON.stringify(BODY)
    })) as unknown as typeof fetch
  });
}

describe('a misconfigured server (503 "Misconfigured")', () => {
  it('shows in the status bar and its panel, naming the setting', async () => {
    const settings = misconfiguredServer();
    const model = new SuspendModel({
      fetchStatus: () => requestAPI<IStatus>('status', {}, settings),
      fetchTimeline: () => requestAPI<ITimeline>('timeline', {}, settings),
      interval: 60000
    });
    await model.refresh().catch(() => undefined);
    expect(model.misconfigured).toEqual({
      message: BODY.message,
      problems: BODY.problems
    });
    expect(model.status).toBe(null);

    const options = {
      trans,
      settings: () => DEFAULT_SETTINGS,
      commands: new CommandRegistry(),
      snapshots: {
        // The panel's snapshot list asks the same misconfigured server.
        fetch: () => requestAPI<Snapshots>('snapshots', {}, settings),
        remove: () => requestAPI<SnapshotDeleted>('snapshots/x', {}, settings),
        confirm: async () => false
      }
    };
    const item = new SuspendStatusItem(model, options);
    MessageLoop.sendMessage(item, Widget.Msg.UpdateRequest);
    await new Promise(resolve => setTimeout(resolve, 100));
    expect(item.node.dataset.misconfigured).toBe('true');
    expect(item.node.dataset.tone).toBe('error');
    expect(item.node.textContent).toContain(
      'Suspend: misconfigured (IdlePolicy.workload_classes)'
    );
    expect(item.node.title).toContain(BODY.message);
    expect(item.node.title).toContain(
      `IdlePolicy.workload_classes: ${BODY.problems[0].message}`
    );

    const panel = new SuspendPanel(model, options);
    MessageLoop.sendMessage(panel, Widget.Msg.UpdateRequest);
    await new Promise(resolve => setTimeout(resolve, 100));
    expect(panel.node.textContent).toContain(BODY.message);
    expect(panel.node.textContent).toContain(BODY.problems[0].message);
    panel.dispose();
    item.dispose();
    model.dispose();
  });

  it('is forgotten once the server answers a status again', async () => {
    let misconfigured = true;
    const settings = misconfiguredServer();
    const model = new SuspendModel({
      fetchStatus: () =>
        misconfigured
          ? requestAPI<IStatus>('status', {}, settings)
          : Promise.resolve({ state: 'running' } as IStatus),
      fetchTimeline: async () => ({ cycles: [] }) as unknown as ITimeline,
      interval: 60000
    });
    await model.refresh().catch(() => undefined);
    expect(model.misconfigured).not.toBe(null);
    misconfigured = false;
    await model.refresh();
    expect(model.misconfigured).toBe(null);
    model.dispose();
  });

  it('is not claimed for another 503', async () => {
    const settings = ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/',
      fetch: (async () => ({
        ok: false,
        status: 503,
        statusText: 'Service Unavailable',
        headers: new Map(),
        text: async () => JSON.stringify({ message: 'sidecar unreachable' })
      })) as unknown as typeof fetch
    });
    const model = new SuspendModel({
      fetchStatus: () => requestAPI<IStatus>('status', {}, settings),
      fetchTimeline: async () => ({ cycles: [] }) as unknown as ITimeline,
      interval: 60000
    });
    await model.refresh().catch(() => undefined);
    expect(model.misconfigured).toBe(null);
    expect(model.error).toBe('sidecar unreachable');
    model.dispose();
  });
});
