/**
 * The suspend button, the preflight dialog, the status bar and a full
 * suspend/resume on the local backend, in a real jupyter lab and Chromium.
 */
import { expect, galata, test } from './fixtures';
import * as fs from 'fs';

import {
  API,
  browserKernel,
  ensureSteady,
  KERNELSPEC_DIR,
  openNotebook,
  recordedStates,
  recordStates,
  resumeByApi,
  runNewCell,
  screenshot,
  serverIdle,
  serverStatus,
  suspendByApi,
  sessionsFor,
  shutdownSessionsUnder,
  statusItem,
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

test('every notebook gets the Suspend and Verify buttons; the status bar shows the state', async ({
  page,
  tmpPath
}) => {
  await openNotebook(page, `${tmpPath}/buttons.ipynb`, ['x = 1']);

  const suspend = toolbarItem(page, 'jupyter-suspend:suspend');
  await expect(suspend).toBeVisible();
  await expect(suspend).toContainText('Suspend');
  await expect(toolbarItem(page, 'jupyter-suspend:verify')).toBeVisible();
  // Resume only shows while there is something to resume.
  await expect(toolbarItem(page, 'jupyter-suspend:resume')).toBeHidden();

  const item = statusItem(page);
  await expect(item).toHaveAttribute('data-state', /^(running|ready)$/);
  await expect(item).toContainText(/Running|Ready/);
  await screenshot(page, 'running');

  // The click opens the details panel with the actions.
  await item.click();
  const panel = page.locator('.jp-suspend-panel');
  await expect(panel).toBeVisible();
  await expect(
    panel.locator('[data-command="jupyter-suspend:suspend"]')
  ).toBeEnabled();
  await expect(
    panel.locator('[data-command="jupyter-suspend:checkpoint"]')
  ).toBeEnabled();
  await expect(panel).toContainText('local');
  await screenshot(page, 'status-panel');
  // A click elsewhere closes it.
  await page.locator('.jp-NotebookPanel-notebook').first().click();
  await expect(panel).toHaveCount(0);
});

test('the preflight dialog shows what the backend keeps and loses, per kernel', async ({
  page,
  tmpPath,
  request
}) => {
  const file = `${tmpPath}/preflight.ipynb`;
  await openNotebook(page, file, ['weights = list(range(10))']);
  await page.notebook.runCell(0);

  await toolbarItem(page, 'jupyter-suspend:suspend')
    .locator('jp-button')
    .click();
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog.locator('.jp-suspend-preflight')).toBeVisible();

  // What the local backend keeps and loses, in its own words (backend.text).
  const kept = dialog.locator('.jp-suspend-keeps li[data-kept="true"]');
  const lost = dialog.locator('.jp-suspend-keeps li[data-kept="false"]');
  await expect(kept).toContainText([
    'notebooks and other files',
    'application checkpoints'
  ]);
  await expect(lost).toContainText([
    'variables in kernel memory',
    'tensors in GPU memory'
  ]);
  // Per kernel: this notebook, what it keeps and what it loses.
  const row = dialog.locator('.jp-suspend-kernel', {
    hasText: 'preflight.ipynb'
  });
  await expect(row).toBeVisible();
  await expect(row.locator('.jp-suspend-kernel-keeps')).toContainText(
    'notebook file on disk'
  );
  await expect(row.locator('.jp-suspend-kernel-loses')).toContainText(
    'all variables in kernel memory'
  );
  await screenshot(page, 'preflight-dialog');

  // Cancel: nothing happens, the kernel keeps its variables.
  await dialog.locator('.jp-mod-reject').click();
  await expect(dialog).toHaveCount(0);
  const status = await serverStatus(request);
  expect(status.state).toMatch(/^(running|ready)$/);
  expect(
    status.operation?.kind === 'suspend' && status.operation.in_progress
  ).toBeFalsy();
  expect(await runNewCell(page, 'print(len(weights))')).toContain('10');
});

test('suspend then resume: the status bar follows and a cell runs after resume', async ({
  page,
  tmpPath,
  request
}) => {
  const file = `${tmpPath}/experiment.ipynb`;
  await openNotebook(page, file, ['answer = 41']);
  await page.notebook.runCell(0);
  const before = await browserKernel(page);
  expect(before.kernelId).toBeTruthy();
  // An unsaved edit: the suspend must save it before anything is released.
  await page.notebook.addCell('code', 'unsaved_edit = True');
  expect(await page.notebook.isAnyActive()).toBeTruthy();

  const item = statusItem(page);
  await recordStates(page);
  await toolbarItem(page, 'jupyter-suspend:suspend')
    .locator('jp-button')
    .click();
  await page.locator('.jp-Dialog .jp-mod-accept').click();

  await expect(item).toHaveAttribute('data-state', 'suspended', {
    timeout: 120000
  });
  await expect(item).toContainText('Suspended');
  let status = await serverIdle(request);
  expect(status.state).toBe('suspended');
  expect(status.operation?.outcome).toBe('succeeded');
  // The edit reached the disk before the kernel went away.
  const saved = await request.get(`/api/contents/${file}?content=1`);
  expect(JSON.stringify(await saved.json())).toContain('unsaved_edit = True');
  // The kernel is gone on the server.
  expect(await sessionsFor(request, file)).toHaveLength(0);
  await expect(toolbarItem(page, 'jupyter-suspend:resume')).toContainText(
    'Resume'
  );
  await screenshot(page, 'suspended');
  // Verify has nothing to check while the kernel is stopped, and says so
  // instead of inserting a cell that would only ask for a kernel.
  const cells = await page.notebook.getCellCount();
  await toolbarItem(page, 'jupyter-suspend:verify')
    .locator('jp-button')
    .click();
  const noKernel = page.locator('.Toastify__toast', {
    hasText: 'has no running kernel'
  });
  await expect(noKernel).toBeVisible();
  expect(await page.notebook.getCellCount()).toBe(cells);
  // It closes by itself (and must not linger into the next screenshots).
  await expect(noKernel).toHaveCount(0, { timeout: 30000 });

  // A page opened after an earlier test's cold restore does not announce it.
  const coldToasts = page.locator('.Toastify__toast', {
    hasText: 'Cold restore'
  });
  const announcedBefore = await coldToasts.count();
  expect(announcedBefore).toBe(0);
  await toolbarItem(page, 'jupyter-suspend:resume')
    .locator('jp-button')
    .click();
  await expect(item).toHaveAttribute('data-state', 'ready', {
    timeout: 120000
  });
  await expect(item).toContainText('Ready (cold');
  status = await serverIdle(request);
  expect(status.state).toBe('ready');
  expect(status.restore).toBe('cold');

  // Running → suspended → ready, in this order, as the user saw it.
  const states = await recordedStates(page);
  // (It may start at ready: an earlier test's resume.)
  expect(states[0]).toMatch(/^(running|ready)$/);
  const suspendedAt = states.indexOf('suspended');
  expect(suspendedAt).toBeGreaterThan(0);
  expect(states.indexOf('ready', suspendedAt)).toBeGreaterThan(suspendedAt);

  // The cold restore is announced once, with the way back to the checkpoints.
  await expect(coldToasts).toHaveCount(announcedBefore + 1);
  const toast = coldToasts.last();
  await expect(toast).toBeVisible();
  await expect(
    toast.getByRole('button', { name: 'Load checkpoints' })
  ).toBeVisible();
  // The resume's own progress toast gave way to this one.
  await expect(
    page.locator('.Toastify__toast', { hasText: 'Resuming' })
  ).toHaveCount(0);
  await expect(toast).toBeInViewport({ ratio: 1 });
  await screenshot(page, 'ready-cold');

  // Same kernel and session ids, reconnected without a manual restart; one
  // server session for the notebook (no duplicate).
  await waitRestored(page);
  const after = await browserKernel(page);
  expect(after.kernelId).toBe(before.kernelId);
  expect(after.sessionId).toBe(before.sessionId);
  const sessions = await sessionsFor(request, file);
  expect(sessions).toHaveLength(1);
  expect(sessions[0].kernel.id).toBe(before.kernelId);
  // A cell runs; the variables are gone, as a cold restore says.
  expect(
    await runNewCell(page, "print(6 * 7, 'answer' in globals())")
  ).toContain('42 False');
});

test('a connection dropped by a late session list is reattached to the same session', async ({
  page,
  request,
  tmpPath
}) => {
  const file = `${tmpPath}/dropped.ipynb`;
  await openNotebook(page, file, ['kept = 7']);
  await page.notebook.runCell(0);
  const before = await browserKernel(page);
  // What a session list computed while the kernels were stopped does when it
  // arrives after the resume: JupyterLab disposes the notebook's connection.
  await page.evaluate(() => {
    const panel = (window as any).galata.app.shell.currentWidget;
    panel.sessionContext.session.dispose();
  });
  await waitKernelConnected(page);
  const after = await browserKernel(page);
  expect(after.sessionId).toBe(before.sessionId);
  expect(after.kernelId).toBe(before.kernelId);
  // The same kernel process: the variable is still there, and no second
  // session was started for the notebook.
  expect(await runNewCell(page, 'print(kept * 6)')).toContain('42');
  expect(await sessionsFor(request, file)).toHaveLength(1);
});

test("a connection dropped during the resume's own reconnect is reattached", async ({
  page,
  request,
  tmpPath
}) => {
  const file = `${tmpPath}/dropped-during-resume.ipynb`;
  await openNotebook(page, file, ['x = 1']);
  await page.notebook.runCell(0);
  const before = await browserKernel(page);
  // A stale session list landing while the plugin is still opening the
  // restored connection: dispose the first session it adopts, once.
  await page.evaluate(() => {
    const w = window as any;
    const ctx = w.galata.app.shell.currentWidget.sessionContext;
    const item = document.querySelector(
      '#jp-main-statusbar .jp-suspend-status'
    ) as HTMLElement;
    w.__dropped = null;
    ctx.sessionChanged.connect((_: unknown, change: any) => {
      if (w.__dropped === null && change.newValue) {
        w.__dropped = 'pending';
        setTimeout(() => {
          w.__dropped = {
            reconnecting: item.dataset.reconnecting,
            connection: change.newValue.kernel?.connectionStatus ?? null
          };
          change.newValue.dispose();
        }, 0);
      }
    });
  });
  await suspendByApi(request);
  await resumeByApi(request);
  await waitRestored(page);
  // The drop really landed inside the reconnect, before the kernel opened.
  expect(await page.evaluate(() => (window as any).__dropped)).toEqual({
    reconnecting: 'true',
    connection: 'connecting'
  });
  const after = await browserKernel(page);
  expect(after.sessionId).toBe(before.sessionId);
  expect(after.kernelId).toBe(before.kernelId);
  expect(await runNewCell(page, 'print(6 * 7)')).toContain('42');
  expect(await sessionsFor(request, file)).toHaveLength(1);
});

test('an open console is reconnected after a resume, like the notebooks', async ({
  page,
  request
}) => {
  await page.evaluate(() =>
    (window as any).galata.app.commands.execute('console:create', {
      kernelPreference: { name: 'python3' }
    })
  );
  // browserKernel and waitKernelConnected read the current widget: the console.
  const run = async (code: string): Promise<void> => {
    await waitKernelConnected(page);
    await page.evaluate(
      c => (window as any).galata.app.shell.currentWidget.console.inject(c),
      code
    );
  };
  await run('seen = 6 * 7');
  const before = await browserKernel(page);
  expect(before.kernelId).not.toBeNull();

  await suspendByApi(request);
  await resumeByApi(request);
  await waitRestored(page);

  await run("print('after', 'seen' in globals())");
  await expect(
    page.locator('.jp-CodeConsole .jp-OutputArea-output', {
      hasText: 'after False'
    })
  ).toBeVisible();
  const after = await browserKernel(page);
  expect(after.sessionId).toBe(before.sessionId);
  expect(after.kernelId).toBe(before.kernelId);
  // The console's session is not left to the notebooks' afterEach.
  await request.delete(`/api/sessions/${after.sessionId}`);
});

test('a suspend whose flush fails is aborted and nothing is released', async ({
  page,
  tmpPath,
  request
}) => {
  const file = `${tmpPath}/corrupt.ipynb`;
  await openNotebook(page, file, ['kept_alive = 7']);
  await page.notebook.runCell(0);
  await page.notebook.save();
  // Something outside the browser breaks the file on disk (the notebook in
  // the browser has no unsaved change, so nothing overwrites it).
  const put = await request.put(`/api/contents/${file}`, {
    data: {
      type: 'file',
      format: 'text',
      content: '{"this is": not a notebook'
    }
  });
  expect(put.ok()).toBeTruthy();

  await toolbarItem(page, 'jupyter-suspend:suspend')
    .locator('jp-button')
    .click();
  await page.locator('.jp-Dialog .jp-mod-accept').click();
  const toast = page.locator('.Toastify__toast', {
    hasText: 'Suspend aborted'
  });
  await expect(toast).toBeVisible({ timeout: 120000 });
  // The whole reason is one click away (toasts are cut at 140 characters).
  await toast.getByRole('button', { name: 'Details' }).click();
  const details = page.locator('.jp-Dialog', { hasText: 'Suspend aborted' });
  await expect(details).toContainText(
    'corrupt.ipynb on disk is not valid JSON'
  );
  await details.locator('.jp-mod-accept').click();

  const status = await serverIdle(request);
  expect(status.state).toMatch(/^(running|ready)$/);
  expect(status.operation?.outcome).toBe('aborted');
  await expect(statusItem(page)).toHaveAttribute('data-state', status.state);
  await statusItem(page).click();
  await expect(page.locator('.jp-suspend-panel')).toContainText(
    'Last suspend aborted'
  );
  await page.locator('.jp-NotebookPanel-notebook').first().click();
  // The kernel was never stopped: its variable is still there.
  expect(await runNewCell(page, 'print(kept_alive * 6)')).toContain('42');
});

test('a document that cannot be saved stops the suspend before it starts', async ({
  page,
  tmpPath,
  request
}) => {
  const file = `${tmpPath}/gone/draft.ipynb`;
  await openNotebook(page, file, ['draft = 1']);
  await page.notebook.setCell(0, 'code', 'draft = 2  # unsaved');
  // The file browser leaves the folder first: showing a folder that vanished
  // makes JupyterLab open a "Directory not found" dialog of its own.
  await page.filebrowser.openDirectory(tmpPath);
  // The folder moves away under the open notebook: saving must fail.
  const moved = await request.patch(`/api/contents/${tmpPath}/gone`, {
    data: { path: `${tmpPath}/moved-away` }
  });
  expect(moved.ok()).toBeTruthy();
  const before = await serverStatus(request);

  await toolbarItem(page, 'jupyter-suspend:suspend')
    .locator('jp-button')
    .click();
  // JupyterLab reports the failed save first; dialogs queue, ours follows.
  const saveError = page.locator('.jp-Dialog', { hasText: 'File Save Error' });
  await expect(saveError).toBeVisible();
  await saveError.getByRole('button', { name: 'Close' }).click();
  const ours = page.locator('.jp-Dialog', {
    hasText: 'Not suspended: some documents could not be saved'
  });
  await expect(ours).toBeVisible();
  await expect(ours).toContainText('draft.ipynb');
  // No preflight dialog, no operation: the server was never asked.
  await expect(page.locator('.jp-suspend-preflight')).toHaveCount(0);
  const after = await serverStatus(request);
  expect(after.state).toBe(before.state);
  expect(after.operation?.id ?? null).toBe(before.operation?.id ?? null);
  await ours.locator('.jp-mod-accept').click();
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);
});

test('a resume that cannot restart the kernel fails with a reason and a next step', async ({
  page,
  tmpPath,
  request
}) => {
  const file = `${tmpPath}/removable.ipynb`;
  await openNotebook(page, file, ['import os\npid = os.getpid()'], {
    name: 'suspend-test-python',
    display_name: 'Python 3 (removable)'
  });
  await page.notebook.runCell(0);
  const item = statusItem(page);

  // Suspend from the status bar panel this time.
  await item.click();
  await page
    .locator('.jp-suspend-panel [data-command="jupyter-suspend:suspend"]')
    .click();
  await page.locator('.jp-Dialog .jp-mod-accept').click();
  await expect(item).toHaveAttribute('data-state', 'suspended');

  // While suspended, the environment the session ran in goes away (as a
  // platform upgrade can remove an image or kernel).
  const removed = `${KERNELSPEC_DIR}.removed`;
  fs.renameSync(KERNELSPEC_DIR, removed);
  try {
    await toolbarItem(page, 'jupyter-suspend:resume')
      .locator('jp-button')
      .click();
    await expect(item).toHaveAttribute('data-state', 'failed');
    await expect(item).toContainText('Failed: no kernel could be restarted');
    const status = await serverStatus(request);
    expect(status.failure?.reason).toContain('suspend-test-python');
    const toast = page.locator('.Toastify__toast', {
      hasText: 'Resume failed'
    });
    await expect(toast).toBeVisible();
    // The "Suspended … Resume" toast went away when the resume started.
    await expect(
      page.locator('.Toastify__toast', { hasText: 'Suspended:' })
    ).toHaveCount(0);

    await item.click();
    const panel = page.locator('.jp-suspend-panel');
    await expect(panel).toContainText(`Reason: ${status.failure!.reason}`);
    await expect(panel).toContainText(
      `Next step: ${status.failure!.next_step}`
    );
    await expect(
      panel.locator('[data-command="jupyter-suspend:acknowledge"]')
    ).toBeEnabled();
    // Resume stays possible (it retries); suspending again is not.
    await expect(
      panel.locator('[data-command="jupyter-suspend:resume"]')
    ).toBeEnabled();
    await expect(
      panel.locator('[data-command="jupyter-suspend:suspend"]')
    ).toBeDisabled();
    await screenshot(page, 'failed');

    // Acknowledge: back to running, without the recorded session.
    await panel.locator('[data-command="jupyter-suspend:acknowledge"]').click();
    const confirm = page.locator('.jp-Dialog', {
      hasText: 'Acknowledge the failure?'
    });
    await expect(confirm).toContainText(status.failure!.next_step);
    await confirm.locator('.jp-mod-accept').click();
    await expect(item).toHaveAttribute('data-state', 'running');
    expect((await serverStatus(request)).state).toBe('running');
  } finally {
    fs.renameSync(removed, KERNELSPEC_DIR);
  }
});

test.describe('with "confirm before suspending" off', () => {
  test.use({
    mockSettings: {
      ...galata.DEFAULT_SETTINGS,
      'jupyter-suspend:plugin': { confirmBeforeSuspend: false }
    }
  });

  test('the button suspends at once, after saving', async ({
    page,
    tmpPath,
    request
  }) => {
    const file = `${tmpPath}/quick.ipynb`;
    await openNotebook(page, file, ['q = 1']);
    await page.notebook.setCell(0, 'code', 'q = 2  # edited');
    await toolbarItem(page, 'jupyter-suspend:suspend')
      .locator('jp-button')
      .click();
    await expect(statusItem(page)).toHaveAttribute('data-state', 'suspended');
    // No confirmation dialog was needed.
    await expect(page.locator('.jp-suspend-preflight')).toHaveCount(0);
    const saved = await request.get(`/api/contents/${file}?content=1`);
    expect(JSON.stringify(await saved.json())).toContain('q = 2  # edited');
    // Resume so that afterEach shuts this test's kernel down.
    await toolbarItem(page, 'jupyter-suspend:resume')
      .locator('jp-button')
      .click();
    await expect(statusItem(page)).toHaveAttribute('data-state', 'ready');
    expect((await serverIdle(request)).state).toBe('ready');
  });
});

test.describe('with the poll interval at one hour', () => {
  test.use({
    mockSettings: {
      ...galata.DEFAULT_SETTINGS,
      'jupyter-suspend:plugin': { pollInterval: 3600 }
    }
  });

  test('a suspend from elsewhere shows at once, through the server events', async ({
    page,
    tmpPath,
    request
  }) => {
    await openNotebook(page, `${tmpPath}/elsewhere.ipynb`, ['e = 1']);
    const item = statusItem(page);
    await expect(item).toHaveAttribute('data-state', /^(running|ready)$/);
    // Not this page: the REST API, as another tab or the %suspend magic would.
    const started = Date.now();
    expect(
      (
        await request.post(`${API}/suspend`, { data: { reason: 'elsewhere' } })
      ).status()
    ).toBe(202);
    // Polling alone would take up to an hour; events take well under 30 s.
    await expect(item).toHaveAttribute('data-state', 'suspended', {
      timeout: 30000
    });
    expect(Date.now() - started).toBeLessThan(30000);
    expect((await request.post(`${API}/resume`, { data: {} })).status()).toBe(
      202
    );
    await expect(item).toHaveAttribute('data-state', 'ready', {
      timeout: 30000
    });
    await waitRestored(page);
  });
});
