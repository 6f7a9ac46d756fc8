// The project image's SBOM, as a security reviewer reads it: hack/images.sh has syft write SPDX
// JSON from the built image, and it names what the image runs on (the base's Debian packages, the
// Node binary) and every production dependency at the version the lockfile pins, and nothing of
// the development dependencies, which never enter the image.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { beforeAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));

interface SpdxPackage {
  name: string;
  versionInfo?: string;
  externalRefs?: { referenceType: string; referenceLocator: string }[];
}
interface Spdx {
  spdxVersion: string;
  name: string;
  creationInfo: { creators: string[] };
  packages: SpdxPackage[];
}

const purls = (p: SpdxPackage) => (p.externalRefs ?? []).filter((r) => r.referenceType === "purl").map((r) => r.referenceLocator);

describe("the project image's SBOM", () => {
  let sbom: Spdx;
  let image: string;
  const lock = JSON.parse(readFileSync(`${root}package-lock.json`, "utf8")) as { packages: Record<string, { version?: string; dev?: boolean; devOptional?: boolean; optional?: boolean; peer?: boolean }> };

  beforeAll(() => {
    // The image and its SBOM are cached by their inputs: after the suite's setup this only reads them.
    const built = spawnSync("bash", [`${root}hack/images.sh`, "--no-import", "--sbom"], { encoding: "utf8", timeout: 1_200_000 });
    expect(built.status, built.stderr.slice(-2000)).toBe(0);
    const lines = built.stdout.trim().split("\n");
    image = lines[0] ?? "";
    sbom = JSON.parse(readFileSync(lines.at(-1) ?? "", "utf8")) as Spdx;
  }, 1_200_000);

  it("is SPDX, written by syft, about this build of the image", () => {
    expect(sbom.spdxVersion).toBe("SPDX-2.3");
    expect(sbom.creationInfo.creators.some((c) => /^Tool: syft-\d+\.\d+\.\d+$/.test(c)), sbom.creationInfo.creators.join(", ")).toBe(true);
    expect(sbom.name).toBe(image.slice(0, image.lastIndexOf(":")));
  });

  // Optional and peer packages (the SDK's framework adapters) are the user's to install.
  it("lists every required production dependency at the version the lockfile pins, and no development one", () => {
    // name@version of each npm package: a name may be there at several versions, nested.
    const npm = new Set(sbom.packages.flatMap((p) => purls(p).filter((u) => u.startsWith("pkg:npm/")).map((u) => decodeURIComponent(u.slice("pkg:npm/".length)))));
    const names = new Set([...npm].map((id) => id.slice(0, id.lastIndexOf("@"))));
    const production = Object.entries(lock.packages).filter(([path, p]) => path.startsWith("node_modules/") && !p.dev && !p.devOptional && !p.optional && !p.peer && p.version);
    expect(production.length).toBeGreaterThan(20);
    for (const [path, p] of production) {
      const name = path.slice(path.lastIndexOf("node_modules/") + "node_modules/".length);
      // Type declarations are of no use at run time: the Dockerfile deletes the top-level ones.
      if (name.startsWith("@types/")) continue;
      expect(npm.has(`${name}@${p.version}`), `${name}@${p.version}`).toBe(true);
    }
    for (const dev of ["vitest", "typescript", "eslint", "node"]) expect(names.has(dev), dev).toBe(false);
  });

  it("lists the base's Debian packages, named for their distribution, and the Node runtime", () => {
    const debs = sbom.packages.filter((p) => purls(p).some((u) => u.startsWith("pkg:deb/debian/") && u.includes("distro=debian-12")));
    expect(debs.map((p) => p.name)).toEqual(expect.arrayContaining(["libc6", "libstdc++6", "ca-certificates", "tzdata"]));
    const lockedNode = lock.packages["node_modules/node"]?.version;
    expect(sbom.packages.some((p) => p.name === "node" && p.versionInfo === lockedNode), `node ${lockedNode}`).toBe(true);
  });
});
