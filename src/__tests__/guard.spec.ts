import { PromiseDelegate } from '@lumino/coreutils';

import { OperationGuard } from '../guard';

describe('OperationGuard', () => {
  it('runs one operation at a time and says when it is busy', async () => {
    const guard = new OperationGuard();
    const seen: boolean[] = [];
    guard.busyChanged.connect((_, busy) => seen.push(busy));
    const gate = new PromiseDelegate<string>();
    const first = guard.run(() => gate.promise);
    expect(guard.busy).toBe(true);
    // A second one is refused at once, without running.
    const second = jest.fn(async () => 'second');
    await expect(guard.run(second)).resolves.toBe(null);
    expect(second).not.toHaveBeenCalled();
    gate.resolve('first');
    await expect(first).resolves.toBe('first');
    expect(guard.busy).toBe(false);
    expect(seen).toEqual([true, false]);
    // Free again.
    await expect(guard.run(second)).resolves.toBe('second');
  });

  it('is free again after an operation threw', async () => {
    const guard = new OperationGuard();
    await expect(
      guard.run(async () => {
        throw new Error('boom');
      })
    ).rejects.toThrow('boom');
    expect(guard.busy).toBe(false);
  });
});
