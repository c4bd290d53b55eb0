// Lint: the recommended JavaScript and TypeScript rules, type-aware where it catches real bugs
// (floating promises in routes and actors), nothing stylistic.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

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
