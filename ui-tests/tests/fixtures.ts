/**
 * Galata's `test` with one automatic fixture: when a test fails, what the
 * browser logged (the plugin's reconnect steps, JupyterLab's kernel
 * connection messages) and the server log's lines about kernels and
 * websockets are printed with the failure. A flake seen once in CI is then
 * explained by the CI log itself.
 */
import { expect, galata, test as galataTest } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as path from 'path';

const SERVER_LOG = path.resolve(__dirname, '..', 'jupyter-server.log');

/** Server log lines worth reading next to a failed test. */
const SERVER_LINE =
  /kernel|websocket|Nudge|buffer|Restoring connection|stale connection|jupyter-suspend/i;

function serverLogSince(offset: number, maxLines = 200): string[] {
  let text: string;
  try {
    const fd = fs.openSync(SERVER_LOG, 'r');
    try {
      const size = fs.fstatSync(fd).size;
      const buffer = Buffer.alloc(Math.max(0, size - offset));
      fs.readSync(fd, buffer, 0, buffer.length, offset);
      text = buffer.toString('utf8');
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return [`(no server log at ${SERVER_LOG})`];
  }
  return text
    .split('\n')
    .filter(line => SERVER_LINE.test(line))
    .slice(-maxLines);
}

function serverLogSize(): number {
  try {
    return fs.statSync(SERVER_LOG).size;
  } catch {
    return 0;
  }
}

export const test = galataTest.extend<{ failureLogs: void }>({
  failureLogs: [
    async ({ page }, use, testInfo) => {
      const started = Date.now();
      const logOffset = serverLogSize();
      const browser: string[] = [];
      page.on('console', message => {
        const seconds = ((Date.now() - started) / 1000).toFixed(1);
        browser.push(`+${seconds}s ${message.type()}: ${message.text()}`);
      });
      await use();
      // JUPYTER_SUSPEND_UI_LOGS=always prints them for passing tests too.
      if (
        testInfo.status !== testInfo.expectedStatus ||
        process.env.JUPYTER_SUSPEND_UI_LOGS === 'always'
      ) {
        const report = [
          '--- browser console (this test) ---',
          ...browser.slice(-200),
          '--- server log (this test, kernels and websockets) ---',
          ...serverLogSince(logOffset)
        ].join('\n');
        console.log(`\n[${testInfo.title}]\n${report}\n`);
        await testInfo.attach('failure-logs', {
          body: report,
          contentType: 'text/plain'
        });
      }
    },
    { auto: true }
  ]
});

export { expect, galata };
