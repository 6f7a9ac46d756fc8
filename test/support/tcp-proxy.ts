// The TCP proxy of harness/, pointed at the test control plane by default.
import { startApiProxy as startProxyTo, startTcpProxy, type TcpProxy } from "../../harness/tcp-proxy.ts";
import { kubeconfigPath } from "./cluster.ts";

export { startTcpProxy, type TcpProxy };

/** Starts a proxy to the API server of the test kubeconfig. */
export const startApiProxy = (): Promise<TcpProxy> => startProxyTo(kubeconfigPath());
