/**
 * Issue 17, the plugin's parts: answering save requests (item 3), what a
 * returning user is told (item 3), the cold-restore toast's offer (item 5),
 * the suspended-run guard (item 5) and toast changes that are never lost
 * (the stale "Suspended" toast).
 */
import { Notification } from '@jupyterlab/apputils';
import type { ISessionContext } from '@jupyterlab/apputils';
import type { DocumentRegistry } from '@jupyterlab/docregistry';
import type { Event } from '@jupyterlab/services';
import { CommandRegistry } from '@lumino/commands';
import { Stream } from '@lumino/signaling';

import type { SaveAnswerRequest } from '../_generated/schemas';
import { checkpointsLeftToLoad, lastSuspendMessage } from '../notify';
import { SuspendedRunGuard } from '../runguard';
import { SAVE_EVENT_SCHEMA_ID, SaveRequestResponder } from '../saverequests';
import { dismissWhenShown, settle, TOAST_SETTLE_MS } from '../toasts';
import type { IStatus } from '../tokens';
import { gpuHoursText } from '../dialogs';
import { describeCycle } from '../display';
import {
  statusIn,
  statusReadyCold,
  statusSuspended,
  timeline
} from './fixtures';
import { trans } from './helpers';

function context(path: string): DocumentRegistry.Context {
  return { path } as unknown as DocumentRegistry.Context;
}

describe('SaveRequestResponder (item 3)', () => {
  function setup(
    dirty: string[],
    save: (paths: string[]) => {
      saved: string[];
      failed: { path: string; error: string }[];
    }
  ) {
    const events = new Stream<unknown, Event.Emission>({});
    const answers: SaveAnswerRequest[] = [];
    const responder = new SaveRequestResponder({
      events,
      dirty: () => dirty.map(context),
      save: async contexts => save(contexts.map(c => c.path)),
      answer: async body => {
        answers.push(body);
      },
      clientId: 'page-1'
    });
    return { events, answers, responder };
  }

  it('says what it saves, saves it, then says what was saved and what was not', async () => {
    const { answers, responder } = setup(['a.ipynb', 'b.ipynb'], () => ({
      saved: ['a.ipynb'],
      failed: [{ path: 'b.ipynb', error: 'disk full' }]
    }));
    await responder.respond({
      request_id: '0123456789abcdef',
      dry_run: false,
      answer_within_seconds: 3,
      deadline_seconds: 30
    });
    expect(answers).toEqual([
      {
        request_id: '0123456789abcdef',
        client_id: 'page-1',
        state: 'saving',
        saving: ['a.ipynb', 'b.ipynb']
      },
      {
        request_id: '0123456789abcdef',
        client_id: 'page-1',
        state: 'done',
        saved: ['a.ipynb'],
        failed: [{ path: 'b.ipynb', error: 'disk full' }]
      }
    ]);
    responder.dispose();
  });

  it('a dry run only lists the unsaved documents', async () => {
    let saved = false;
    const { answers, responder } = setup(['a.ipynb'], () => {
      saved = true;
      return { saved: [], failed: [] };
    });
    await responder.respond({
      request_id: '0123456789abcdef',
      dry_run: true,
      answer_within_seconds: 3,
      deadline_seconds: 30
    });
    expect(saved).toBe(false);
    expect(answers).toEqual([
      {
        request_id: '0123456789abcdef',
        client_id: 'page-1',
        state: 'done',
        unsaved: ['a.ipynb']
      }
    ]);
    responder.dispose();
  });

  it('answers the events of its schema only, from the event stream', async () => {
    const { events, answers, responder } = setup([], () => ({
      saved: [],
      failed: []
    }));
    events.emit({ schema_id: 'https://example.org/other', request_id: 'x' });
    events.emit({
      schema_id: SAVE_EVENT_SCHEMA_ID,
      request_id: 'fedcba9876543210',
      dry_run: false,
      answer_within_seconds: 3,
      deadline_seconds: 30
    });
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(answers).toEqual([
      {
        request_id: 'fedcba9876543210',
        client_id: 'page-1',
        state: 'done',
        saved: [],
        failed: []
      }
    ]);
    responder.dispose();
  });
});

describe('what a returning user is told (item 3)', () => {
  it('an automatic suspend: by the idle policy, when, after how long idle, the class', () => {
    const status = statusSuspended();
    status.last_suspend = {
      operation_id: 'op1',
      origin: 'idle_policy',
      reason: 'automatic suspend: idle 1800 s',
      workload_class: 'interactive-gpu',
      requested_at: '2026-12-04T10:00:00+00:00',
      suspended_at: '2026-12-04T10:00:05+00:00',
      idle_seconds: 1800
    };
    const message = lastSuspendMessage(status, trans)!;
    expect(message).toContain('Suspended automatically at');
    expect(message).toContain('by the idle policy after 30 min idle');
    expect(message).toContain('(workload class interactive-gpu)');
  });

  it('nothing to tell before a suspend released anything', () => {
    const status = statusSuspended();
    status.last_suspend = {
      operation_id: 'op1',
      origin: 'user',
      reason: '',
      workload_class: null,
      requested_at: '2026-12-04T10:00:00+00:00',
      suspended_at: null,
      idle_seconds: null
    };
    expect(lastSuspendMessage(status, trans)).toBe(null);
  });
});

describe('the cold-restore toast offers only checkpoints left to load (item 5)', () => {
  function cold(restored: IStatus['last_restore']): IStatus {
    const status = statusReadyCold();
    status.last_restore = { ...status.last_restore!, ...restored };
    return status;
  }
  const kernels = [{ kernel_id: 'k1', path: 'a.ipynb', error: null }];

  it('not when the resume loaded them all', () => {
    const status = cold({
      ...statusReadyCold().last_restore!,
      kernels,
      checkpoints_restored: {
        k1: {
          path: 'a.ipynb',
          outcome: 'ok',
          message: '',
          restored: ['w'],
          missing: []
        }
      },
      checkpoints_restored_count: 1
    });
    expect(checkpointsLeftToLoad(status)).toBe(false);
  });

  it('when one could not be loaded, or the resume loaded none', () => {
    const failed = cold({
      ...statusReadyCold().last_restore!,
      kernels,
      checkpoints_restored: {
        k1: {
          path: 'a.ipynb',
          outcome: 'error',
          message: 'hash mismatch',
          restored: [],
          missing: ['w']
        }
      }
    });
    expect(checkpointsLeftToLoad(failed)).toBe(true);
    const none = cold({
      ...statusReadyCold().last_restore!,
      kernels,
      checkpoints_restored: {}
    });
    expect(checkpointsLeftToLoad(none)).toBe(true);
  });
});

describe('SuspendedRunGuard (item 5)', () => {
  function fakeContext(): ISessionContext & { starts: number } {
    const ctx: Record<string, unknown> & { starts: number } = {
      path: 'nb.ipynb',
      starts: 0,
      kernelPreference: { shouldStart: true },
      disposed: { connect: () => undefined },
      startKernel: async () => {
        ctx.starts += 1;
        return true; // JupyterLab would open its kernel picker
      }
    };
    return ctx as unknown as ISessionContext & { starts: number };
  }

  it('while suspended, asks instead of starting (or picking) a kernel; Resume resumes', async () => {
    const commands = new CommandRegistry();
    let resumed = 0;
    commands.addCommand('jupyter-suspend:resume', {
      execute: () => {
        resumed += 1;
      }
    });
    const asked: string[] = [];
    const model = { status: statusSuspended() as IStatus | null };
    const guard = new SuspendedRunGuard({
      model,
      commands,
      trans,
      ask: async path => {
        asked.push(path);
        return 'resume';
      }
    });
    const ctx = fakeContext();
    guard.guard(ctx);
    expect(await ctx.startKernel()).toBe(false); // no picker
    expect(asked).toEqual(['nb.ipynb']);
    expect(ctx.starts).toBe(0);
    expect(resumed).toBe(1);

    // Running: JupyterLab's own start, unasked.
    model.status = statusIn('running');
    expect(await ctx.startKernel()).toBe(true);
    expect(ctx.starts).toBe(1);
    expect(asked).toHaveLength(1);
    guard.dispose();
  });

  it('an explicit new kernel starts one; Cancel runs nothing', async () => {
    const model = { status: statusSuspended() as IStatus | null };
    let choice: 'new-kernel' | 'cancel' = 'new-kernel';
    const guard = new SuspendedRunGuard({
      model,
      commands: new CommandRegistry(),
      trans,
      ask: async () => choice
    });
    const ctx = fakeContext();
    guard.guard(ctx);
    await ctx.startKernel();
    expect(ctx.starts).toBe(1);
    choice = 'cancel';
    expect(await ctx.startKernel()).toBe(false);
    expect(ctx.starts).toBe(1);
    guard.dispose();
  });
});

describe('toast changes are never lost (the stale "Suspended" toast)', () => {
  afterEach(() => {
    Notification.dismiss();
  });

  it('a dismissal waits TOAST_SETTLE_MS after the last update, not only after the toast appeared', async () => {
    const id = Notification.emit('Suspending…', 'in-progress', {
      autoClose: false
    });
    await new Promise(resolve => setTimeout(resolve, TOAST_SETTLE_MS + 50));
    const updated = settle({ id, message: 'Suspended: 1 kernel.' });
    const dismissed = dismissWhenShown(id);
    await updated;
    const updatedAt = Date.now();
    expect(
      Notification.manager.notifications.find(n => n.id === id)?.message
    ).toBe('Suspended: 1 kernel.');
    await dismissed;
    expect(Date.now() - updatedAt).toBeGreaterThanOrEqual(TOAST_SETTLE_MS - 20);
    expect(Notification.manager.notifications.find(n => n.id === id)).toBe(
      undefined
    );
  });
});

describe('"not measured" is never shown as 0 GPU-hours (item 8)', () => {
  it('says not measured for a recorded release without NVML, per cycle and in the totals', () => {
    // Recorded from a real server on a machine without NVML.
    const recorded = timeline();
    const cycle = recorded.cycles[recorded.cycles.length - 1];
    expect(cycle.released_totals.gpu_hours).toBeNull();
    expect(describeCycle(cycle, trans)).toContain(
      'GPU hours released: not measured'
    );
    expect(gpuHoursText(recorded.totals, trans)).toBe('not measured');
  });

  it('gives the measured sum and counts the cycles that were not measured', () => {
    const totals = {
      ...timeline().totals,
      gpu_hours_released: 2.5,
      gpu_hours_unknown_cycles: 1
    };
    expect(gpuHoursText(totals, trans)).toBe('2.500 (1 cycle(s) not measured)');
    expect(
      gpuHoursText({ ...totals, gpu_hours_unknown_cycles: 0 }, trans)
    ).toBe('2.500');
  });
});
