import type * as nbformat from '@jupyterlab/nbformat';
import type { KernelMessage } from '@jupyterlab/services';

import { VERDICT_MIME } from '../tokens';
import {
  outputFromMessage,
  outputsText,
  parseVerifyOutputs,
  verdictFromBundle,
  verdictFromText
} from '../verify';

/** The display_data `%verify_live_state` publishes (the kernel-side contract). */
function verdictOutput(
  verdict: string,
  message: string,
  text = `${verdict}: ${message}`
): nbformat.IDisplayData {
  return {
    output_type: 'display_data',
    data: {
      'text/plain': text,
      [VERDICT_MIME]: {
        verdict,
        kernel_id: 'k-1',
        message,
        details: { pid_same: verdict === 'LIVE' },
        checkpoints_restored: []
      }
    },
    metadata: {}
  };
}

describe('verdictFromText', () => {
  it.each([
    ['LIVE: same process, canary matches', 'LIVE'],
    ['COLD: new process (pid 12 -> 40)', 'COLD'],
    ['MISMATCH: canary differs', 'MISMATCH'],
    ['  COLD  no canary', 'COLD'],
    ['COLD', 'COLD']
  ])('%p reads %p', (text, verdict) => {
    expect(verdictFromText(text)?.verdict).toBe(verdict);
  });

  it.each([
    'LIVELY: no',
    'live: lower case is not a verdict',
    'The verdict is LIVE',
    ''
  ])('%p is no verdict', text => {
    expect(verdictFromText(text)).toBe(null);
  });
});

describe('verdictFromBundle', () => {
  it('prefers the JSON of the verdict mime type', () => {
    const out = verdictOutput('COLD', 'new process', 'LIVE: a stale text');
    const verdict = verdictFromBundle(out.data);
    expect(verdict?.verdict).toBe('COLD');
    expect(verdict?.kernel_id).toBe('k-1');
    expect(verdict?.message).toBe('new process');
    expect(verdict?.details).toEqual({ pid_same: false });
  });

  it('falls back to the first word of text/plain', () => {
    expect(
      verdictFromBundle({ 'text/plain': ['MISMATCH: weights ', 'changed'] })
    ).toEqual({ verdict: 'MISMATCH', message: 'MISMATCH: weights changed' });
  });

  it('rejects a JSON verdict outside LIVE/COLD/MISMATCH', () => {
    expect(
      verdictFromBundle({
        [VERDICT_MIME]: { verdict: 'MAYBE', message: 'x' },
        'text/plain': 'MAYBE: x'
      })
    ).toBe(null);
  });
});

describe('parseVerifyOutputs', () => {
  it('reads the verdict among other outputs', () => {
    const outputs: nbformat.IOutput[] = [
      {
        output_type: 'stream',
        name: 'stdout',
        text: 'The jupyter_suspend extension is already loaded.\n'
      },
      verdictOutput('LIVE', 'same process')
    ];
    expect(parseVerifyOutputs(outputs)).toEqual({
      verdict: expect.objectContaining({ verdict: 'LIVE' }),
      error: null
    });
  });

  it('accepts a printed verdict as the last resort', () => {
    const outputs: nbformat.IOutput[] = [
      { output_type: 'stream', name: 'stdout', text: 'checking\nCOLD: new\n' }
    ];
    expect(parseVerifyOutputs(outputs).verdict?.verdict).toBe('COLD');
  });

  it('reports the kernel error when there is no verdict', () => {
    const outputs: nbformat.IOutput[] = [
      {
        output_type: 'error',
        ename: 'UsageError',
        evalue: 'Line magic function `%verify_live_state` not found.',
        traceback: []
      }
    ];
    expect(parseVerifyOutputs(outputs)).toEqual({
      verdict: null,
      error: 'UsageError: Line magic function `%verify_live_state` not found.'
    });
  });

  it('says nothing when the kernel published nothing', () => {
    expect(parseVerifyOutputs([])).toEqual({ verdict: null, error: null });
  });
});

describe('outputFromMessage', () => {
  const msg = (
    msg_type: string,
    content: object
  ): KernelMessage.IIOPubMessage =>
    ({
      header: { msg_type },
      parent_header: {},
      metadata: {},
      content,
      channel: 'iopub'
    }) as unknown as KernelMessage.IIOPubMessage;

  it('turns iopub messages into cell outputs', () => {
    const display = outputFromMessage(
      msg('display_data', { data: { 'text/plain': 'LIVE: x' }, metadata: {} })
    );
    expect(display).toEqual({
      output_type: 'display_data',
      data: { 'text/plain': 'LIVE: x' },
      metadata: {}
    });
    expect(
      outputFromMessage(msg('stream', { name: 'stdout', text: 'hi' }))
    ).toEqual({ output_type: 'stream', name: 'stdout', text: 'hi' });
    expect(
      outputFromMessage(
        msg('error', { ename: 'E', evalue: 'v', traceback: ['t'] })
      )
    ).toEqual({
      output_type: 'error',
      ename: 'E',
      evalue: 'v',
      traceback: ['t']
    });
    expect(outputFromMessage(msg('status', { execution_state: 'idle' }))).toBe(
      null
    );
  });

  it('collects the text of outputs for messages', () => {
    expect(
      outputsText([
        { output_type: 'stream', name: 'stdout', text: 'restored weights\n' },
        verdictOutput('COLD', 'new'),
        {
          output_type: 'error',
          ename: 'KeyError',
          evalue: "'x'",
          traceback: []
        }
      ])
    ).toBe("restored weights\n\nCOLD: new\nKeyError: 'x'");
  });
});
