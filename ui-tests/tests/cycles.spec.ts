/**
 * Quick suspend/resume cycles from elsewhere (the REST API, as `%suspend` or
 * another tab would): after each, the open notebook is reattached within a
 * deadline and runs a cell. Under load the browser can be seconds behind the
 * server; no cycle may leave it reconnecting or on a deaf connection.
 */
import {
  ensureSteady,
  openNotebook,
  resumeByApi,
  runNewCell,
  shutdownSessionsUnder,
  statusItem,
  suspendByApi,
  waitRestored
} from './helpers';
import { expect, test } from './fixtures';

test.use({ sessions: null, kernels: null });

test.afterEach(async ({ request, tmpPath }) => {
  await shutdownSessionsUnder(request, tmpPath);
});

test('quick cycles from elsewhere leave the notebook attached and runnable', async ({
  page,
  request,
  tmpPath
}) => {
  await ensureSteady(request);
  await openNotebook(page, `${tmpPath}/cycles.ipynb`, ['x = 1']);
  for (let cycle = 0; cycle < 4; cycle++) {
    await suspendByApi(request);
    if (cycle % 2 === 0) {
      // Half the cycles let the browser see the suspension first.
      await expect(statusItem(page)).toHaveAttribute('data-state', 'suspended');
    }
    await resumeByApi(request);
    await waitRestored(page);
    expect(await runNewCell(page, `print(${cycle} + 1)`)).toBe(
      `${cycle + 1}\n`
    );
  }
});
