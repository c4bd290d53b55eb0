// Lint: the recommended JavaScript and TypeScript rules, type-aware where it catches real bugs
// (floating promises in routes and actors), nothing stylistic.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/** A path out of console/ into the server's src/ or machines/, other than the API's view types. */
const CONSOLE_SERVER_IMPORT = '^(\\.\\./)+(machines/|src/(?!system/observe/console\\.types\\.js$))';
/** The same for a selector's regular expression, which cannot hold a slash. */
const CONSOLE_SERVER_SELECTOR = CONSOLE_SERVER_IMPORT.replaceAll('/', '\\x2F');
const CONSOLE_SERVER_MESSAGE = 'the console imports of the server only the admin API view types (src/system/observe/console.types.js)';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', '.tap/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts', '**/*.tsx'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: false }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
    },
  },
  {
    // tap's top-level t.test() calls are awaited by the runner itself.
    files: ['test/**/*.ts'],
    rules: { '@typescript-eslint/no-floating-promises': 'off' },
  },
  {
    files: ['machines/**/*.ts'],
    rules: {
      // STYLE.md: machines decide, adapters act. Nothing under machines/ touches the outside world.
      'no-restricted-imports': ['error', { patterns: ['fastify*', 'pino*', 'node:*', 'fs', 'child_process', 'execa'] }],
      'no-restricted-globals': ['error', 'process'],
    },
  },
  {
    // The console (a browser page) depends on the admin API, not on the server: of the server's
    // code it imports only the API's view types, from their one home. Imports are read as written
    // (a path that climbs out to src/ or machines/), static ones and import() alike.
    files: ['console/**/*.ts', 'console/**/*.tsx'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [{ regex: CONSOLE_SERVER_IMPORT, message: CONSOLE_SERVER_MESSAGE }] }],
      'no-restricted-syntax': [
        'error',
        { selector: `ImportExpression > Literal[value=/${CONSOLE_SERVER_SELECTOR}/]`, message: CONSOLE_SERVER_MESSAGE },
        { selector: `ImportExpression > TemplateLiteral > TemplateElement:first-child[value.raw=/${CONSOLE_SERVER_SELECTOR}/]`, message: CONSOLE_SERVER_MESSAGE },
      ],
    },
  },
  {
    // The examples run on Node as they are: its globals, and top-level await.
    files: ['examples/*.mjs'],
    languageOptions: {
      globals: { process: 'readonly', console: 'readonly', Buffer: 'readonly', fetch: 'readonly', setTimeout: 'readonly' },
    },
  },
  {
    files: ['bin/*.js', 'scripts/*.js', 'scripts/*.mjs', 'test/fixtures/*.mjs'],
    languageOptions: {
      globals: { process: 'readonly', console: 'readonly', URL: 'readonly', setInterval: 'readonly', clearInterval: 'readonly', setTimeout: 'readonly' },
    },
  },
  {
    // The nginx script (deploy/nginx/) runs in njs, nginx's JavaScript: its globals; njs 0.7 takes
    // no `catch` without a binding.
    files: ['deploy/nginx/*.js'],
    languageOptions: { globals: { Buffer: 'readonly', ngx: 'readonly' } },
    rules: { '@typescript-eslint/no-unused-vars': ['error', { caughtErrors: 'none' }] },
  },
);
