/** Shared helpers of the UI tests: server calls, notebook set-up, states. */
import { expect, IJupyterLabPageFixture } from '@jupyterlab/galata';
import type { APIRequestContext, Locator } from '@playwright/test';
import * as fs from 'fs';
import * as path from 'path';

export const API = '/jupyter-suspend/api';

/** Screenshots for docs/ui.md are written only when asked for. */
const SCREENSHOT_DIR = process.env.JUPYTER_SUSPEND_SCREENSHOTS
  ? path.resolve(__dirname, '..', '..', 'docs', 'screenshots')
  : null;

/** Where jupyter_server_test_config.py put the removable kernelspec. */
export const KERNELSPEC_DIR = path.join(
  process.env.JUPYTER_SUSPEND_UI_KERNELS as string,
  'kernels',
  'suspend-test-python'
);

/** Whether the kernel side (%verify_live_state) is installed. */
export const KERNEL_SIDE = process.env.JUPYTER_SUSPEND_KERNEL_SIDE === '1';

export interface IServerStatus {
  state: string;
  restore: string | null;
  failure: { reason: string; next_step: string } | null;
  operation: {
    id: string;
    kind: string;
    in_progress: boolean;
    outcome: string | null;
    message: string;
  } | null;
  can_suspend: boolean;
  can_resume: boolean;
  last_restore: {
    operation_id: string;
    checkpoints_restored_count: number;
  } | null;
}

export async function serverStatus(
  request: APIRequestContext
): Promise<IServerStatus> {
  const response = await request.get(`${API}/status`);
  expect(response.ok()).toBeTruthy();
  return (await response.json()) as IServerStatus;
}

/** Poll the server (not the UI) until no operation runs. */
export async function serverIdle(
  request: APIRequestContext
): Promise<IServerStatus> {
  let status = await serverStatus(request);
  await expect
    .poll(
      async () => {
        status = await serverStatus(request);
        return status.operation?.in_progress ?? false;
      },
      { timeout: 120000, intervals: [250, 500, 1000] }
    )
    .toBe(false);
  return status;
}

/** Suspend through the REST API and wait until the server is suspended. */
export async function suspendByApi(
  request: APIRequestContext
): Promise<IServerStatus> {
  expect((await request.post(`${API}/suspend`, { data: {} })).status()).toBe(
    202
  );
  const status = await serverIdle(request);
  expect(status.state).toBe('suspended');
  return status;
}

/** Resume through the REST API and wait until the server is ready. */
export async function resumeByApi(
  request: APIRequestContext
): Promise<IServerStatus> {
  expect((await request.post(`${API}/resume`, { data: {} })).status()).toBe(
    202
  );
  const status = await serverIdle(request);
  expect(status.state).toBe('ready');
  return status;
}

/**
 * Bring the environment to a steady state whatever an earlier test left:
 * acknowledge a failure, resume a suspension.
 */
export async function ensureSteady(request: APIRequestContext): Promise<void> {
  let status = await serverIdle(request);
  if (status.state === 'failed') {
    const ack = await request.post(`${API}/acknowledge`, { data: {} });
    expect(ack.ok()).toBeTruthy();
    status = await serverStatus(request);
  }
  if (status.state === 'suspended' && status.can_resume) {
    const resumed = await request.post(`${API}/resume`, { data: {} });
    expect(resumed.status()).toBe(202);
    status = await serverIdle(request);
  }
  expect(['running', 'ready']).toContain(status.state);
}

/** A notebook file (nbformat 4) with code cells. */
export function notebookJSON(
  cells: string[],
  kernel = { name: 'python3', display_name: 'Python 3 (ipykernel)' }
): string {
  return JSON.stringify({
    cells: cells.map(source => ({
      cell_type: 'code',
      execution_count: null,
      metadata: {},
      outputs: [],
      source
    })),
    metadata: {
      kernelspec: { ...kernel, language: 'python' },
      language_info: { name: 'python' }
    },
    nbformat: 4,
    nbformat_minor: 5
  });
}

/** Upload a notebook, open it and wait until its kernel is idle. */
export async function openNotebook(
  page: IJupyterLabPageFixture,
  filePath: string,
  cells: string[],
  kernel?: { name: string; display_name: string }
): Promise<void> {
  await page.contents.uploadContent(
    notebookJSON(cells, kernel),
    'text',
    filePath
  );
  expect(await page.notebook.openByPath(filePath)).toBeTruthy();
  await page.notebook.activate(path.basename(filePath));
  await waitKernelConnected(page);
}

/** The current notebook's (or console's) kernel, as the browser sees it. */
export async function browserKernel(page: IJupyterLabPageFixture): Promise<{
  sessionId: string | null;
  kernelId: string | null;
  connection: string | null;
  status: string | null;
}> {
  return page.evaluate(() => {
    const panel = (window as any).galata.app.shell.currentWidget;
    const session = panel?.sessionContext?.session;
    return {
      sessionId: session?.id ?? null,
      kernelId: session?.kernel?.id ?? null,
      connection: session?.kernel?.connectionStatus ?? null,
      status: session?.kernel?.status ?? null
    };
  });
}

export async function waitKernelConnected(
  page: IJupyterLabPageFixture
): Promise<void> {
  // Polls the whole state so that a failure shows what the browser saw.
  await expect
    .poll(() => browserKernel(page), {
      timeout: 120000,
      intervals: [250, 500, 1000]
    })
    .toMatchObject({ connection: 'connected', status: 'idle' });
}

/** The status bar item. */
export function statusItem(page: IJupyterLabPageFixture): Locator {
  return page.locator('#jp-main-statusbar .jp-suspend-status');
}

/** A notebook toolbar item declared in schema/plugin.json. */
export function toolbarItem(
  page: IJupyterLabPageFixture,
  name: string
): Locator {
  return page.locator(
    `.jp-NotebookPanel:not(.lm-mod-hidden) .jp-NotebookPanel-toolbar [data-jp-item-name="${name}"]`
  );
}

/** Record every `data-state` the status bar item takes, in order. */
export async function recordStates(
  page: IJupyterLabPageFixture
): Promise<void> {
  await page.evaluate(() => {
    const node = document.querySelector(
      '#jp-main-statusbar .jp-suspend-status'
    ) as HTMLElement;
    const w = window as any;
    w.__suspendStates = [node.dataset.state];
    w.__suspendObserver?.disconnect();
    w.__suspendObserver = new MutationObserver(() => {
      const last = w.__suspendStates[w.__suspendStates.length - 1];
      if (node.dataset.state !== last) {
        w.__suspendStates.push(node.dataset.state);
      }
    });
    w.__suspendObserver.observe(node, {
      attributes: true,
      attributeFilter: ['data-state']
    });
  });
}

export async function recordedStates(
  page: IJupyterLabPageFixture
): Promise<string[]> {
  return page.evaluate(() => (window as any).__suspendStates as string[]);
}

/** Save a screenshot for docs/ui.md (only with JUPYTER_SUSPEND_SCREENSHOTS=1). */
export async function screenshot(
  page: IJupyterLabPageFixture,
  name: string
): Promise<void> {
  if (!SCREENSHOT_DIR) {
    return;
  }
  fs.mkdirSync(SCREENSHOT_DIR, { recursive: true });
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, `${name}.png`) });
}

/**
 * Wait until the status bar says ready, the plugin has pointed the open
 * notebooks back at their restored kernels, and this notebook's kernel is
 * connected and idle: the moment a returning user can run the next cell.
 */
export async function waitRestored(
  page: IJupyterLabPageFixture
): Promise<void> {
  const item = statusItem(page);
  await expect(item).toHaveAttribute('data-state', 'ready');
  await expect(item).toHaveAttribute('data-reconnecting', 'false');
  await waitKernelConnected(page);
}

/**
 * Add a code cell at the end, run it and return its text output.
 *
 * Galata's own wait for a run has no deadline: a run that never reaches the
 * kernel would spin until the test times out and say nothing. This one fails
 * after `timeoutMs` with what the browser and the server saw.
 */
export async function runNewCell(
  page: IJupyterLabPageFixture,
  source: string,
  timeoutMs = 60000
): Promise<string> {
  const before = await page.notebook.getCellCount();
  await page.notebook.addCell('code', source);
  await page.notebook.runCell(before, { wait: false });
  const deadline = Date.now() + timeoutMs;
  while (
    !(await page.evaluate(
      index => window.galata.haveBeenExecuted(index),
      before
    ))
  ) {
    if (Date.now() > deadline) {
      throw new Error(
        `cell ${before} did not run within ${timeoutMs} ms: ${await runDiagnostics(page)}`
      );
    }
    await page.waitForTimeout(100);
  }
  const output = await page.notebook.getCellTextOutput(before);
  return (output ?? []).join('');
}

/** What the browser and the server say of the current notebook's kernel. */
async function runDiagnostics(page: IJupyterLabPageFixture): Promise<string> {
  const browser = await browserKernel(page);
  const dialogs = await page.locator('.jp-Dialog').allInnerTexts();
  const status = await statusItem(page).getAttribute('title');
  const sessions = await page.request.get('/api/sessions');
  return JSON.stringify({
    browser,
    dialogs,
    statusBar: status,
    serverSessions: sessions.ok() ? await sessions.json() : sessions.status()
  });
}

/** Server-side sessions of a notebook path. */
export async function sessionsFor(
  request: APIRequestContext,
  filePath: string
): Promise<{ id: string; kernel: { id: string } }[]> {
  const response = await request.get('/api/sessions');
  const sessions = (await response.json()) as {
    id: string;
    path: string;
    kernel: { id: string };
  }[];
  return sessions.filter(s => s.path === filePath);
}

/**
 * Shut down the sessions a test opened (its notebooks live under tmpPath).
 * Galata's own session tracking is off in these tests: it answers
 * `/api/sessions` with the sessions it saw created, so a session the server
 * re-creates on resume would stay invisible to JupyterLab.
 */
export async function shutdownSessionsUnder(
  request: APIRequestContext,
  dir: string
): Promise<void> {
  const response = await request.get('/api/sessions');
  if (!response.ok()) {
    return;
  }
  const sessions = (await response.json()) as { id: string; path: string }[];
  for (const session of sessions) {
    if (session.path.startsWith(`${dir}/`)) {
      await request.delete(`/api/sessions/${session.id}`);
    }
  }
}
