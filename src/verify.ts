/**
 * The "verify live state" helper: run `%verify_live_state` in a notebook's
 * kernel and read the verdict it publishes.
 *
 * The kernel side publishes ONE display_data whose bundle has the
 * `application/vnd.jupyter-suspend.verdict+json` object and a `text/plain`
 * whose first word is the verdict; we prefer the JSON and fall back to the
 * first word, so a kernel whose frontend-side mime type got lost (e.g. a
 * notebook exported and reopened) still reads right.
 */
import type * as nbformat from '@jupyterlab/nbformat';
import { CodeCell } from '@jupyterlab/cells';
import { NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import type { Kernel, KernelMessage } from '@jupyterlab/services';
import type { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import { IVerdict, VERDICT_MIME, VerdictKind } from './tokens';

/**
 * Loads the kernel side first, silently: a kernel restarted by a resume may
 * not have it yet, and `%load_ext` would print a notice when it already has.
 */
export const LOAD_HELPER_CODE =
  "get_ipython().extension_manager.load_extension('jupyter_suspend')";

/** What the helper runs (after {@link ensureHelper}). */
export const VERIFY_CODE = '%verify_live_state';

/**
 * What loading the application checkpoints into a restarted kernel runs
 * (after {@link ensureHelper}).
 */
export const LOAD_CHECKPOINTS_CODE = '%checkpoint restore';

const VERDICTS: ReadonlyArray<VerdictKind> = ['LIVE', 'COLD', 'MISMATCH'];

export interface IVerifyResult {
  /** The verdict, or null when the kernel published none. */
  verdict: IVerdict | null;
  /** Why there is no verdict (the kernel's error, or "no verdict"). */
  error: string | null;
  /** Where the helper ran. */
  mode: 'insert-cell' | 'scratch';
}

function joinText(value: nbformat.MultilineString | unknown): string {
  if (Array.isArray(value)) {
    return value.join('');
  }
  return typeof value === 'string' ? value : '';
}

function isVerdictKind(value: unknown): value is VerdictKind {
  return (
    typeof value === 'string' && VERDICTS.indexOf(value as VerdictKind) >= 0
  );
}

/** The verdict of one mime bundle, if it has one. */
export function verdictFromBundle(
  data: nbformat.IMimeBundle | ReadonlyPartialJSONObject | undefined
): IVerdict | null {
  if (!data) {
    return null;
  }
  const json = (data as { [key: string]: unknown })[VERDICT_MIME];
  if (json && typeof json === 'object' && !Array.isArray(json)) {
    const candidate = json as { [key: string]: unknown };
    if (isVerdictKind(candidate.verdict)) {
      return {
        verdict: candidate.verdict,
        kernel_id:
          typeof candidate.kernel_id === 'string'
            ? candidate.kernel_id
            : undefined,
        message: typeof candidate.message === 'string' ? candidate.message : '',
        details: candidate.details,
        checkpoints_restored: Array.isArray(candidate.checkpoints_restored)
          ? candidate.checkpoints_restored
          : undefined
      };
    }
  }
  const text = joinText((data as { [key: string]: unknown })['text/plain']);
  return verdictFromText(text);
}

/** "LIVE: same process…" → LIVE; the first word decides. */
export function verdictFromText(text: string): IVerdict | null {
  const trimmed = text.trim();
  const match = /^([A-Z]+)\b:?/.exec(trimmed);
  if (!match || !isVerdictKind(match[1])) {
    return null;
  }
  return { verdict: match[1], message: trimmed };
}

/**
 * Read the verdict from a cell's outputs (nbformat JSON).
 *
 * Rich outputs come first (they carry the JSON); a stream whose first word is
 * a verdict is accepted as the last resort.
 */
export function parseVerifyOutputs(
  outputs: ReadonlyArray<nbformat.IOutput>
): Omit<IVerifyResult, 'mode'> {
  for (const output of outputs) {
    if (
      output.output_type === 'display_data' ||
      output.output_type === 'execute_result' ||
      output.output_type === 'update_display_data'
    ) {
      const verdict = verdictFromBundle((output as nbformat.IDisplayData).data);
      if (verdict) {
        return { verdict, error: null };
      }
    }
  }
  for (const output of outputs) {
    if (output.output_type === 'stream') {
      for (const line of joinText((output as nbformat.IStream).text).split(
        '\n'
      )) {
        const verdict = verdictFromText(line);
        if (verdict) {
          return { verdict, error: null };
        }
      }
    }
  }
  const error = outputs.find(o => o.output_type === 'error') as
    nbformat.IError | undefined;
  if (error) {
    return { verdict: null, error: `${error.ename}: ${error.evalue}` };
  }
  return { verdict: null, error: null };
}

/**
 * Load the kernel side in a kernel, silently (no output, no history).
 *
 * Throws with the kernel's error when it cannot be loaded (e.g. the package is
 * not installed in the kernel's environment).
 */
export async function ensureHelper(
  kernel: Kernel.IKernelConnection
): Promise<void> {
  const future = kernel.requestExecute(
    {
      code: LOAD_HELPER_CODE,
      silent: true,
      store_history: false,
      allow_stdin: false,
      stop_on_error: false
    },
    true
  );
  const reply = (await future.done) as KernelMessage.IExecuteReplyMsg;
  if (reply.content.status === 'error') {
    throw new Error(
      `jupyter_suspend could not be loaded in the kernel: ${reply.content.ename}: ${reply.content.evalue}`
    );
  }
}

/** The notebook's kernel, once it is ready and has the kernel side loaded. */
async function kernelWithHelper(
  panel: NotebookPanel
): Promise<Kernel.IKernelConnection> {
  await panel.sessionContext.ready;
  const kernel = panel.sessionContext.session?.kernel;
  if (!kernel) {
    throw new Error('the notebook has no kernel');
  }
  await ensureHelper(kernel);
  return kernel;
}

/**
 * Insert a cell running the helper below the active cell and run it; the
 * verdict stays in the notebook as a record of the check.
 */
export async function verifyInNotebook(
  panel: NotebookPanel
): Promise<IVerifyResult> {
  await kernelWithHelper(panel);
  const notebook = panel.content;
  NotebookActions.insertBelow(notebook);
  if (notebook.activeCell?.model.type !== 'code') {
    NotebookActions.changeCellType(notebook, 'code');
  }
  const cell = notebook.activeCell;
  if (!cell || !(cell instanceof CodeCell)) {
    throw new Error('could not insert a code cell');
  }
  cell.model.sharedModel.setSource(VERIFY_CODE);
  await NotebookActions.run(notebook, panel.sessionContext);
  const outputs = cell.model.outputs.toJSON();
  return { ...parseVerifyOutputs(outputs), mode: 'insert-cell' };
}

/** Turn one iopub message into nbformat output JSON (the ones we read). */
export function outputFromMessage(
  msg: KernelMessage.IIOPubMessage
): nbformat.IOutput | null {
  switch (msg.header.msg_type) {
    case 'display_data':
    case 'execute_result':
    case 'update_display_data': {
      const content = msg.content as KernelMessage.IDisplayDataMsg['content'];
      return {
        output_type: msg.header.msg_type,
        data: content.data,
        metadata: content.metadata ?? {}
      } as nbformat.IOutput;
    }
    case 'stream': {
      const content = msg.content as KernelMessage.IStreamMsg['content'];
      return { output_type: 'stream', name: content.name, text: content.text };
    }
    case 'error': {
      const content = msg.content as KernelMessage.IErrorMsg['content'];
      return {
        output_type: 'error',
        ename: content.ename,
        evalue: content.evalue,
        traceback: content.traceback
      };
    }
    default:
      return null;
  }
}

/**
 * Run code in a kernel without touching any notebook: not stored in the
 * history, its outputs collected here rather than in a cell.
 */
export async function runQuietly(
  kernel: Kernel.IKernelConnection,
  code: string
): Promise<nbformat.IOutput[]> {
  const outputs: nbformat.IOutput[] = [];
  const future = kernel.requestExecute(
    {
      code,
      silent: false,
      store_history: false,
      allow_stdin: false,
      stop_on_error: false
    },
    true
  );
  future.onIOPub = msg => {
    const output = outputFromMessage(msg);
    if (output) {
      outputs.push(output);
    }
  };
  await future.done;
  return outputs;
}

/** Run the helper in a scratch execution of the notebook's kernel. */
export async function verifyScratch(
  panel: NotebookPanel
): Promise<IVerifyResult> {
  const kernel = await kernelWithHelper(panel);
  const outputs = await runQuietly(kernel, VERIFY_CODE);
  return { ...parseVerifyOutputs(outputs), mode: 'scratch' };
}

/** All text a list of outputs shows (for messages after `%checkpoint restore`). */
export function outputsText(outputs: ReadonlyArray<nbformat.IOutput>): string {
  const parts: string[] = [];
  for (const output of outputs) {
    if (output.output_type === 'stream') {
      parts.push(joinText((output as nbformat.IStream).text));
    } else if (output.output_type === 'error') {
      const e = output as nbformat.IError;
      parts.push(`${e.ename}: ${e.evalue}`);
    } else {
      const data = (output as nbformat.IDisplayData).data;
      if (data) {
        parts.push(joinText(data['text/plain']));
      }
    }
  }
  return parts.join('\n').trim();
}
