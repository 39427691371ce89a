import {
  currentStep,
  describeCycle,
  describeStatus,
  formatBytes,
  formatDuration,
  formatIdle,
  idleSecondsNow,
  IDisplayOptions,
  preflightToView,
  progressMessage,
  releasedSummary,
  stepLabel
} from '../display';
import { STATES } from '../tokens';
import {
  LOCAL_TEXT,
  olderServer,
  operation,
  preflight,
  statusIn,
  statusReadyCold,
  statusRunning,
  statusSuspended,
  step,
  timeline
} from './fixtures';
import { trans } from './helpers';
const NOW = 1_800_000_000_000;
const opts = (patch: Partial<IDisplayOptions> = {}): IDisplayOptions => ({
  now: NOW,
  fetchedAt: NOW,
  showIdleTime: true,
  ...patch
});

describe('formatDuration', () => {
  it.each([
    [0, '0 s'],
    [42.9, '42 s'],
    [59, '59 s'],
    [60, '1 min'],
    [3599, '59 min'],
    [3600, '1 h 00 min'],
    [3725, '1 h 02 min'],
    [86399, '23 h 59 min'],
    [90000, '1 d 1 h'],
    [-5, '0 s']
  ])('%p seconds reads %p', (seconds, text) => {
    expect(formatDuration(seconds, trans)).toBe(text);
  });
});

describe('idle time', () => {
  it('says active during the first minute', () => {
    expect(formatIdle(0, trans)).toBe('active');
    expect(formatIdle(59.9, trans)).toBe('active');
  });

  it('says how long after that', () => {
    expect(formatIdle(60, trans)).toBe('idle 1 min');
    expect(formatIdle(2 * 3600 + 5 * 60, trans)).toBe('idle 2 h 05 min');
  });

  it('ages the server value by the time since it was fetched', () => {
    const status = { ...statusRunning(), idle_seconds: 100 };
    expect(idleSecondsNow(status, NOW - 30_000, NOW)).toBeCloseTo(130);
    // A clock that went backwards never makes it younger.
    expect(idleSecondsNow(status, NOW + 5_000, NOW)).toBe(100);
    expect(idleSecondsNow({ ...status, idle_seconds: null }, NOW, NOW)).toBe(
      null
    );
  });
});

describe('describeStatus', () => {
  it('gives every server state its own label and a tone', () => {
    const labels = new Set<string>();
    for (const state of STATES) {
      const shown = describeStatus(
        statusIn(state, { idle_seconds: null }),
        opts(),
        trans
      );
      expect(shown.state).toBe(state);
      expect(shown.label).not.toBe('');
      expect(shown.tone).not.toBe('unknown');
      labels.add(shown.label);
    }
    expect(labels.size).toBe(STATES.length);
  });

  it('running shows the idle time, or not, by setting', () => {
    const status = { ...statusRunning(), idle_seconds: 12 * 60 };
    const shown = describeStatus(status, opts(), trans);
    expect(shown.label).toBe('Running · idle 12 min');
    expect(shown.tone).toBe('ok');
    expect(
      describeStatus(status, opts({ showIdleTime: false }), trans).label
    ).toBe('Running');
  });

  it('running with a checkpoint in progress says so', () => {
    const status = statusIn('running', {
      operation: operation('checkpoint', [step('flush.kernels')])
    });
    const shown = describeStatus(status, opts(), trans);
    expect(shown.label).toBe('Running · writing application checkpoints…');
    expect(shown.details).toContain(
      'Current step: writing application checkpoints'
    );
  });

  it('flushing and snapshotting say suspending and the current step', () => {
    const flushing = describeStatus(statusIn('flushing'), opts(), trans);
    expect(flushing.label).toBe(
      'Suspending: flushing (writing application checkpoints)'
    );
    expect(flushing.tone).toBe('busy');
    expect(flushing.headline).toBe('Suspending');
    const snapshotting = describeStatus(
      statusIn('snapshotting'),
      opts(),
      trans
    );
    // The backend words its own release step.
    expect(snapshotting.label).toBe(
      'Suspending: snapshotting (stopping the kernels and releasing their memory)'
    );
    // A server without those words: plain ones.
    expect(
      describeStatus(olderServer(statusIn('snapshotting')), opts(), trans).label
    ).toBe('Suspending: snapshotting (releasing the environment)');
  });

  it('suspended offers the resume when the server can resume', () => {
    const status = statusSuspended();
    expect(status.can_resume).toBe(true);
    const shown = describeStatus(status, opts(), trans);
    // for as long as the recorded answer says (seconds_in_state)
    expect(shown.label).toMatch(/^Suspended · \d+ s$/);
    expect(shown.tone).toBe('warn');
    expect(shown.headline).toContain('resume');
    // No idle time while suspended: nothing runs.
    expect(shown.label).not.toContain('idle');
  });

  it('suspended and waiting for capacity say for how long, aged since the fetch', () => {
    const suspended = {
      ...statusSuspended(),
      seconds_in_state: 2 * 3600 + 5 * 60
    };
    expect(describeStatus(suspended, opts(), trans).label).toBe(
      'Suspended · 2 h 05 min'
    );
    const later = { ...opts(), now: NOW + 30 * 60 * 1000 };
    expect(describeStatus(suspended, later, trans).label).toBe(
      'Suspended · 2 h 35 min'
    );
    const waiting = {
      ...statusIn('waiting_for_capacity'),
      seconds_in_state: 90
    };
    expect(describeStatus(waiting, opts(), trans).label).toBe(
      'Waiting for capacity · 1 min'
    );
  });

  it('waiting for capacity and restoring', () => {
    const waiting = describeStatus(
      statusIn('waiting_for_capacity'),
      opts(),
      trans
    );
    expect(waiting.label).toMatch(/^Waiting for capacity · \d+ s$/);
    expect(waiting.tone).toBe('warn');
    expect(waiting.details[0]).toContain('GiB required');
    const restoring = describeStatus(statusIn('restoring'), opts(), trans);
    expect(restoring.label).toBe(
      'Restoring (restarting the recorded sessions)'
    );
    expect(restoring.tone).toBe('busy');
  });

  it('ready (cold) counts the checkpoints restored, with plurals', () => {
    const recorded = statusReadyCold();
    expect(recorded.last_restore?.checkpoints_restored_count).toBe(0);
    const label = (n: number): string => {
      const status = statusReadyCold();
      status.idle_seconds = null;
      status.last_restore!.checkpoints_restored_count = n;
      return describeStatus(status, opts(), trans).label;
    };
    expect(label(0)).toBe('Ready (cold, 0 checkpoints restored)');
    expect(label(1)).toBe('Ready (cold, 1 checkpoint restored)');
    expect(label(3)).toBe('Ready (cold, 3 checkpoints restored)');
    const shown = describeStatus(recorded, opts(), trans);
    expect(shown.headline).toContain('cold start');
  });

  it('ready says so while open notebooks are being reconnected', () => {
    const status = statusReadyCold();
    status.idle_seconds = null;
    status.last_restore!.checkpoints_restored_count = 1;
    const shown = describeStatus(status, opts({ reconnecting: true }), trans);
    expect(shown.label).toBe(
      'Ready (cold, 1 checkpoint restored) · reconnecting notebooks…'
    );
    expect(shown.details).toContain(
      'Reconnecting open notebooks to their restored kernels…'
    );
    const after = describeStatus(status, opts(), trans);
    expect(after.label).not.toContain('reconnecting');
  });

  it('ready (live) says the live session came back', () => {
    const status = statusIn('ready', {
      restore: 'live',
      idle_seconds: 3600
    });
    const shown = describeStatus(status, opts(), trans);
    expect(shown.label).toBe('Ready (live) · idle 1 h 00 min');
    expect(shown.headline).toBe('Ready: the live session came back');
  });

  it('ready (live) with a kernel restarted since does not claim the live state', () => {
    const status = statusIn('ready', { restore: 'live', idle_seconds: null });
    status.last_restore = {
      ...(statusReadyCold().last_restore as NonNullable<
        typeof status.last_restore
      >),
      live_lost: [
        {
          kernel_id: 'k1',
          path: 'train.ipynb',
          reason: 'restarted',
          verified_pid: 100,
          pid: 200
        }
      ]
    };
    const shown = describeStatus(status, opts(), trans);
    expect(shown.tone).toBe('warn');
    expect(shown.label).toBe('Ready (live, 1 kernel restarted since)');
    expect(shown.headline).toContain('restored memory is gone');
    status.last_restore!.live_lost = [];
    expect(describeStatus(status, opts(), trans).headline).toBe(
      'Ready: the live session came back'
    );
  });

  it('failed shows the reason and the next step', () => {
    const status = statusIn('failed');
    const shown = describeStatus(status, opts(), trans);
    expect(shown.tone).toBe('error');
    // The status bar cuts long reasons; the details keep them whole.
    expect(shown.label.startsWith('Failed: no kernel could be restarted')).toBe(
      true
    );
    expect(shown.label.endsWith('…')).toBe(true);
    expect(shown.label.length).toBeLessThanOrEqual('Failed: '.length + 40);
    expect(shown.details).toEqual([
      `Reason: ${status.failure!.reason}`,
      `Next step: ${status.failure!.next_step}`
    ]);
  });

  it('reports an aborted suspend while running again', () => {
    const status = statusIn('running', {
      operation: {
        ...operation('suspend', [step('flush.notebooks', 'failed')], false),
        outcome: 'aborted',
        message:
          'suspend aborted, nothing was released: notebook nb.ipynb is not on disk; save it first'
      }
    });
    const shown = describeStatus(status, opts(), trans);
    expect(shown.state).toBe('running');
    expect(shown.details).toContain(
      'Last suspend aborted: suspend aborted, nothing was released: notebook nb.ipynb is not on disk; save it first'
    );
  });

  it('reports a server that started cold', () => {
    const status = statusIn('suspended', {
      cold_start: {
        previous_state: 'suspended',
        previous_time: '2026-12-01T20:00:00+00:00',
        message: 'The server restarted while suspended.',
        next_step: ''
      }
    });
    const shown = describeStatus(status, opts(), trans);
    expect(shown.details).toContain(
      'Server started cold: The server restarted while suspended.'
    );
  });

  it('without an answer says so, and why', () => {
    expect(describeStatus(null, opts(), trans).label).toBe('Suspend: …');
    const down = describeStatus(null, opts(), trans, 'Service Unavailable');
    expect(down.label).toBe('Suspend: unavailable');
    expect(down.tone).toBe('unknown');
    expect(down.details).toEqual(['Service Unavailable']);
  });
});

describe('operation steps', () => {
  it('current step is the running one, else the last', () => {
    const op = operation('suspend', [
      step('flush.notebooks', 'ok'),
      step('flush.kernels', 'running')
    ]);
    expect(currentStep(op)?.name).toBe('flush.kernels');
    op.steps[1].status = 'ok';
    expect(currentStep(op)?.name).toBe('flush.kernels');
    expect(currentStep(null)).toBe(null);
    expect(currentStep(operation('resume', []))).toBe(null);
  });

  it('names every step the server reports', () => {
    for (const name of [
      'flush.notebooks',
      'flush.kernels',
      'release',
      'restore',
      'restore.checkpoints'
    ]) {
      expect(stepLabel(name, trans)).not.toBe(name);
    }
    expect(stepLabel('something.new', trans)).toBe('something.new');
  });

  it('progress lines name the state and the step', () => {
    expect(progressMessage(statusIn('flushing'), trans)).toBe(
      'Suspending: flushing: writing application checkpoints…'
    );
    expect(
      progressMessage(
        statusIn('running', {
          operation: operation('checkpoint', [step('flush.notebooks')])
        }),
        trans
      )
    ).toBe('Application checkpoints: saving notebooks to disk…');
    expect(
      progressMessage(
        statusIn('restoring', {
          backend: {
            ...statusRunning().backend,
            text: { ...LOCAL_TEXT, restore_step: 'waking the pod' }
          }
        }),
        trans
      )
    ).toBe('Restoring: waking the pod…');
  });
});

describe('released memory', () => {
  it('formats bytes', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(1023)).toBe('1023 B');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(54104064)).toBe('51.6 MiB');
    expect(formatBytes(6 * 2 ** 30)).toBe('6.0 GiB');
    expect(formatBytes(200 * 2 ** 30)).toBe('200 GiB');
  });

  it('summarises the release step of a suspend', () => {
    const status = statusSuspended();
    const op = status.operation!;
    const release = op.steps.find(s => s.name === 'release')!;
    const released = release.detail['released'] as {
      kernel_memory_bytes: number;
      gpu_memory_bytes: number;
    };
    // as measured when the fixtures were recorded
    const kernelMemory = formatBytes(released.kernel_memory_bytes);
    expect(releasedSummary(status.operation, trans)).toBe(
      `released ${kernelMemory} kernel memory`
    );
    released.gpu_memory_bytes = 6 * 2 ** 30;
    expect(releasedSummary(op, trans)).toBe(
      `released ${kernelMemory} kernel memory, 6.0 GiB GPU memory`
    );
    expect(releasedSummary(statusRunning().operation, trans)).toBe(null);
  });
});

describe('describeCycle', () => {
  it('lists the measured durations of the last cycle', () => {
    const cycle = timeline().cycles[0];
    const lines = describeCycle(cycle, trans);
    expect(lines[0]).toBe('Last cycle: resumed (cold) — fixture');
    // as recorded (scripts/record-fixtures.py measures them anew each time)
    const seconds = (s: number | null): string => `${s!.toFixed(1)} s`;
    expect(lines).toContain(`flush: ${seconds(cycle.durations.flush)}`);
    expect(lines).toContain(`suspend: ${seconds(cycle.durations.suspend)}`);
    expect(lines).toContain(
      `resume to runnable cell: ${seconds(cycle.durations.resume_to_runnable)}`
    );
    expect(lines.some(l => l.startsWith('Suspend requested: '))).toBe(true);
  });

  it('skips what was not measured and keeps the notes', () => {
    const cycle = timeline().cycles[0];
    cycle.outcome = 'aborted';
    cycle.restore = null;
    cycle.durations = {
      idle_before_suspend: null,
      flush: 2.5,
      suspend: null,
      release: null,
      suspended: null,
      waiting_for_capacity: null,
      resume_to_runnable: null
    };
    cycle.notes = ['suspend aborted, nothing was released: busy'];
    const lines = describeCycle(cycle, trans);
    expect(lines[0]).toBe('Last cycle: aborted — fixture');
    expect(lines).toContain('flush: 2.5 s');
    expect(lines.some(l => l.startsWith('suspend:'))).toBe(false);
    expect(lines).toContain('suspend aborted, nothing was released: busy');
  });
});

describe('preflightToView', () => {
  it('maps the recorded local-backend preflight', () => {
    const view = preflightToView(preflight(), trans);
    expect(view.backend).toBe('local');
    // What is kept and lost in the backend's own words.
    expect(view.keeps).toEqual([
      { label: 'notebooks and other files', kept: true },
      { label: 'application checkpoints', kept: true },
      { label: LOCAL_TEXT.loses[0], kept: false },
      { label: LOCAL_TEXT.loses[1], kept: false }
    ]);
    expect(view.whileSuspended).toBe(LOCAL_TEXT.while_suspended);
    expect(view.resumeBy).toBe(LOCAL_TEXT.resume_by);
    expect(view.releases).toEqual(['kernel memory and GPU memory']);
    expect(view.kernels).toHaveLength(1);
    const kernel = view.kernels[0];
    expect(kernel.title).toBe('nb.ipynb');
    expect(kernel.keeps).toEqual(['notebook file on disk']);
    expect(kernel.loses).toEqual(['all variables in kernel memory']);
    // The helper is not loaded in that kernel: say what that means.
    expect(kernel.note).toContain('only files are kept');
    expect(view.notes).toHaveLength(2);
    expect(view.blocking).toEqual([]);
    expect(view.canSuspend).toBe(true);
  });

  it('reads the capability flags from a server without backend.text', () => {
    const view = preflightToView(olderServer(preflight()), trans);
    expect(view.keeps).toEqual([
      { label: 'Files and saved notebooks', kept: true },
      { label: 'Application checkpoints', kept: true },
      { label: 'Live memory (variables of running kernels)', kept: false },
      { label: 'GPU memory', kept: false }
    ]);
    expect(view.whileSuspended).toBe('');
    expect(view.resumeBy).toBe('');
  });

  it('shows a backend that keeps live and GPU memory as keeping them', () => {
    const p = olderServer(preflight());
    p.backend.name = 'gke';
    p.keeps = {
      files: true,
      application_checkpoints: true,
      live_memory: true,
      gpu_memory: true
    };
    p.releases = { kernel_memory: false, node: true };
    p.kernels[0].keeps = [
      'notebook file on disk',
      'application checkpoints: model',
      'all variables in kernel memory',
      'tensors in GPU memory'
    ];
    p.kernels[0].loses = [];
    p.kernels[0].helper = 'loaded';
    const view = preflightToView(p, trans);
    expect(view.keeps.every(line => line.kept)).toBe(true);
    expect(view.releases).toEqual(['the node and its accelerators']);
    expect(view.kernels[0].note).toBe(null);
    expect(view.kernels[0].loses).toEqual([]);
  });

  it('carries busy kernels and what would abort', () => {
    const p = preflight();
    p.kernels[0].helper = 'busy';
    p.kernels[0].helper_message = 'kernel is busy running a cell';
    p.kernels.push({
      ...p.kernels[0],
      kernel_id: 'abcdef0123456789',
      path: null,
      helper: 'error',
      helper_message: 'RuntimeError: disk full'
    });
    p.would_abort = [
      'kernel 5bac0c40 (nb.ipynb) is busy; wait, interrupt it, or use force'
    ];
    const view = preflightToView(p, trans);
    expect(view.kernels[0].note).toBe(
      'Busy: it cannot write checkpoints now (kernel is busy running a cell)'
    );
    expect(view.kernels[1].title).toBe('kernel abcdef01');
    expect(view.kernels[1].note).toBe(
      'The checkpoint helper failed: RuntimeError: disk full'
    );
    expect(view.blocking).toEqual(p.would_abort);
  });
});
