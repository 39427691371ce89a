/// <reference types="node" />
/**
 * The plugin and the server read the same API contract: every recorded
 * answer in `fixtures.json` and every variant `fixtures.ts` builds from them
 * validates against the JSON schemas in `jupyter_suspend/common/schemas/`
 * (the ones the Python tests hold every server answer to), and the types in
 * `src/_generated/schemas.ts` are what those schemas generate now.
 */
import Ajv2020, { ValidateFunction } from 'ajv/dist/2020';
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';

import type * as api from '../_generated/schemas';
import { ILifecycleEvent, IVerdict, STATES } from '../tokens';
import recorded from './fixtures.json';
import {
  operation,
  preflight,
  startedSuspend,
  statusIn,
  statusReadyCold,
  statusRunning,
  statusSuspended,
  step,
  timeline
} from './fixtures';

const ROOT = path.join(__dirname, '..', '..');
const SCHEMAS = path.join(ROOT, 'jupyter_suspend', 'common', 'schemas');
const BASE = 'https://schema.jupyter.org/jupyter_suspend/api/v1/';

/** ISO 8601 with a UTC offset, as `utc_iso` writes it. */
const DATE_TIME =
  /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

function loadSchemas(): Ajv2020 {
  const ajv = new Ajv2020({ allErrors: true, strict: true });
  ajv.addFormat('date-time', DATE_TIME);
  // jupyter_events keywords of lifecycle-event.json
  ajv.addKeyword('version');
  ajv.addKeyword('personal-data');
  for (const name of fs.readdirSync(SCHEMAS).sort()) {
    if (name.endsWith('.json')) {
      ajv.addSchema(
        JSON.parse(fs.readFileSync(path.join(SCHEMAS, name), 'utf8'))
      );
    }
  }
  return ajv;
}

const ajv = loadSchemas();

function validator(ref: string): ValidateFunction {
  const validate = ajv.getSchema(BASE + ref);
  if (!validate) {
    throw new Error(`no schema ${ref}`);
  }
  return validate;
}

function expectValid(ref: string, data: unknown): void {
  const validate = validator(ref);
  const ok = validate(data);
  // The errors in the message say what drifted.
  expect(ok ? [] : validate.errors).toEqual([]);
}

/** The schema of each recorded answer, by its key in fixtures.json. */
function schemaOf(key: string): string {
  const rules: [RegExp, string][] = [
    [/^status_/, 'status.json'],
    [/^preflight/, 'preflight.json'],
    [/^started_/, 'operation.json'],
    [/^timeline/, 'timeline.json'],
    [/^verify_/, 'verify-response.json'],
    [/^error_/, 'error.json'],
    [/^openapi$/, 'openapi']
  ];
  const rule = rules.find(([pattern]) => pattern.test(key));
  if (!rule) {
    throw new Error(`fixtures.json: no schema for the answer ${key}`);
  }
  return rule[1];
}

describe('the API contract', () => {
  it('compiles every schema, all of draft 2020-12 with an $id', () => {
    const names = fs
      .readdirSync(SCHEMAS)
      .filter((n: string) => n.endsWith('.json'));
    expect(names).toEqual(
      expect.arrayContaining([
        'status.json',
        'preflight.json',
        'operation.json',
        'timeline.json',
        'verify-response.json',
        'error.json',
        'lifecycle-event.json'
      ])
    );
    for (const name of names) {
      const schema = JSON.parse(
        fs.readFileSync(path.join(SCHEMAS, name), 'utf8')
      );
      expect(schema.$id).toBeTruthy();
      if (name !== 'lifecycle-event.json') {
        expect(schema.$id).toBe(BASE + name);
        expect(schema.$schema).toBe(
          'https://json-schema.org/draft/2020-12/schema'
        );
      }
      expect(ajv.getSchema(schema.$id)).toBeDefined();
    }
  });

  it.each(Object.keys(recorded))(
    'holds the recorded answer %s to its schema',
    key => {
      const ref = schemaOf(key);
      const answer = (recorded as Record<string, unknown>)[key];
      if (ref === 'openapi') {
        expect((answer as { openapi: string }).openapi).toBe('3.1.0');
      } else {
        expectValid(ref, answer);
      }
    }
  );

  it('holds the variants fixtures.ts builds to the same schemas', () => {
    for (const state of STATES) {
      expectValid('status.json', statusIn(state));
    }
    expectValid('status.json', statusRunning());
    expectValid('status.json', statusSuspended());
    expectValid('status.json', statusReadyCold());
    expectValid('preflight.json', preflight());
    expectValid('operation.json', startedSuspend());
    expectValid('timeline.json', timeline());
    for (const status of ['running', 'ok', 'failed', 'skipped'] as const) {
      expectValid('operation.json#/$defs/step', step('flush.kernels', status));
    }
    for (const kind of ['suspend', 'resume', 'checkpoint'] as const) {
      expectValid(
        'operation.json#/$defs/operation',
        operation(kind, [step('restore', 'ok')], false)
      );
    }
  });

  it('reads every current answer with the hand-written types it keeps', () => {
    // The verdict a notebook output keeps (the answer of POST verify, maybe
    // from an older version) and the event the bus delivers stay looser than
    // the schemas; ts-jest type-checks that they still accept current ones.
    const verdict: IVerdict = recorded.verify_cold as api.Verification;
    const event: ILifecycleEvent = {
      schema_id: 'https://schema.jupyter.org/jupyter_suspend/lifecycle/v1',
      state: 'suspended',
      previous_state: 'snapshotting',
      backend: 'local'
    };
    expect(verdict.verdict).toBe('COLD');
    expectValid('verify-response.json', verdict);
    const { schema_id, ...data } = event;
    expect(schema_id).toContain('lifecycle');
    expect(
      ajv.validate(
        'https://schema.jupyter.org/jupyter_suspend/lifecycle/v1',
        data
      )
    ).toBe(true);
  });

  it('lists the states the schema lists', () => {
    const status = JSON.parse(
      fs.readFileSync(path.join(SCHEMAS, 'status.json'), 'utf8')
    );
    expect([...STATES]).toEqual(status.$defs.state.enum);
  });

  it('rejects an answer that drifted from its schema', () => {
    const status = statusRunning() as unknown as Record<string, unknown>;
    delete status.can_suspend;
    status.surprise = 1;
    const validate = validator('status.json');
    expect(validate(status)).toBe(false);
    const messages = (validate.errors ?? []).map(e => e.message).join('; ');
    expect(messages).toContain("must have required property 'can_suspend'");
    expect(messages).toContain('must NOT have additional properties');
  });

  it('generates src/_generated/schemas.ts from the schemas as committed', () => {
    // Exits 1 (and execFileSync throws) when the committed file is stale.
    const run = (): Buffer =>
      execFileSync(
        process.execPath,
        [path.join(ROOT, 'scripts', 'schema-types.mjs'), '--check'],
        { cwd: ROOT, stdio: 'pipe' }
      );
    expect(run).not.toThrow();
  });
});
