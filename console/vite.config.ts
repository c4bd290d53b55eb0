// The operator console's build: Vite bundles console/src into dist/console, which the admin
// listener serves. No inline script, no remote origin: the page runs under a strict CSP.
import { defineConfig } from 'vite';

export default defineConfig({
  root: import.meta.dirname,
  base: '/',
  publicDir: false,
  build: {
    outDir: '../dist/console',
    emptyOutDir: true,
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    reportCompressedSize: true,
  },
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  // `npm run console:dev`: the page with hot reload against a service on the default admin port.
  server: { proxy: { '/api': 'http://127.0.0.1:8110' } },
});
