// `npm run demo`: a local control plane, the AgentRun CRD, the operator, and the samples.
import { execFileSync, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const say = (line: string) => process.stdout.write(`\n== ${line}\n`);

say("starting the local control plane (the first run builds it from Go modules)");
const up = execFileSync("bash", [`${root}hack/control-plane.sh`, "up"], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
const kubeconfig = /export KUBECONFIG=(\S+)/.exec(up)?.[1] as string;
const env = { ...process.env, KUBECONFIG: kubeconfig };
const kubectl = (...args: string[]) => execFileSync("kubectl", args, { env, encoding: "utf8" });

say("installing the AgentRun CRD");
process.stdout.write(kubectl("apply", "--server-side", "--force-conflicts", "-f", `${root}crds/`));
kubectl("wait", "--for=condition=Established", "crd/agentruns.watchdog.dev");

say("starting the operator");
const operator = spawn(process.execPath, [`${root}operator/cli/operator.ts`, "--metrics-bind-address=0", "--health-probe-bind-address=0", "--log-level=warn"], { env, stdio: ["ignore", "ignore", "inherit"] });

say("applying the samples");
process.stdout.write(kubectl("apply", "-f", `${root}test/manifests/samples/`));
await new Promise((r) => setTimeout(r, 3000));

say("kubectl get agentruns");
process.stdout.write(kubectl("get", "agentruns", "-o", "wide"));
operator.kill("SIGTERM");
