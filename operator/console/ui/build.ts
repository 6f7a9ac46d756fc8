// Builds the console's pages once, in a clone, when `kubectl agentrun console` finds none: what
// `npm run build:console` does. Vite is a devDependency, so this lives beside the recipe, outside
// what the operator's image imports; the package ships the pages built.
import { fileURLToPath } from "node:url";
import { build } from "vite";

export const UI_BUILD_CONFIG = fileURLToPath(new URL("./vite.config.ts", import.meta.url));

export async function buildPages(): Promise<void> {
  await build({ configFile: UI_BUILD_CONFIG, logLevel: "warn" });
}
