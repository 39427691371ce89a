import { PromiseDelegate } from '@lumino/coreutils';

import { api } from '../api';
import { CommandIDs, ISuspendModel } from '../tokens';
import { olderServer, statusIn, statusRunning } from './fixtures';
import { FakeModel, wireCommands } from './helpers';

function setUp() {
  const model = new FakeModel();
  const { commands, flows, refresher } = wireCommands(
    model as unknown as ISuspendModel
  );
  const enabled = () => ({
    suspend: commands.isEnabled(CommandIDs.suspend),
    resume: commands.isEnabled(CommandIDs.resume),
    checkpoint: commands.isEnabled(CommandIDs.writeCheckpoints),
    acknowledge: commands.isEnabled(CommandIDs.acknowledge)
  });
  /** Changes announced for the suspend command. */
  const changes: string[] = [];
  commands.commandChanged.connect((_, args) => {
    if (args.id === CommandIDs.suspend) {
      changes.push(args.type);
    }
  });
  return { commands, model, flows, refresher, enabled, changes };
}

describe('commands', () => {
  it('are enabled as the server allows', () => {
    const { model, enabled } = setUp();
    model.set(statusIn('failed'));
    expect(enabled()).toEqual({
      suspend: false,
      resume: true,
      checkpoint: true,
      acknowledge: true
    });
    // The server's word wins over the state: running, yet no checkpoint.
    model.set(statusIn('running', { can_checkpoint: false }));
    expect(enabled()).toEqual({
      suspend: true,
      resume: false,
      checkpoint: false,
      acknowledge: false
    });
    // An older server: the fallback.
    model.set(olderServer(statusIn('failed')));
    expect(enabled().acknowledge).toBe(true);
  });

  it('name what they do, apart from JupyterLab’s own checkpoints', () => {
    const { commands } = setUp();
    expect(commands.label(CommandIDs.writeCheckpoints)).toBe(
      'Write Application Checkpoints'
    );
    expect(commands.label(CommandIDs.writeCheckpoints)).not.toMatch(
      /Checkpoint Now/
    );
    expect(commands.label(CommandIDs.loadCheckpoints)).toContain(
      'Application Checkpoints'
    );
    // Stable ids: settings, toolbars and shortcuts name them.
    expect(CommandIDs.writeCheckpoints).toBe('jupyter-suspend:checkpoint');
    expect(CommandIDs.loadCheckpoints).toBe(
      'jupyter-suspend:restore-checkpoints'
    );
  });

  it('are disabled while an operation runs here, and told so', async () => {
    const { model, flows, enabled, changes } = setUp();
    model.set(statusRunning());
    changes.length = 0;
    const gate = new PromiseDelegate<void>();
    const running = flows.guard.run(() => gate.promise);
    expect(enabled().suspend).toBe(false);
    expect(enabled().checkpoint).toBe(false);
    expect(changes).toEqual(['changed']);
    gate.resolve();
    await running;
    expect(enabled().suspend).toBe(true);
    expect(changes).toEqual(['changed', 'changed']);
  });

  it('are refreshed when what the server allows changes, not on every poll', () => {
    const { model, changes } = setUp();
    model.set(statusRunning());
    expect(changes).toEqual(['changed']);
    model.set(statusRunning());
    expect(changes).toEqual(['changed']);
    model.set(statusIn('running', { can_checkpoint: false }));
    expect(changes).toEqual(['changed', 'changed']);
  });

  it('stop refreshing once disposed', () => {
    const { model, refresher, changes } = setUp();
    refresher.dispose();
    model.set(statusRunning());
    expect(changes).toEqual([]);
  });
});

describe('flows share one guard', () => {
  it('refuses suspend, resume, checkpoint and acknowledge while one runs', async () => {
    const { flows } = setUp();
    const calls = [
      jest.spyOn(api, 'suspend'),
      jest.spyOn(api, 'resume'),
      jest.spyOn(api, 'checkpoint'),
      jest.spyOn(api, 'acknowledge'),
      jest.spyOn(api, 'preflight')
    ];
    const gate = new PromiseDelegate<void>();
    const running = flows.guard.run(() => gate.promise);
    await expect(flows.suspend()).resolves.toBe(null);
    await expect(flows.resume()).resolves.toBe(null);
    await expect(flows.writeCheckpoints()).resolves.toBe(null);
    await expect(flows.acknowledge()).resolves.toBe(null);
    for (const call of calls) {
      expect(call).not.toHaveBeenCalled();
      call.mockRestore();
    }
    gate.resolve();
    await running;
  });
});
