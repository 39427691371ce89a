/**
 * The plugin's modules import each other without a cycle (commands ↔ flows
 * was one): every module can be read, and tested, after the ones it uses.
 */
/// <reference types="node" />
import * as fs from 'fs';
import * as path from 'path';

const SRC = path.resolve(__dirname, '..');

/** Relative imports of every module in `src/` (type-only ones too). */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  const modules = fs
    .readdirSync(SRC)
    .filter(name => /\.tsx?$/.test(name) && !name.endsWith('.d.ts'));
  const resolve = (spec: string): string | null => {
    for (const ext of ['.ts', '.tsx']) {
      const name = path.basename(spec) + ext;
      if (modules.includes(name)) {
        return name;
      }
    }
    return null;
  };
  for (const name of modules) {
    const source = fs.readFileSync(path.join(SRC, name), 'utf8');
    const imports = new Set<string>();
    const pattern =
      /\b(?:import|export)\b[^'";]*?\bfrom\s+['"](\.\/[^'"]+)['"]/g;
    for (const match of source.matchAll(pattern)) {
      const target = resolve(match[1]);
      if (target) {
        imports.add(target);
      }
    }
    graph.set(name, Array.from(imports));
  }
  return graph;
}

/** One cycle of `graph`, as the list of modules around it, or null. */
function findCycle(graph: Map<string, string[]>): string[] | null {
  const done = new Set<string>();
  const stack: string[] = [];
  const visit = (name: string): string[] | null => {
    const at = stack.indexOf(name);
    if (at >= 0) {
      return [...stack.slice(at), name];
    }
    if (done.has(name)) {
      return null;
    }
    stack.push(name);
    for (const next of graph.get(name) ?? []) {
      const cycle = visit(next);
      if (cycle) {
        return cycle;
      }
    }
    stack.pop();
    done.add(name);
    return null;
  };
  for (const name of graph.keys()) {
    const cycle = visit(name);
    if (cycle) {
      return cycle;
    }
  }
  return null;
}

describe('module imports', () => {
  it('finds the imports it looks for', () => {
    const graph = importGraph();
    expect(graph.get('commands.ts')).toContain('flows.ts');
    expect(graph.get('index.ts')).toContain('reconnect.ts');
    // The checker itself finds a cycle when there is one.
    expect(
      findCycle(
        new Map([
          ['a.ts', ['b.ts']],
          ['b.ts', ['a.ts']]
        ])
      )
    ).toEqual(['a.ts', 'b.ts', 'a.ts']);
  });

  it('has no cycle', () => {
    expect(findCycle(importGraph())).toBe(null);
  });
});
