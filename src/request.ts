import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** Base path of the jupyter-suspend REST API, relative to the server's base URL. */
export const API_PATH = 'jupyter-suspend/api';

/** A non-2xx answer, with its parsed JSON body (`data`) when it had one. */
export class APIError extends ServerConnection.ResponseError {
  constructor(response: Response, message: string, data: unknown) {
    super(response, message);
    this.data = data;
  }

  readonly data: unknown;
}

/**
 * Call the jupyter-suspend REST API and return its JSON answer.
 *
 * Non-2xx answers throw a `ServerConnection.ResponseError` carrying the
 * server's message, so callers can show it as is.
 */
export async function requestAPI<T>(
  endPoint: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, API_PATH, endPoint);
  const response = await ServerConnection.makeRequest(url, init, settings);
  const text = await response.text();
  let data: unknown = text;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      // Keep the raw text: it is the most useful message we have.
    }
  }
  if (!response.ok) {
    const message =
      data && typeof data === 'object' && 'message' in data
        ? String((data as { message: unknown }).message)
        : text;
    throw new APIError(response, message, data);
  }
  return data as T;
}
