/**
 * Answer the server's save requests: nothing unsaved is lost on any suspend.
 *
 * Whatever starts a suspend (the toolbar, `%suspend`, the idle policy, the
 * CLI, the REST API), the server first emits a "save requested" event on the
 * event bus (`save-request-event.json`). This page answers `POST
 * save-requests` at once with the documents it is saving, saves them, and
 * answers again with what was saved and what could not be, and why; the
 * suspend aborts rather than lose a document. A dry run (the suspend dialog)
 * only lists them.
 */
import type { Event } from '@jupyterlab/services';
import type { DocumentRegistry } from '@jupyterlab/docregistry';
import type { IStream } from '@lumino/signaling';

import type {
  SaveAnswerAccepted,
  SaveAnswerRequest,
  SaveRequestEvent
} from './_generated/schemas';
import { DisposableOnce } from './disposable';
import type { ISaveResult } from './flows';
import { requestAPI } from './request';

export const SAVE_EVENT_SCHEMA_ID =
  'https://schema.jupyter.org/jupyter_suspend/api/v1/save-request-event.json';

/** `POST save-requests`. */
export function answerSaveRequest(
  body: SaveAnswerRequest
): Promise<SaveAnswerAccepted> {
  return requestAPI<SaveAnswerAccepted>('save-requests', {
    method: 'POST',
    body: JSON.stringify(body)
  });
}

/** A random id for this page (the server counts answers per page). */
export function newClientId(): string {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, b => b.toString(16).padStart(2, '0')).join('');
}

export class SaveRequestResponder extends DisposableOnce {
  constructor(options: SaveRequestResponder.IOptions) {
    super();
    this._options = options;
    this._clientId = options.clientId ?? newClientId();
    options.events.connect(this._onEmission, this);
  }

  get clientId(): string {
    return this._clientId;
  }

  /** Answer one request (the event's data); resolves when the last answer was sent. */
  async respond(event: SaveRequestEvent): Promise<void> {
    const { dirty, save, answer } = this._options;
    const base = { request_id: event.request_id, client_id: this._clientId };
    const contexts = dirty();
    const paths = contexts.map(c => c.path);
    if (event.dry_run) {
      await answer({ ...base, state: 'done', unsaved: paths });
      return;
    }
    if (contexts.length > 0) {
      // First: "I am saving these" (the server then waits for this page).
      await answer({ ...base, state: 'saving', saving: paths });
    }
    let result: ISaveResult;
    try {
      result = await save(contexts);
    } catch (reason) {
      const error = reason instanceof Error ? reason.message : String(reason);
      result = { saved: [], failed: paths.map(path => ({ path, error })) };
    }
    await answer({
      ...base,
      state: 'done',
      saved: result.saved,
      failed: result.failed.map(f => ({
        path: f.path,
        error: f.error.slice(0, 1000)
      }))
    });
  }

  protected onDispose(): void {
    this._options.events.disconnect(this._onEmission, this);
  }

  private _onEmission(_: unknown, emission: Event.Emission): void {
    if (emission.schema_id !== SAVE_EVENT_SCHEMA_ID) {
      return;
    }
    const event = emission as unknown as SaveRequestEvent;
    void this.respond(event).catch(reason =>
      // A late answer (409) or a server gone: the server's report says so.
      console.warn('jupyter-suspend: save request not answered', reason)
    );
  }

  private _options: SaveRequestResponder.IOptions;
  private _clientId: string;
}

export namespace SaveRequestResponder {
  export interface IOptions {
    /** The server's event stream (`app.serviceManager.events.stream`). */
    events: IStream<unknown, Event.Emission>;
    /** The open documents with unsaved changes. */
    dirty: () => DocumentRegistry.Context[];
    /** Save them. */
    save: (contexts: DocumentRegistry.Context[]) => Promise<ISaveResult>;
    /** Send an answer (default: `POST save-requests`). */
    answer: (body: SaveAnswerRequest) => Promise<unknown>;
    clientId?: string;
  }
}
