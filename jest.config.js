const jestJupyterLab = require('@jupyterlab/testing/lib/jest-config');

// ES modules in node_modules that Jest must transform (as in the JupyterLab
// extension template).
const esModules = [
  '@codemirror',
  '@jupyter/ydoc',
  '@jupyter/react-components',
  '@jupyter/web-components',
  '@jupyterlab/',
  '@lumino/',
  '@marijn',
  '@microsoft',
  'color',
  'exenv-es6',
  'lib0',
  'marked',
  'nanoid',
  'vscode-ws-jsonrpc',
  'y-protocols',
  'y-websocket',
  'yjs'
].join('|');

const baseConfig = jestJupyterLab(__dirname);

module.exports = {
  ...baseConfig,
  automock: false,
  roots: ['<rootDir>/src'],
  modulePathIgnorePatterns: [
    '<rootDir>/.venv',
    '<rootDir>/jupyter_suspend/labextension',
    '<rootDir>/ui-tests'
  ],
  collectCoverageFrom: [
    'src/**/*.{ts,tsx}',
    '!src/**/*.d.ts',
    '!src/**/__tests__/**'
  ],
  coverageReporters: ['lcov', 'text'],
  reporters: ['default'],
  testRegex: 'src/.*/.*.spec.ts[x]?$',
  transformIgnorePatterns: [`/node_modules/(?!${esModules}).*`]
};
