import type { Event } from '@jupyterlab/services';
import { Stream } from '@lumino/signaling';

import { SuspendModel } from '../model';
import {
  EVENT_SCHEMA_ID,
  ILifecycleEvent,
  IStatus,
  ITimeline
} from '../tokens';
import { statusIn, statusRunning, statusSuspended, timeline } from './fixtures';

const IDLE_MS = 60_000;
const BUSY_MS = 1_000;

/** A server whose answers the test sets, counting the calls. */
class FakeServer {
  status: IStatus | Error = statusRunning();
  statusCalls = 0;
  timelineCalls = 0;
  readonly events = new Stream<unknown, Event.Emission>({});

  fetchStatus = async (): Promise<IStatus> => {
    this.statusCalls += 1;
    if (this.status instanceof Error) {
      throw this.status;
    }
    return JSON.parse(JSON.stringify(this.status));
  };

  fetchTimeline = async (): Promise<ITimeline> => {
    this.timelineCalls += 1;
    return timeline();
  };

  emit(data: Partial<ILifecycleEvent>, schema = EVENT_SCHEMA_ID): void {
    this.events.emit({ schema_id: schema, ...data } as Event.Emission);
  }
}

function makeModel(server: FakeServer): SuspendModel {
  return new SuspendModel({
    fetchStatus: server.fetchStatus,
    fetchTimeline: server.fetchTimeline,
    events: server.events,
    interval: IDLE_MS,
    busyInterval: BUSY_MS
  });
}

/** Resolve on the model's next `changed`. */
function nextChange(model: SuspendModel): Promise<void> {
  return new Promise(resolve => {
    const done = (): void => {
      model.changed.disconnect(done);
      resolve();
    };
    model.changed.connect(done);
  });
}

describe('SuspendModel', () => {
  let server: FakeServer;
  let model: SuspendModel;

  beforeEach(async () => {
    server = new FakeServer();
    model = makeModel(server);
    await model.start();
    await model.refresh();
  });

  afterEach(() => {
    model.dispose();
  });

  it('holds the last status and when it was fetched', () => {
    expect(model.status?.state).toBe('running');
    expect(model.error).toBe(null);
    expect(model.fetchedAt).toBeGreaterThan(0);
    expect(model.fetchedAt).toBeLessThanOrEqual(Date.now());
  });

  it('polls slowly when idle and fast only while an operation runs', async () => {
    expect(model.pollInterval).toBe(IDLE_MS);
    server.status = statusIn('flushing');
    await model.refresh();
    expect(model.status?.operation?.in_progress).toBe(true);
    expect(model.pollInterval).toBe(BUSY_MS);
    server.status = statusSuspended();
    await model.refresh();
    expect(model.status?.state).toBe('suspended');
    expect(model.pollInterval).toBe(IDLE_MS);
  });

  it('follows the idle interval setting', async () => {
    model.setInterval(30_000);
    expect(model.pollInterval).toBe(30_000);
    server.status = statusIn('restoring');
    await model.refresh();
    // An operation still polls fast whatever the setting.
    expect(model.pollInterval).toBe(BUSY_MS);
  });

  it('refreshes on each lifecycle event and re-emits it', async () => {
    const seen: ILifecycleEvent[] = [];
    model.lifecycleEvent.connect((_, event) => seen.push(event));
    const calls = server.statusCalls;
    server.status = statusIn('flushing');
    const changed = nextChange(model);
    server.emit({
      state: 'flushing',
      previous_state: 'running',
      backend: 'local',
      operation_id: 'op-suspend',
      operation_kind: 'suspend'
    });
    await changed;
    expect(server.statusCalls).toBe(calls + 1);
    expect(model.status?.state).toBe('flushing');
    expect(seen).toHaveLength(1);
    expect(seen[0].state).toBe('flushing');
    expect(seen[0].operation_id).toBe('op-suspend');
  });

  it('ignores events of other schemas', async () => {
    const seen: ILifecycleEvent[] = [];
    model.lifecycleEvent.connect((_, event) => seen.push(event));
    const calls = server.statusCalls;
    server.emit(
      { state: 'failed' },
      'https://events.jupyter.org/jupyter_server/kernel_actions/v1'
    );
    // A refresh that we ask for resolves after any refresh the event caused.
    await model.refresh();
    expect(seen).toHaveLength(0);
    expect(server.statusCalls).toBe(calls + 1);
  });

  it('reports an unreachable server and recovers when it answers', async () => {
    server.status = new Error('Service Unavailable');
    await model.refresh().catch(() => undefined);
    expect(model.error).toBe('Service Unavailable');
    // The last known status stays: the UI can still say what it knew.
    expect(model.status?.state).toBe('running');
    server.status = statusSuspended();
    await model.refresh();
    expect(model.error).toBe(null);
    expect(model.status?.state).toBe('suspended');
  });

  it('fetches the timeline only when the state or operation changes', async () => {
    // The first status fetched it once (in the background).
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(server.timelineCalls).toBe(1);
    expect(model.timeline?.cycles).toHaveLength(1);
    await model.refresh();
    await model.refresh();
    expect(server.timelineCalls).toBe(1);
    server.status = statusSuspended();
    await model.refresh();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(server.timelineCalls).toBe(2);
  });

  it('waitFor resolves once the status satisfies the predicate', async () => {
    const waiting = model.waitFor(s => s.state === 'suspended', 5000);
    let settled = false;
    void waiting.then(() => (settled = true));
    await model.refresh();
    expect(settled).toBe(false);
    server.status = statusSuspended();
    server.emit({ state: 'suspended', previous_state: 'snapshotting' });
    const status = await waiting;
    expect(status.state).toBe('suspended');
  });

  it('waitFor resolves at once when the status already matches', async () => {
    const status = await model.waitFor(s => s.state === 'running', 5000);
    expect(status.state).toBe('running');
  });

  it('waitFor gives up after its timeout', async () => {
    await expect(model.waitFor(s => s.state === 'ready', 50)).rejects.toThrow(
      'timed out'
    );
  });

  it('waitFor with no deadline keeps waiting', async () => {
    jest.useFakeTimers();
    try {
      let settled = false;
      const waiting = model.waitFor(s => s.state === 'suspended', 0);
      void waiting.then(() => (settled = true));
      jest.advanceTimersByTime(24 * 3600 * 1000);
      await Promise.resolve();
      expect(settled).toBe(false);
    } finally {
      jest.useRealTimers();
    }
  });

  it('an older answer arriving after a newer one is dropped', async () => {
    // Two fetches in flight (a tick and an event's refresh); the first one
    // answers last. It must not take the state back to "restoring".
    const answers: ((status: IStatus) => void)[] = [];
    const slow = new SuspendModel({
      fetchStatus: () =>
        new Promise<IStatus>(resolve => {
          answers.push(resolve);
        }),
      fetchTimeline: server.fetchTimeline,
      events: server.events,
      interval: IDLE_MS
    });
    const states: string[] = [];
    slow.changed.connect(() => states.push(slow.status?.state ?? 'none'));
    const settle = (): Promise<void> =>
      new Promise(resolve => setTimeout(resolve, 0));
    // The poll schedules its ticks on animation frames.
    const fetches = async (n: number): Promise<void> => {
      for (let i = 0; i < 200 && answers.length < n; i++) {
        await new Promise(resolve => setTimeout(resolve, 5));
      }
      expect(answers).toHaveLength(n);
    };
    try {
      void slow.start();
      await fetches(1);
      server.emit({ state: 'ready', previous_state: 'restoring' });
      await fetches(2);
      answers[1](statusIn('ready'));
      await settle();
      answers[0](statusIn('restoring'));
      await settle();
      expect(slow.status?.state).toBe('ready');
      expect(states).not.toContain('restoring');
    } finally {
      slow.dispose();
    }
  });

  it('counts reconnects and re-renders without a status change', () => {
    let renders = 0;
    let changes = 0;
    model.stateChanged.connect(() => (renders += 1));
    model.changed.connect(() => (changes += 1));
    expect(model.reconnecting).toBe(false);
    model.setReconnecting(true);
    model.setReconnecting(true);
    expect(model.reconnecting).toBe(true);
    model.setReconnecting(false);
    expect(model.reconnecting).toBe(true);
    model.setReconnecting(false);
    expect(model.reconnecting).toBe(false);
    // An extra end never goes below zero.
    model.setReconnecting(false);
    expect(model.reconnecting).toBe(false);
    expect(renders).toBe(2);
    expect(changes).toBe(0);
  });

  it('stops listening to events once disposed', () => {
    const seen: ILifecycleEvent[] = [];
    model.lifecycleEvent.connect((_, event) => seen.push(event));
    model.dispose();
    server.emit({ state: 'flushing' });
    expect(seen).toHaveLength(0);
    expect(model.isDisposed).toBe(true);
  });
});
