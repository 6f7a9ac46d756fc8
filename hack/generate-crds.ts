// Writes crds/ and the chart's generated templates (CRD, sandbox fencing policy) from the zod
// schemas in operator/api. Run `npm run generate` after changing them; a unit test fails while
// the committed files are stale.
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { renderCrdFiles } from "../operator/api/crd-yaml.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
for (const [relative, text] of Object.entries(renderCrdFiles())) {
  mkdirSync(dirname(root + relative), { recursive: true });
  writeFileSync(root + relative, text);
  console.error(`wrote ${relative}`);
}
