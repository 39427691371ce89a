import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, ISessionContext } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { IConsoleTracker } from '@jupyterlab/console';
import { INotebookTracker } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStateDB } from '@jupyterlab/statedb';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';

import { api } from './api';
import { notifyCommands, registerCommands } from './commands';
import { SuspendFlows } from './flows';
import { SuspendModel } from './model';
import { ColdStartNotifier } from './notify';
import {
  AttachmentKeeper,
  reconnectAll,
  refreshSessionsAndKernels
} from './reconnect';
import { SuspendStatusItem } from './statusbar';
import {
  DEFAULT_SETTINGS,
  ISettings,
  ISuspendModel,
  IStatus,
  PLUGIN_ID,
  TRANSLATION_DOMAIN
} from './tokens';
import { verdictRendererFactory } from './verdict';

function readSettings(settings: ISettingRegistry.ISettings): ISettings {
  const get = <K extends keyof ISettings>(key: K): ISettings[K] =>
    (settings.get(key).composite as ISettings[K] | undefined) ??
    DEFAULT_SETTINGS[key];
  return {
    confirmBeforeSuspend: get('confirmBeforeSuspend'),
    pollInterval: get('pollInterval'),
    showIdleTime: get('showIdleTime'),
    verifyMode: get('verifyMode')
  };
}

const plugin: JupyterFrontEndPlugin<ISuspendModel> = {
  id: PLUGIN_ID,
  description:
    'Suspend and resume the notebook environment safely; show its state and verify what came back.',
  autoStart: true,
  provides: ISuspendModel,
  optional: [
    ISettingRegistry,
    IStatusBar,
    ICommandPalette,
    INotebookTracker,
    IDocumentManager,
    IStateDB,
    IRenderMimeRegistry,
    ITranslator,
    IConsoleTracker
  ],
  activate: (
    app: JupyterFrontEnd,
    settingRegistry: ISettingRegistry | null,
    statusBar: IStatusBar | null,
    palette: ICommandPalette | null,
    tracker: INotebookTracker | null,
    docManager: IDocumentManager | null,
    stateDB: IStateDB | null,
    rendermime: IRenderMimeRegistry | null,
    translator: ITranslator | null,
    consoles: IConsoleTracker | null
  ): ISuspendModel => {
    const trans = (translator ?? nullTranslator).load(TRANSLATION_DOMAIN);
    let settings: ISettings = { ...DEFAULT_SETTINGS };

    const model = new SuspendModel({
      fetchStatus: api.status,
      fetchTimeline: api.timeline,
      events: app.serviceManager.events?.stream ?? null,
      interval: settings.pollInterval * 1000
    });

    const deps = {
      app,
      model,
      trans,
      settings: () => settings,
      tracker,
      docManager
    };
    registerCommands(deps, new SuspendFlows(deps), palette);

    if (rendermime) {
      rendermime.addFactory(verdictRendererFactory(trans), 40);
    }

    // Every open notebook and console: what a resume has to reconnect.
    const openSessionContexts = (): ISessionContext[] => {
      const contexts: ISessionContext[] = [];
      tracker?.forEach(panel => contexts.push(panel.sessionContext));
      consoles?.forEach(panel => contexts.push(panel.sessionContext));
      return contexts;
    };

    // Only between operations: during a suspend or resume, sessions come and
    // go on purpose and the ready-time reconnect below handles them.
    const steady = (): boolean => {
      const status = model.status;
      return (
        !!status &&
        (status.state === 'running' || status.state === 'ready') &&
        !status.operation?.in_progress &&
        !model.reconnecting
      );
    };
    const keeper = new AttachmentKeeper(app.serviceManager.sessions, steady);
    tracker?.widgetAdded.connect((_, panel) =>
      keeper.watch(panel.sessionContext)
    );
    consoles?.widgetAdded.connect((_, panel) =>
      keeper.watch(panel.sessionContext)
    );
    // A connection dropped while not steady (a stale session list landing
    // during the resume's own reconnect) is looked at once it is steady.
    let wasSteady = steady();
    model.stateChanged.connect(() => {
      const now = steady();
      if (now && !wasSteady) {
        keeper.recheckAll();
      }
      wasSteady = now;
    });

    // React to what the server reports, whoever caused it (this tab, another
    // tab, the %suspend magic, the platform).
    const notifier = new ColdStartNotifier({
      commands: app.commands,
      trans,
      state: stateDB
    });
    let previous: IStatus | null = null;
    let commandKey = '';
    model.changed.connect(() => {
      const status = model.status;
      const key = status
        ? `${status.state}|${status.can_suspend}|${status.can_resume}|${status.operation?.in_progress}`
        : 'none';
      if (key !== commandKey) {
        commandKey = key;
        notifyCommands(app);
      }
      if (!status) {
        return;
      }
      if (
        previous &&
        previous.state !== 'suspended' &&
        status.state === 'suspended'
      ) {
        void refreshSessionsAndKernels(app.serviceManager).catch(
          () => undefined
        );
      }
      const restoredNow =
        status.state === 'ready' &&
        (previous === null ||
          previous.state !== 'ready' ||
          previous.last_restore?.operation_id !==
            status.last_restore?.operation_id);
      const hadPrevious = previous !== null;
      previous = status;
      if (restoredNow && hadPrevious) {
        model.setReconnecting(true);
        void reconnectAll(openSessionContexts(), app.serviceManager).finally(
          () => model.setReconnecting(false)
        );
      }
      void notifier.check(status);
    });

    if (statusBar) {
      const item = new SuspendStatusItem(model, {
        trans,
        settings: () => settings,
        commands: app.commands
      });
      statusBar.registerStatusItem(`${PLUGIN_ID}:status`, {
        item,
        align: 'left',
        rank: 10
      });
    }

    const applySettings = (loaded: ISettingRegistry.ISettings): void => {
      settings = readSettings(loaded);
      model.setInterval(settings.pollInterval * 1000);
      // showIdleTime changes the rendering: ask for a re-render.
      model.stateChanged.emit();
    };
    void Promise.all([
      settingRegistry?.load(PLUGIN_ID) ?? Promise.resolve(null),
      app.restored
    ])
      .then(([loaded]) => {
        if (loaded) {
          applySettings(loaded);
          loaded.changed.connect(applySettings);
        }
      })
      .catch(reason => {
        console.warn('jupyter-suspend: settings not loaded', reason);
      })
      .then(() => model.start());

    return model;
  }
};

export default plugin;
export * from './tokens';
