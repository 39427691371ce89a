import type { ISessionContext } from '@jupyterlab/apputils';

/**
 * Contexts whose next `startKernel()` the user asked for explicitly (the
 * kernel hold's "Start a new kernel"): the suspended-run guard
 * (`runguard.ts`) does not ask again.
 */
export const explicitStarts = new WeakSet<ISessionContext>();
