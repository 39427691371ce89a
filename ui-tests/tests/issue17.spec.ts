/**
 * Issue 17, the browser items: nothing unsaved is lost on any suspend
 * (item 3), the busy dialog says what will happen (item 4), running a cell
 * while suspended offers Resume (item 5), and one idle figure per cycle
 * (item 10); in a real jupyter lab and Chromium on the local backend.
 */
import { expect, test } from './fixtures';

import {
  API,
  browserKernel,
  ensureSteady,
  notebookJSON,
  openNotebook,
  resumeByApi,
  runNewCell,
  serverIdle,
  serverStatus,
  shutdownSessionsUnder,
  statusItem,
  suspendByApi,
  toolbarItem,
  waitKernelConnected,
  waitRestored
} from './helpers';

// See shutdownSessionsUnder: JupyterLab must see the server's real sessions.
test.use({ sessions: null, kernels: null });

test.beforeEach(async ({ request }) => {
  await ensureSteady(request);
});

test.afterEach(async ({ request, tmpPath }) => {
  await shutdownSessionsUnder(request, tmpPath);
});

interface IStep {
  name: string;
  status: string;
  message: string;
  detail: Record<string, any>;
}

async function lastSteps(
  request: Parameters<typeof serverStatus>[0]
): Promise<IStep[]> {
  const status = (await (await request.get(`${API}/status`)).json()) as {
    operation: { steps: IStep[] } | null;
  };
  return status.operation?.steps ?? [];
}

test('item 3: a suspend started outside the page (REST, as %suspend and the CLI) saves what the tab holds first', async ({
  page,
  request,
  tmpPath
}) => {
  const file = `${tmpPath}/held.ipynb`;
  await openNotebook(page, file, ['kept = 1']);
  await page.notebook.runCell(0);
  // Only the tab has this: nothing saved it.
  await page.notebook.addCell('code', 'only_in_the_tab = 17');
  const before = await request.get(`/api/contents/${file}?content=1`);
  expect(JSON.stringify(await before.json())).not.toContain('only_in_the_tab');

  await suspendByApi(request);
  const saved = await request.get(`/api/contents/${file}?content=1`);
  expect(JSON.stringify(await saved.json())).toContain('only_in_the_tab = 17');
  const step = (await lastSteps(request)).find(s => s.name === 'flush.save');
  expect(step?.status).toBe('ok');
  expect(step?.detail.saved.map((s: { path: string }) => s.path)).toContain(
    file
  );
  // The page that saved says nothing of a suspend it saw happen (not its own,
  // not automatic, not a return): the status bar shows it.
  await expect(statusItem(page)).toHaveAttribute('data-state', 'suspended');
  await resumeByApi(request);
  await waitRestored(page);
});

test('item 3: an automatic suspend saves the tab and tells the user who suspended, when and after how long idle (item 10: one idle figure)', async ({
  page,
  request,
  tmpPath
}) => {
  // The ui-auto class: suspended without warning 10 s after it went idle
  // (jupyter_server_test_config.py).
  const nb = JSON.parse(notebookJSON(['x = 1']));
  nb.metadata.jupyter_suspend = { workload_class: 'ui-auto' };
  const file = `${tmpPath}/auto.ipynb`;
  await page.contents.uploadContent(JSON.stringify(nb), 'text', file);
  try {
    expect(await page.notebook.openByPath(file)).toBeTruthy();
    await waitKernelConnected(page);
    await page.notebook.setCell(0, 'code', 'x = "edited, never saved by hand"');
    const edited = Date.now();

    const item = statusItem(page);
    await expect(item).toHaveAttribute('data-state', 'suspended');
    const status = (await serverIdle(request)) as unknown as {
      state: string;
      last_suspend: {
        origin: string;
        workload_class: string;
        idle_seconds: number;
        reason: string;
        requested_at: string;
      };
    };
    expect(status.state).toBe('suspended');
    expect(status.last_suspend.origin).toBe('idle_policy');
    expect(status.last_suspend.workload_class).toBe('ui-auto');
    // (The edit was made before the suspend began, or this test proves nothing.)
    expect(Date.parse(status.last_suspend.requested_at)).toBeGreaterThan(
      edited
    );
    // Nothing unsaved was lost: the edit reached the disk before the kernel went.
    const saved = await request.get(`/api/contents/${file}?content=1`);
    expect(JSON.stringify(await saved.json())).toContain(
      'edited, never saved by hand'
    );
    // Who, when, and after how long idle.
    const toast = page.locator('.Toastify__toast', {
      hasText: 'Suspended automatically at'
    });
    await expect(toast).toBeVisible();
    await expect(toast).toContainText('by the idle policy after');
    await expect(toast).toContainText('ui-auto');
    // Item 10: the idle time the reason names is the cycle's "idle before".
    const timeline = await (await request.get(`${API}/timeline`)).json();
    const cycle = timeline.cycles[timeline.cycles.length - 1];
    const named = Number(/idle (\d+) s \(threshold/.exec(cycle.reason)?.[1]);
    expect(Math.abs(cycle.durations.idle_before_suspend - named)).toBeLessThan(
      1
    );
    expect(Math.abs(status.last_suspend.idle_seconds - named)).toBeLessThan(1);
  } finally {
    // Back, and this notebook's session gone at once, whatever happened: its
    // class would suspend again, and a resume after the test's folder is
    // removed would bring back a session whose notebook is not on disk.
    const now = await serverIdle(request);
    if (now.state === 'suspended' && now.can_resume) {
      await resumeByApi(request);
    }
    await shutdownSessionsUnder(request, tmpPath);
  }
});

test('item 4: the suspend dialog with a busy kernel leads with what would stop it; its buttons say what happens', async ({
  page,
  request,
  tmpPath
}) => {
  const file = `${tmpPath}/busy.ipynb`;
  await openNotebook(page, file, ['import time\ntime.sleep(120)']);
  await page.notebook.runCell(0, { wait: false });
  await expect
    .poll(async () => (await browserKernel(page)).status)
    .toBe('busy');

  await toolbarItem(page, 'jupyter-suspend:suspend')
    .locator('jp-button')
    .click();
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog.locator('.jp-suspend-preflight')).toBeVisible();
  await expect(dialog).toContainText('A suspend now would be aborted');
  // The reason comes first in the body, above what a suspend keeps.
  const first = dialog.locator('.jp-suspend-preflight > *').first();
  await expect(first).toHaveClass(/jp-suspend-blocking/);
  await expect(first).toContainText('busy.ipynb');
  await expect(first).toBeInViewport();
  // The primary button keeps running; forcing says what it costs.
  const keep = dialog.getByRole('button', { name: 'Keep running' });
  await expect(keep).toBeFocused(); // the default: Enter keeps running
  await expect(dialog.locator('.jp-mod-warn')).toContainText(
    'Force suspend (running cells are lost)'
  );
  await expect(dialog.getByRole('button', { name: /^Suspend$/ })).toHaveCount(
    0
  );
  await keep.click();
  await expect(dialog).toHaveCount(0);
  // Nothing started: no operation sits in "flushing".
  const status = await serverStatus(request);
  expect(status.state).toMatch(/^(running|ready)$/);
  expect(status.operation?.in_progress ?? false).toBe(false);
  const session = (await (await request.get('/api/sessions')).json()).find(
    (s: { path: string }) => s.path === file
  );
  await request.post(`/api/kernels/${session.kernel.id}/interrupt`);
});

test('item 5: running a cell while suspended offers Resume, never the kernel picker; nothing stale after the cold restore', async ({
  page,
  request,
  tmpPath
}) => {
  const file = `${tmpPath}/run-while-suspended.ipynb`;
  await openNotebook(page, file, ['a = 1']);
  await page.notebook.runCell(0);
  await suspendByApi(request);
  const item = statusItem(page);
  await expect(item).toHaveAttribute('data-state', 'suspended');

  await page.notebook.addCell('code', 'print("after resume", 6 * 7)');
  const cells = await page.notebook.getCellCount();
  await page.notebook.runCell(cells - 1, { wait: false });
  const dialog = page.locator('.jp-Dialog', {
    hasText: 'The environment is suspended'
  });
  await expect(dialog).toBeVisible();
  await expect(dialog).toContainText('run-while-suspended.ipynb');
  // Never JupyterLab's kernel picker with a new kernel preselected.
  await expect(
    page.locator('.jp-Dialog', { hasText: 'Select Kernel' })
  ).toHaveCount(0);
  await expect(dialog.locator('select')).toHaveCount(0);
  const resume = dialog.getByRole('button', { name: 'Resume' });
  await expect(resume).toBeFocused(); // the default
  await expect(dialog.locator('.jp-mod-warn')).toHaveText('Start a new kernel');
  await resume.click();

  await waitRestored(page);
  const status = await serverIdle(request);
  expect(status.state).toBe('ready');
  // One session, the recorded one: no second kernel.
  const sessions = (await (await request.get('/api/sessions')).json()).filter(
    (s: { path: string }) => s.path === file
  );
  expect(sessions).toHaveLength(1);
  expect(await runNewCell(page, 'print(6 * 7)')).toContain('42');
  // No stale toast of an earlier phase, no LIVE badge, after the cold restore.
  for (const stale of ['Resuming', 'Suspended:', 'Suspending']) {
    await expect(
      page.locator('.Toastify__toast', { hasText: stale })
    ).toHaveCount(0);
  }
  await expect(item).toContainText('Ready (cold');
  await expect(item).not.toContainText('LIVE');
});
