import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { IConsoleTracker } from '@jupyterlab/console';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStateDB } from '@jupyterlab/statedb';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';

import { api } from './api';
import { CommandRefresher, registerCommands } from './commands';
import { dirtyContexts, saveContexts, SuspendFlows } from './flows';
import { SuspendModel } from './model';
import { IdleWarningNotifier } from './idle';
import { KernelStartHold } from './kernelhold';
import { ColdStartNotifier } from './notify';
import { ResumeReconnector } from './reconnect';
import { SuspendedRunGuard } from './runguard';
import { answerSaveRequest, SaveRequestResponder } from './saverequests';
import { SuspendStatusItem } from './statusbar';
import {
  DEFAULT_SETTINGS,
  ISettings,
  ISuspendModel,
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
    const flows = new SuspendFlows(deps);
    registerCommands(deps, flows, palette);
    new CommandRefresher(app.commands, model, flows.guard);

    if (rendermime) {
      rendermime.addFactory(verdictRendererFactory(trans), 40);
    }

    // React to what the server reports, whoever caused it (this tab, another
    // tab, the %suspend magic, the platform).
    new ResumeReconnector({
      model,
      services: app.serviceManager,
      widgets: [tracker, consoles]
    });
    // A notebook opened while suspended gets no kernel of its own: held at
    // its creation, before its session context starts one.
    const hold = new KernelStartHold({
      model,
      sessions: app.serviceManager.sessions,
      commands: app.commands,
      trans
    });
    // Running a cell while the kernels are down offers Resume, not the picker.
    const runGuard = new SuspendedRunGuard({
      model,
      commands: app.commands,
      trans
    });
    const notebookFactory = app.docRegistry.getWidgetFactory('Notebook');
    if (notebookFactory) {
      notebookFactory.widgetCreated.connect((_, widget) => {
        if (widget instanceof NotebookPanel) {
          hold.hold(widget.sessionContext);
          runGuard.guard(widget.sessionContext);
        }
      });
    } else {
      tracker?.widgetAdded.connect((_, panel) => {
        hold.hold(panel.sessionContext);
        runGuard.guard(panel.sessionContext);
      });
    }
    // Every suspend, whatever started it, asks this page to save first.
    const events = app.serviceManager.events?.stream ?? null;
    if (events) {
      new SaveRequestResponder({
        events,
        dirty: () => dirtyContexts(app, docManager, tracker),
        save: saveContexts,
        answer: answerSaveRequest
      });
    }
    const notifier = new ColdStartNotifier({
      commands: app.commands,
      trans,
      state: stateDB,
      startedHere: id => flows.startedHere(id)
    });
    model.changed.connect(() => {
      if (model.status) {
        void notifier.check(model.status);
      }
    });
    // The idle policy's warning before an automatic suspend, with Keep running.
    new IdleWarningNotifier({ model, trans });

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
