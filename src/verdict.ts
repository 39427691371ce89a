/**
 * A renderer for the verdict mime type, so the cell the verify helper
 * inserts shows LIVE / COLD / MISMATCH plainly (a notebook opened without
 * this extension falls back to the kernel's text/plain, which says the same).
 */
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import type { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { VERDICT_MIME } from './tokens';
import { verdictFromBundle } from './verify';

export class VerdictRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(trans: TranslationBundle) {
    super();
    this._trans = trans;
    this.addClass('jp-suspend-verdict');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const verdict = verdictFromBundle(model.data);
    this.node.textContent = '';
    const word = document.createElement('span');
    word.className = 'jp-suspend-verdict-word';
    const message = document.createElement('span');
    message.className = 'jp-suspend-verdict-message';
    if (verdict) {
      this.node.dataset.verdict = verdict.verdict;
      this.node.classList.add(`jp-suspend-verdict-${verdict.verdict}`);
      word.textContent = verdict.verdict;
      // The kernel's message often starts with the verdict word already.
      message.textContent = verdict.message.replace(
        new RegExp(`^${verdict.verdict}:?\\s*`),
        ''
      );
    } else {
      this.node.dataset.verdict = 'NONE';
      word.textContent = this._trans.__('NO VERDICT');
      message.textContent = this._trans.__('The output has no valid verdict.');
    }
    this.node.appendChild(word);
    this.node.appendChild(message);
  }

  private _trans: TranslationBundle;
}

export function verdictRendererFactory(
  trans: TranslationBundle
): IRenderMime.IRendererFactory {
  return {
    safe: true,
    mimeTypes: [VERDICT_MIME],
    defaultRank: 40,
    createRenderer: () => new VerdictRenderer(trans)
  };
}
