// A caller with exactly the permissions a test or the demo means to give: a ServiceAccount bound
// to a Role of its own, and a token the API server issued for it. Made once; made again it is reused.
import { isAlreadyExists, type Json, type KubeClient } from "../operator/kube/client.ts";

/** A token (valid an hour) of ServiceAccount `name` in `namespace`, bound to a Role `name` with `rules`. */
export async function serviceAccountToken(client: KubeClient, namespace: string, name: string, rules: Json[]): Promise<string> {
  const rbac = `/apis/rbac.authorization.k8s.io/v1/namespaces/${namespace}`;
  const ensure = (path: string, body: Json) =>
    client.create(path, body).catch((err: unknown) => {
      if (!isAlreadyExists(err)) throw err;
    });
  await ensure(`/api/v1/namespaces/${namespace}/serviceaccounts`, { apiVersion: "v1", kind: "ServiceAccount", metadata: { name } });
  await ensure(`${rbac}/roles`, { apiVersion: "rbac.authorization.k8s.io/v1", kind: "Role", metadata: { name }, rules });
  await ensure(`${rbac}/rolebindings`, {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "RoleBinding",
    metadata: { name },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
    subjects: [{ kind: "ServiceAccount", name, namespace }],
  });
  const issued = await client.create<{ status: { token: string } }>(`/api/v1/namespaces/${namespace}/serviceaccounts/${name}/token`, {
    apiVersion: "authentication.k8s.io/v1",
    kind: "TokenRequest",
    spec: { expirationSeconds: 3600 },
  });
  return issued.status.token;
}
