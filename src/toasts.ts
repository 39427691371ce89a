/**
 * Changing and dismissing notifications without losing the change.
 *
 * JupyterLab shows a notification as a react-toastify toast, asynchronously.
 * A change that comes too soon after the toast appeared, or after its last
 * change, can be lost or applied out of order: toastify defers an update by
 * a tick, so a dismissal right after an update can run first, and the update
 * then brings the toast back with its old text for good (the "Suspended: …"
 * toast still on screen a minute after the resume began; a "Resuming…" toast
 * after a cold restore). So every change of one notification is queued and
 * applied only once the toast has been left alone `TOAST_SETTLE_MS` since it
 * appeared or last changed. Callers do not wait for it.
 */
import { Notification } from '@jupyterlab/apputils';
import type { ReadonlyJSONValue } from '@lumino/coreutils';

/**
 * How long a notification must have been shown (or left unchanged) before it
 * is updated again or dismissed. Mounting a toast takes a while on a loaded
 * machine; a server that aborts at once answers that fast.
 */
export const TOAST_SETTLE_MS = 1000;

/** When each notification was last changed here (epoch ms). */
const lastChanged = new Map<string, number>();

/** Resolve once notification `id` has been left alone `TOAST_SETTLE_MS`. */
export async function whenToastShown(id: string): Promise<void> {
  const shown = Notification.manager.notifications.find(n => n.id === id);
  const since = Math.max(shown?.createdAt ?? 0, lastChanged.get(id) ?? 0);
  const age = since > 0 ? Date.now() - since : TOAST_SETTLE_MS;
  if (age < TOAST_SETTLE_MS) {
    await new Promise(resolve => setTimeout(resolve, TOAST_SETTLE_MS - age));
  }
}

/** The pending changes of each notification, applied in the order asked. */
const pending = new Map<string, Promise<void>>();

function whenShown(id: string, change: () => void): Promise<void> {
  const next = (pending.get(id) ?? Promise.resolve())
    .then(() => whenToastShown(id))
    .then(change);
  pending.set(id, next);
  void next.finally(() => {
    if (pending.get(id) === next) {
      pending.delete(id);
    }
  });
  return next;
}

/** Whether notification `id` is still in JupyterLab's list (not closed by the user). */
export function isListed(id: string): boolean {
  return Notification.manager.notifications.some(n => n.id === id);
}

/**
 * Update notification `args.id` now (a progress line: losing one is harmless)
 * and remember when, so that the next queued change waits for it.
 */
export function updateNow(
  args: Notification.IUpdate<ReadonlyJSONValue>
): boolean {
  lastChanged.set(args.id, Date.now());
  return Notification.update(args);
}

/** Give notification `args.id` new text, once it is shown (after its pending changes). */
export function settle(
  args: Notification.IUpdate<ReadonlyJSONValue>
): Promise<void> {
  return whenShown(args.id, () => {
    lastChanged.set(args.id, Date.now());
    Notification.update(args);
  });
}

/** Dismiss notification `id`, once it is shown (after its pending changes). */
export function dismissWhenShown(id: string): Promise<void> {
  return whenShown(id, () => {
    lastChanged.delete(id);
    Notification.dismiss(id);
  });
}
