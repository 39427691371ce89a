/**
 * The idle policy's warning before an automatic suspend, and Keep running,
 * in a real jupyter lab and Chromium. The server's policy is on with a tiny
 * class (3 s idle) that only this test's notebook names in its metadata
 * (jupyter_server_test_config.py).
 */
import { expect, test } from './fixtures';

import {
  API,
  ensureSteady,
  notebookJSON,
  serverStatus,
  shutdownSessionsUnder,
  statusItem,
  waitKernelConnected
} from './helpers';

test.use({ sessions: null, kernels: null });

test.beforeEach(async ({ request }) => {
  await ensureSteady(request);
});

test.afterEach(async ({ request, tmpPath }) => {
  // No session names the tiny class any more: the patient default is back.
  await shutdownSessionsUnder(request, tmpPath);
});

test('an idle notebook is warned before an automatic suspend; Keep running keeps it running', async ({
  page,
  request,
  tmpPath
}) => {
  const nb = JSON.parse(notebookJSON(['x = 1']));
  nb.metadata.jupyter_suspend = { workload_class: 'ui-tiny' };
  const filePath = `${tmpPath}/idle.ipynb`;
  await page.contents.uploadContent(JSON.stringify(nb), 'text', filePath);
  expect(await page.notebook.openByPath(filePath)).toBeTruthy();
  await waitKernelConnected(page);

  // The notebook goes idle: the warning shows, as a notification and in the status bar.
  const toast = page.locator('.Toastify__toast', {
    hasText: 'this environment will be suspended'
  });
  await expect(toast).toBeVisible();
  await expect(toast).toContainText('ui-tiny');
  const item = statusItem(page);
  await expect(item).toHaveAttribute('data-idle-warning', 'true');
  await expect(item).toContainText('Auto-suspend in');
  const warned = (await serverStatus(request)) as unknown as {
    state: string;
    idle_warning: { workload_class: string } | null;
  };
  // Running, or ready when an earlier test's resume was the last operation.
  expect(warned.state).toMatch(/^(running|ready)$/);
  expect(warned.idle_warning?.workload_class).toBe('ui-tiny');

  // Keep running: the warning ends, the session keeps running, the status bar says so.
  await toast.getByRole('button', { name: 'Keep running' }).click();
  await expect(toast).toHaveCount(0);
  await expect(item).toHaveAttribute('data-idle-warning', 'false');
  await expect(item).toHaveAttribute('data-state', /^(running|ready)$/);
  await expect(item).toContainText(/Running|Ready/);
  const activity = await (await request.get(`${API}/activity`)).json();
  expect(activity.state).toMatch(/^(running|ready)$/);
  expect(activity.workload_class.name).toBe('ui-tiny');
  expect(activity.signals).toContainEqual(
    expect.objectContaining({ name: 'keep_running' })
  );
  const kept = activity.signals.find(
    (s: { name: string }) => s.name === 'keep_running'
  );
  expect(kept.last_activity).not.toBeNull();

  // The panel shows the class and that automatic suspend is on.
  await item.click();
  const panel = page.locator('.jp-suspend-panel');
  await expect(panel.locator('.jp-suspend-panel-class')).toContainText(
    'ui-tiny'
  );
  await expect(panel.locator('.jp-suspend-panel-class')).toContainText(
    'automatic suspend on'
  );
});
