import {
  allowedActions,
  allowedKey,
  backendText,
  resumedSince,
  suspendedSince
} from '../status';
import {
  LOCAL_TEXT,
  olderServer,
  operation,
  statusIn,
  statusReadyCold,
  statusRunning,
  statusSuspended
} from './fixtures';
import { trans } from './helpers';

describe('allowedActions', () => {
  it('offers a suspend and a checkpoint before the first answer', () => {
    expect(allowedActions(null)).toEqual({
      suspend: true,
      resume: false,
      checkpoint: true,
      acknowledge: false
    });
  });

  it('reads what the server allows, not the state', () => {
    // A server may refuse a checkpoint while running (e.g. its backend
    // writes none) or allow an acknowledge: the plugin follows it.
    const status = statusIn('running', {
      can_suspend: false,
      can_checkpoint: false,
      can_acknowledge: true
    });
    expect(allowedActions(status)).toEqual({
      suspend: false,
      resume: false,
      checkpoint: false,
      acknowledge: true
    });
  });

  it('falls back for a server without can_checkpoint and can_acknowledge', () => {
    const failed = olderServer(statusIn('failed'));
    expect(failed.can_checkpoint).toBeUndefined();
    expect(allowedActions(failed)).toEqual({
      suspend: false,
      resume: true,
      checkpoint: true,
      acknowledge: true
    });
    expect(allowedActions(olderServer(statusRunning()))).toEqual({
      suspend: true,
      resume: false,
      checkpoint: true,
      acknowledge: false
    });
    expect(allowedActions(olderServer(statusSuspended()))).toEqual({
      suspend: false,
      resume: true,
      checkpoint: false,
      acknowledge: false
    });
    // Nothing while an operation runs, failed or not.
    const retrying = olderServer(
      statusIn('failed', { operation: operation('resume', []) })
    );
    expect(allowedActions(retrying).checkpoint).toBe(false);
    expect(allowedActions(retrying).acknowledge).toBe(false);
  });

  it('keys what is allowed', () => {
    expect(allowedKey(statusRunning())).toBe('suspend,checkpoint');
    expect(allowedKey(statusIn('failed'))).toBe(
      'resume,checkpoint,acknowledge'
    );
  });
});

describe('backendText', () => {
  it('is the server words when it sends them', () => {
    expect(backendText(statusRunning(), trans)).toEqual(LOCAL_TEXT);
  });

  it('builds plain words from the capabilities of an older server', () => {
    const text = backendText(olderServer(statusRunning()), trans);
    expect(text.keeps).toEqual([
      'Files and saved notebooks',
      'Application checkpoints'
    ]);
    expect(text.loses).toEqual([
      'Live memory (variables of running kernels)',
      'GPU memory'
    ]);
    expect(text.release_step).toBe('releasing the environment');
    expect(text.restore_step).toBe('bringing the environment back');
    expect(backendText(null, trans).keeps).toEqual([]);
  });
});

describe('transitions', () => {
  it('a resume ended: ready after another state, or a newer restore', () => {
    const ready = statusReadyCold();
    expect(resumedSince(statusSuspended(), ready)).toBe(true);
    expect(resumedSince(statusIn('restoring'), ready)).toBe(true);
    expect(resumedSince(ready, statusReadyCold())).toBe(false);
    const newer = statusReadyCold();
    newer.last_restore!.operation_id = 'later';
    expect(resumedSince(ready, newer)).toBe(true);
  });

  it('a first status shows no resume and no suspend', () => {
    expect(resumedSince(null, statusReadyCold())).toBe(false);
    expect(suspendedSince(null, statusSuspended())).toBe(false);
  });

  it('suspended since a state that was not', () => {
    expect(suspendedSince(statusIn('snapshotting'), statusSuspended())).toBe(
      true
    );
    expect(suspendedSince(statusSuspended(), statusSuspended())).toBe(false);
  });
});
