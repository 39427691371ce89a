/** Typed calls of the REST API v1 (`{base_url}jupyter-suspend/api/`). */
import { ServerConnection } from '@jupyterlab/services';

import type {
  ErrorAnswer,
  SnapshotDeleted,
  Snapshots
} from './_generated/schemas';
import { requestAPI } from './request';
import type { IPreflight, IStarted, IStatus, ITimeline } from './tokens';

function post<T>(endPoint: string, body: object = {}): Promise<T> {
  return requestAPI<T>(endPoint, {
    method: 'POST',
    body: JSON.stringify(body)
  });
}

export const api = {
  status: (): Promise<IStatus> => requestAPI<IStatus>('status'),
  timeline: (): Promise<ITimeline> => requestAPI<ITimeline>('timeline'),
  preflight: (): Promise<IPreflight> =>
    post<IPreflight>('suspend', { dry_run: true }),
  suspend: (reason: string, force = false): Promise<IStarted> =>
    post<IStarted>('suspend', force ? { reason, force } : { reason }),
  resume: (reason: string): Promise<IStarted> =>
    post<IStarted>('resume', { reason }),
  checkpoint: (reason: string): Promise<IStarted> =>
    post<IStarted>('checkpoint', { reason }),
  acknowledge: (): Promise<IStatus> => post<IStatus>('acknowledge'),
  snapshots: (): Promise<Snapshots> => requestAPI<Snapshots>('snapshots'),
  deleteSnapshot: (name: string): Promise<SnapshotDeleted> =>
    requestAPI<SnapshotDeleted>(`snapshots/${encodeURIComponent(name)}`, {
      method: 'DELETE'
    })
};

/** What a 4xx answer says; a 409 adds the state and the operation in the way. */
export type IConflict = ErrorAnswer;

/** The server's message of a failed call, for the user. */
export function errorMessage(reason: unknown): string {
  if (reason instanceof ServerConnection.ResponseError) {
    return reason.message || `${reason.response.status}`;
  }
  if (reason instanceof Error) {
    return reason.message;
  }
  return String(reason);
}

/** The HTTP status of a failed call, when it has one. */
export function errorStatus(reason: unknown): number | null {
  return reason instanceof ServerConnection.ResponseError
    ? reason.response.status
    : null;
}
