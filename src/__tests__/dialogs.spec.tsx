import * as React from 'react';
import { renderToStaticMarkup } from 'react-dom/server';

import { PreflightBody, TimelineBody, VerdictBody } from '../dialogs';
import { preflightToView } from '../display';
import { LOCAL_TEXT, preflight, timeline } from './fixtures';
import { trans } from './helpers';

function render(element: React.ReactElement): HTMLElement {
  const host = document.createElement('div');
  host.innerHTML = renderToStaticMarkup(element);
  return host;
}

describe('PreflightBody', () => {
  it('lists what is kept and lost, then each kernel', () => {
    const host = render(
      <PreflightBody view={preflightToView(preflight(), trans)} trans={trans} />
    );
    const kept = Array.from(
      host.querySelectorAll('.jp-suspend-keeps li[data-kept="true"]')
    ).map(li => li.textContent);
    const lost = Array.from(
      host.querySelectorAll('.jp-suspend-keeps li[data-kept="false"]')
    ).map(li => li.textContent);
    expect(kept).toEqual([
      '✓notebooks and other files: kept',
      '✓application checkpoints: kept'
    ]);
    expect(lost).toEqual(LOCAL_TEXT.loses.map(item => `✗${item}: lost`));
    expect(host.querySelector('.jp-suspend-while-suspended')?.textContent).toBe(
      `While suspended: ${LOCAL_TEXT.while_suspended}`
    );
    expect(host.querySelector('.jp-suspend-resume-by')?.textContent).toBe(
      `Resumed by: ${LOCAL_TEXT.resume_by}`
    );
    const row = host.querySelector('.jp-suspend-kernel')!;
    expect(row.querySelector('.jp-suspend-kernel-title')?.textContent).toBe(
      'nb.ipynb'
    );
    expect(row.querySelector('.jp-suspend-kernel-keeps')?.textContent).toBe(
      'notebook file on disk'
    );
    expect(row.querySelector('.jp-suspend-kernel-loses')?.textContent).toBe(
      'all variables in kernel memory'
    );
    expect(host.querySelector('.jp-suspend-blocking')).toBe(null);
  });

  it('warns when the suspend would abort', () => {
    const p = preflight();
    p.would_abort = [
      'kernel k (nb.ipynb) is busy; wait, interrupt it, or use force'
    ];
    const host = render(
      <PreflightBody view={preflightToView(p, trans)} trans={trans} />
    );
    expect(host.querySelector('.jp-suspend-blocking')?.textContent).toContain(
      'is busy; wait, interrupt it, or use force'
    );
  });

  it('says when no kernel runs', () => {
    const p = preflight();
    p.kernels = [];
    const host = render(
      <PreflightBody view={preflightToView(p, trans)} trans={trans} />
    );
    expect(host.querySelector('.jp-suspend-kernels')).toBe(null);
    expect(host.textContent).toContain('No kernel is running');
  });
});

describe('TimelineBody', () => {
  it('shows one row per cycle with the totals', () => {
    const host = render(<TimelineBody timeline={timeline()} trans={trans} />);
    expect(host.textContent).toContain('1 cycle(s), 1 resumed, 0 aborted');
    const cells = Array.from(host.querySelectorAll('tbody tr td')).map(
      td => td.textContent
    );
    expect(cells[1]).toBe('resumed (cold)');
    // resume to runnable, as recorded
    const measured = timeline().cycles[0].durations.resume_to_runnable!;
    expect(cells[5]).toBe(`${measured.toFixed(1)} s`);
  });
});

describe('VerdictBody', () => {
  it('shows the verdict word plainly', () => {
    const host = render(
      <VerdictBody
        result={{
          verdict: { verdict: 'MISMATCH', message: 'canary differs' },
          error: null,
          mode: 'scratch'
        }}
        trans={trans}
      />
    );
    const root = host.querySelector('.jp-suspend-verdict')!;
    expect(root.getAttribute('data-verdict')).toBe('MISMATCH');
    expect(root.querySelector('.jp-suspend-verdict-word')?.textContent).toBe(
      'MISMATCH'
    );
  });

  it('says why there is no verdict', () => {
    const host = render(
      <VerdictBody
        result={{
          verdict: null,
          error: 'UsageError: no magic',
          mode: 'scratch'
        }}
        trans={trans}
      />
    );
    expect(host.textContent).toContain('NO VERDICT');
    expect(host.textContent).toContain('UsageError: no magic');
  });
});
