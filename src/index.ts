import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';
import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { requestAPI } from './request';

/** The part of `GET jupyter-suspend/api/status` the status bar shows. */
interface IStatus {
  state: string;
  restore: 'live' | 'cold' | null;
  message: string;
}

const PLUGIN_ID = 'jupyter-suspend:plugin';

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Suspend and resume the notebook environment; show its state.',
  autoStart: true,
  optional: [IStatusBar, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    statusBar: IStatusBar | null,
    translator: ITranslator | null
  ) => {
    if (!statusBar) {
      return;
    }
    const trans = (translator ?? nullTranslator).load('jupyter_suspend');
    const item = new Widget();
    item.addClass('jp-StatusBar-TextItem');
    item.addClass('jp-suspend-status');
    item.node.textContent = trans.__('Suspend: …');
    const poll = new Poll({
      factory: async () => {
        const status = await requestAPI<IStatus>('status');
        const label =
          status.state === 'ready' && status.restore
            ? trans.__('ready (%1)', status.restore)
            : status.state;
        item.node.textContent = trans.__('Suspend: %1', label);
        item.node.dataset.state = status.state;
        item.node.title = status.message;
      },
      frequency: { interval: 5000, backoff: true, max: 60000 },
      name: `${PLUGIN_ID}:status`,
      standby: 'when-hidden'
    });
    statusBar.registerStatusItem(PLUGIN_ID, {
      item,
      align: 'left',
      rank: 10
    });
    app.restored.then(() => poll.start());
  }
};

export default plugin;
