// The console is served by `ator serve` at /ui; the build goes into the Python package.
import { defineConfig } from "vite";

export default defineConfig({
  base: "/ui/",
  build: {
    outDir: "../src/ator/web/dist",
    emptyOutDir: true,
    sourcemap: false,
  },
  server: { proxy: { "/v1": "http://127.0.0.1:8080", "/socket.io": { target: "http://127.0.0.1:8080", ws: true } } },
});
