/// <reference types="node" />
import { ServerConnection } from '@jupyterlab/services';
import { CommandRegistry } from '@lumino/commands';
import Ajv2020 from 'ajv/dist/2020';
import * as fs from 'fs';
import * as path from 'path';
import * as React from 'react';
import { renderToStaticMarkup } from 'react-dom/server';

import { SuspendModel } from '../model';
import {
  SnapshotList,
  SnapshotRow,
  Snapshots,
  SnapshotsModel
} from '../snapshots';
import { SuspendPanel } from '../statusbar';
import { DEFAULT_SETTINGS, IStatus } from '../tokens';
import { statusRunning, statusSuspended, timeline } from './fixtures';
import { trans } from './helpers';

const SCHEMAS = path.join(
  __dirname,
  '..',
  '..',
  'jupyter_suspend',
  'common',
  'schemas'
);

/** The answers below are held to the server's schemas, as the server's are. */
const ajv = new Ajv2020({ allErrors: true, strict: true });
ajv.addFormat(
  'date-time',
  /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/
);
ajv.addKeyword('version');
ajv.addKeyword('personal-data');
for (const name of fs.readdirSync(SCHEMAS).sort()) {
  if (name.endsWith('.json')) {
    ajv.addSchema(
      JSON.parse(fs.readFileSync(path.join(SCHEMAS, name), 'utf8'))
    );
  }
}

function valid(ref: string, data: unknown): void {
  const validate = ajv.getSchema(
    `https://schema.jupyter.org/jupyter_suspend/api/v1/${ref}`
  )!;
  expect(validate(data) ? [] : validate.errors).toEqual([]);
}

function row(name: string, patch: Partial<SnapshotRow> = {}): SnapshotRow {
  return {
    name,
    created: '2026-12-03T10:00:00Z',
    age_seconds: 7200,
    size_bytes: null,
    policy: 'notebook-snapshots',
    ready: true,
    ready_reason: 'AllSnapshotsAvailable',
    last_access: '2026-12-03T10:00:05Z',
    trigger: `${name}-trigger`,
    deleting: false,
    would_restore: false,
    deletable: true,
    protected_because: null,
    ...patch
  };
}

function listing(rows: SnapshotRow[], state = 'running'): Snapshots {
  const answer = {
    supported: true,
    reason: null,
    backend: 'gke',
    state,
    pod: 'notebook-0',
    namespace: 'team-a',
    would_restore: rows.find(r => r.would_restore)?.name ?? null,
    snapshots: rows
  } as Snapshots;
  valid('snapshots.json', answer);
  return answer;
}

const UNSUPPORTED = {
  supported: false,
  reason:
    'The local backend keeps no snapshots: at a suspend the kernels stop and are restarted at resume.',
  backend: 'local',
  state: 'running',
  pod: null,
  namespace: null,
  would_restore: null,
  snapshots: []
} as Snapshots;

/** A server whose list the test sets; deletes take the row out. */
class FakeSnapshots {
  rows: SnapshotRow[] = [];
  fetches = 0;
  deleted: string[] = [];
  refuse: { status: number; message: string } | null = null;
  answers: boolean[] = [];
  asked: string[] = [];

  fetch = async (): Promise<Snapshots> => {
    this.fetches += 1;
    return listing(this.rows.map(r => ({ ...r })));
  };

  remove = async (
    name: string
  ): Promise<{ deleted: string; trigger: null }> => {
    if (this.refuse) {
      const response = new Response(
        JSON.stringify({ message: this.refuse.message }),
        { status: this.refuse.status }
      );
      throw new ServerConnection.ResponseError(response, this.refuse.message);
    }
    this.deleted.push(name);
    this.rows = this.rows.filter(r => r.name !== name);
    const answer = { deleted: name, trigger: null };
    valid('snapshot-deleted.json', answer);
    return answer;
  };

  confirm = async (r: SnapshotRow): Promise<boolean> => {
    this.asked.push(r.name);
    return this.answers.shift() ?? false;
  };

  model(): SnapshotsModel {
    return new SnapshotsModel({
      fetch: this.fetch,
      remove: this.remove,
      confirm: this.confirm
    });
  }
}

function render(model: SnapshotsModel): HTMLElement {
  const host = document.createElement('div');
  host.innerHTML = renderToStaticMarkup(
    <SnapshotList model={model} trans={trans} />
  );
  return host;
}

describe('SnapshotList', () => {
  it('shows name, age, size and Ready, and which one a resume uses', async () => {
    const server = new FakeSnapshots();
    server.rows = [
      row('notebook-0-new', {
        size_bytes: 5 * 2 ** 30,
        would_restore: true,
        deletable: false,
        protected_because:
          'it is the snapshot a resume restores, and the environment is suspended'
      }),
      row('notebook-0-up', {
        ready: false,
        ready_reason: 'AwaitingCheckpoint',
        age_seconds: 30
      })
    ];
    const model = server.model();
    expect(render(model).textContent).toContain('Loading snapshots…');
    await model.refresh();
    const rows = Array.from(
      render(model).querySelectorAll('tr.jp-suspend-snapshot')
    );
    const cells = rows.map(r =>
      Array.from(r.querySelectorAll('td')).map(td => td.textContent)
    );
    expect(cells).toEqual([
      [
        'notebook-0-new (resume uses it)',
        '2 h 00 min',
        '5.0 GiB',
        'Ready',
        'Delete'
      ],
      ['notebook-0-up', '30 s', '—', 'not ready (AwaitingCheckpoint)', 'Delete']
    ]);
    const [protectedButton, freeButton] = rows.map(
      r => r.querySelector('button') as HTMLButtonElement
    );
    expect(protectedButton.disabled).toBe(true);
    expect(protectedButton.title).toContain('a resume restores');
    expect(freeButton.disabled).toBe(false);
  });

  it('says why a backend has none instead of an empty list', async () => {
    const model = new SnapshotsModel({
      fetch: async () => UNSUPPORTED,
      remove: async () => {
        throw new Error('never called');
      },
      confirm: async () => true
    });
    valid('snapshots.json', UNSUPPORTED);
    await model.refresh();
    const host = render(model);
    expect(host.querySelector('table')).toBe(null);
    expect(host.querySelector('.jp-suspend-snapshots-note')?.textContent).toBe(
      UNSUPPORTED.reason
    );
  });

  it('shows a failed fetch', async () => {
    const model = new SnapshotsModel({
      fetch: async () => {
        throw new Error('the sidecar does not answer');
      },
      remove: async () => ({ deleted: 'x', trigger: null }),
      confirm: async () => true
    });
    await model.refresh();
    expect(render(model).textContent).toContain(
      'Snapshots could not be listed: the sidecar does not answer'
    );
  });
});

describe('SnapshotsModel.remove', () => {
  it('deletes nothing unless the user confirms', async () => {
    const server = new FakeSnapshots();
    server.rows = [row('notebook-0-a')];
    const model = server.model();
    await model.refresh();
    server.answers = [false];
    expect(await model.remove(model.listing!.snapshots[0])).toBe(false);
    expect(server.asked).toEqual(['notebook-0-a']);
    expect(server.deleted).toEqual([]);
    expect(server.fetches).toBe(1);
  });

  it('deletes after the confirmation and shows the list the server has then', async () => {
    const server = new FakeSnapshots();
    server.rows = [row('notebook-0-a'), row('notebook-0-b')];
    const model = server.model();
    await model.refresh();
    server.answers = [true];
    const states: (string | null)[] = [];
    model.stateChanged.connect(() => states.push(model.deleting));
    expect(await model.remove(model.listing!.snapshots[1])).toBe(true);
    expect(server.deleted).toEqual(['notebook-0-b']);
    expect(states).toContain('notebook-0-b'); // the row said "Deleting…" meanwhile
    expect(model.deleting).toBe(null);
    expect(server.fetches).toBe(2);
    expect(model.listing!.snapshots.map(r => r.name)).toEqual(['notebook-0-a']);
    expect(model.error).toBe(null);
  });

  it('never asks about a protected snapshot', async () => {
    const server = new FakeSnapshots();
    server.rows = [row('notebook-0-a', { deletable: false })];
    const model = server.model();
    await model.refresh();
    server.answers = [true];
    expect(await model.remove(model.listing!.snapshots[0])).toBe(false);
    expect(server.asked).toEqual([]);
    expect(server.deleted).toEqual([]);
  });

  it("shows the server's refusal and keeps the row", async () => {
    const server = new FakeSnapshots();
    server.rows = [row('notebook-0-a')];
    const model = server.model();
    await model.refresh();
    server.answers = [true];
    server.refuse = {
      status: 409,
      message:
        'snapshot notebook-0-a is not deleted: it is the snapshot a resume restores, and the environment is suspended.'
    };
    expect(await model.remove(model.listing!.snapshots[0])).toBe(false);
    expect(model.error).toBe(`409: ${server.refuse.message}`);
    expect(model.listing!.snapshots.map(r => r.name)).toEqual(['notebook-0-a']);
    expect(
      render(model).querySelector('.jp-suspend-snapshots-error')?.textContent
    ).toContain('a resume restores');
  });

  it('shares one request between concurrent refreshes', async () => {
    const server = new FakeSnapshots();
    const model = server.model();
    await Promise.all([model.refresh(), model.refresh(), model.refresh()]);
    expect(server.fetches).toBe(1);
  });
});

function flush(): Promise<void> {
  return new Promise(resolve => setTimeout(resolve, 0));
}

describe('SuspendPanel snapshots', () => {
  it('fetches when it opens and when the state changes, with no timer of its own', async () => {
    let status: IStatus = statusRunning();
    const model = new SuspendModel({
      fetchStatus: async () => JSON.parse(JSON.stringify(status)),
      fetchTimeline: async () => timeline(),
      interval: 60_000
    });
    await model.refresh();
    const server = new FakeSnapshots();
    const panel = new SuspendPanel(model, {
      trans,
      settings: () => DEFAULT_SETTINGS,
      commands: new CommandRegistry(),
      snapshots: {
        fetch: server.fetch,
        remove: server.remove,
        confirm: server.confirm
      }
    });
    await panel.snapshots.refresh();
    expect(server.fetches).toBe(1); // the open, shared with the refresh above
    await model.refresh(); // a poll tick, same state: nothing fetched
    expect(server.fetches).toBe(1);
    status = statusSuspended();
    await model.refresh();
    await flush();
    expect(server.fetches).toBe(2);
    panel.dispose();
    status = statusRunning();
    await model.refresh(); // closed: nothing fetched
    await flush();
    expect(server.fetches).toBe(2);
    model.dispose();
  });
});
