/**
 * The verify-live-state helper against the real kernel side.
 *
 * NEEDS THE KERNEL SIDE (branch kernel-side: `%load_ext jupyter_suspend`,
 * `%verify_live_state` and `POST jupyter-suspend/api/verify`). run.sh sets
 * JUPYTER_SUSPEND_KERNEL_SIDE=1 when `jupyter_suspend` can be loaded as an
 * IPython extension; without it these tests are skipped and say why.
 */
import { expect, test } from './fixtures';

import {
  API,
  ensureSteady,
  KERNEL_SIDE,
  openNotebook,
  resumeByApi,
  runNewCell,
  screenshot,
  shutdownSessionsUnder,
  statusItem,
  suspendByApi,
  toolbarItem,
  waitRestored
} from './helpers';

const VERDICT_MIME = 'application/vnd.jupyter-suspend.verdict+json';

test.use({ sessions: null, kernels: null });

test.describe('verify live state (needs the kernel side)', () => {
  test.skip(
    !KERNEL_SIDE,
    'needs %verify_live_state from the kernel side (JUPYTER_SUSPEND_KERNEL_SIDE=1)'
  );

  test.beforeEach(async ({ page, tmpPath, request }) => {
    await ensureSteady(request);
    await openNotebook(page, `${tmpPath}/verify.ipynb`, ['marker = 123']);
    await page.notebook.runCell(0);
    // A cold cycle through the API (the UI flow has its own tests).
    await suspendByApi(request);
    await expect(statusItem(page)).toHaveAttribute('data-state', 'suspended');
    await resumeByApi(request);
    await waitRestored(page);
  });

  test.afterEach(async ({ request, tmpPath }) => {
    await shutdownSessionsUnder(request, tmpPath);
  });

  test('insert-cell mode: a restarted kernel reads COLD, in the cell and in a notification', async ({
    page
  }) => {
    const before = await page.notebook.getCellCount();
    await toolbarItem(page, 'jupyter-suspend:verify')
      .locator('jp-button')
      .click();

    const rendered = page.locator('.jp-OutputArea .jp-suspend-verdict');
    await expect(rendered).toHaveAttribute('data-verdict', 'COLD');
    expect(await page.notebook.getCellCount()).toBe(before + 1);
    // What the UI shows is the kernel's verdict: read the cell's mime bundle.
    const bundle = await page.evaluate(mime => {
      const panel = (window as any).galata.app.shell.currentWidget;
      const cell = panel.content.activeCell;
      const outputs = cell.model.outputs.toJSON();
      return {
        source: cell.model.sharedModel.getSource(),
        verdicts: outputs
          .filter((o: any) => o.data && o.data[mime])
          .map((o: any) => o.data[mime].verdict)
      };
    }, VERDICT_MIME);
    expect(bundle.source).toContain('%verify_live_state');
    expect(bundle.verdicts).toEqual(['COLD']);
    await expect(
      page.locator('.Toastify__toast', { hasText: 'COLD:' })
    ).toBeVisible();
    await screenshot(page, 'verify-cold');
  });

  test('scratch mode: the verdict in a dialog, the notebook untouched, the same as the REST verify', async ({
    page,
    request
  }) => {
    const before = await page.notebook.getCellCount();
    await page.evaluate(() =>
      (window as any).galata.app.commands.execute('jupyter-suspend:verify', {
        mode: 'scratch'
      })
    );
    const dialog = page.locator('.jp-Dialog .jp-suspend-verdict');
    await expect(dialog).toHaveAttribute(
      'data-verdict',
      /^(LIVE|COLD|MISMATCH)$/
    );
    const shown = await dialog.getAttribute('data-verdict');
    expect(shown).toBe('COLD');
    expect(await page.notebook.getCellCount()).toBe(before);

    const kernelId = await page.evaluate(
      () =>
        (window as any).galata.app.shell.currentWidget.sessionContext.session
          .kernel.id
    );
    const rest = await request.post(`${API}/verify`, {
      data: { kernel_id: kernelId }
    });
    expect(rest.ok()).toBeTruthy();
    expect((await rest.json()).verdict).toBe(shown);
    await page.locator('.jp-Dialog .jp-mod-accept').click();
  });
});

test.describe('restore checkpoints after a cold restore (needs the kernel side)', () => {
  test.skip(
    !KERNEL_SIDE,
    'needs %checkpoint from the kernel side (JUPYTER_SUSPEND_KERNEL_SIDE=1)'
  );

  test.afterEach(async ({ request, tmpPath }) => {
    await shutdownSessionsUnder(request, tmpPath);
  });

  test('the cold-restore toast does not offer checkpoints the resume loaded; the command loads them again', async ({
    page,
    request,
    tmpPath
  }) => {
    await ensureSteady(request);
    await openNotebook(page, `${tmpPath}/restore.ipynb`, [
      '%load_ext jupyter_suspend\nimport jupyter_suspend\nmarker = 41\njupyter_suspend.register("marker")'
    ]);
    await page.notebook.runCell(0);
    await suspendByApi(request);
    const ready = await resumeByApi(request);
    expect(ready.last_restore?.checkpoints_restored_count).toBe(1);
    await waitRestored(page);

    // The resume put `marker` back; the user then loses it again.
    expect(await runNewCell(page, 'print(marker)\nmarker = 0')).toContain('41');
    // The announcement of this restore (a page announces the restores it saw
    // end, not older ones) does not offer to load what the resume already
    // loaded (issue 17 item 5).
    const toast = page
      .locator('.Toastify__toast', { hasText: 'Cold restore' })
      .last();
    await expect(toast).toContainText('1 checkpoint restored');
    await expect(
      toast.getByRole('button', { name: 'Load checkpoints' })
    ).toHaveCount(0);
    // Loading them again stays one command away (palette, panel).
    await page.evaluate(() =>
      (window as any).galata.app.commands.execute(
        'jupyter-suspend:restore-checkpoints'
      )
    );
    await expect(
      page.locator('.Toastify__toast', { hasText: 'marker' }).first()
    ).toBeVisible();
    expect(await runNewCell(page, 'print(marker)')).toContain('41');
  });
});
