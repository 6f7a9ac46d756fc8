// Builds the console's browser UI: `vite build --config operator/console/ui/vite.config.ts`.
// Output: operator/console/ui/dist/ (index.html + hashed assets), or the absolute directory in
// CONSOLE_OUT_DIR (the npm pack build writes it elsewhere). base "./" keeps every asset URL
// relative, so the app works under any path prefix the server mounts it at.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

const root = fileURLToPath(new URL(".", import.meta.url));

export default defineConfig({
  root,
  base: "./",
  publicDir: false,
  logLevel: "info",
  oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
  build: {
    outDir: process.env.CONSOLE_OUT_DIR || fileURLToPath(new URL("./dist", import.meta.url)),
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    reportCompressedSize: true,
    // One small app: a single script and stylesheet, nothing inlined as data: URLs.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
  },
});
