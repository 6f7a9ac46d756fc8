// Writes crds/ from the zod schemas in operator/api. Run `npm run generate` after changing them;
// a unit test fails while the committed YAML is stale.
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { renderCrdFiles } from "../operator/api/crd-yaml.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
for (const [relative, text] of Object.entries(renderCrdFiles())) {
  writeFileSync(root + relative, text);
  console.error(`wrote ${relative}`);
}
