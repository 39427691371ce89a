/**
 * Galata configuration: a real `jupyter lab` (jupyter_server_test_config.py)
 * driven in the system Chromium (no browser download is possible here).
 */
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

const os = require('os');
const path = require('path');

const PORT = process.env.JUPYTER_SUSPEND_UI_PORT || '8877';
// Shared with jupyter_server_test_config.py: where the removable kernelspec is.
process.env.JUPYTER_SUSPEND_UI_KERNELS =
  process.env.JUPYTER_SUSPEND_UI_KERNELS ||
  path.join(os.tmpdir(), 'jupyter-suspend-ui-kernels');

module.exports = {
  ...baseConfig,
  // The machine has 2 shared cores: one worker, generous timeouts, and every
  // wait is on a state, never a fixed sleep.
  workers: 1,
  fullyParallel: false,
  retries: 0,
  timeout: 180 * 1000,
  expect: { timeout: 60 * 1000 },
  reporter: [
    ['list'],
    ['html', { open: 'never', outputFolder: 'playwright-report' }]
  ],
  use: {
    ...baseConfig.use,
    baseURL: `http://127.0.0.1:${PORT}`,
    actionTimeout: 60 * 1000,
    navigationTimeout: 120 * 1000,
    trace: 'retain-on-failure',
    video: 'off',
    viewport: { width: 1280, height: 800 },
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync'
      ]
    }
  },
  webServer: {
    // The server's log goes to a file, read it when a test fails.
    command: 'jlpm start > jupyter-server.log 2>&1',
    url: `http://127.0.0.1:${PORT}/lab`,
    timeout: 180 * 1000,
    reuseExistingServer: false,
    stdout: 'ignore',
    stderr: 'pipe'
  }
};
