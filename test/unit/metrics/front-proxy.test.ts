// Who the API server vouches for, and when that counts: the headers name a user only on a
// connection that showed an allowed front-proxy certificate.
import { describe, expect, it } from "vitest";
import { frontProxyCaller, frontProxyTrust, type FrontProxyTrust } from "../../../operator/metrics/front-proxy.ts";

const PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
const trust: FrontProxyTrust = {
  clientCa: PEM,
  allowedNames: ["front-proxy-client"],
  usernameHeaders: ["X-Remote-User"],
  groupHeaders: ["X-Remote-Group"],
  extraHeaderPrefixes: ["X-Remote-Extra-"],
};

/** A request as node:https hands it over: its headers and the TLS socket's verdict. */
function request(headers: Record<string, string | string[]>, socket: { authorized?: boolean; cn?: string } | undefined) {
  return {
    headers,
    socket: socket && ({ authorized: socket.authorized, getPeerCertificate: () => ({ subject: { CN: socket.cn } }) } as never),
  };
}

describe("the front proxy's trust, from extension-apiserver-authentication", () => {
  it("reads the CA and the header names as the API server writes them", () => {
    expect(
      frontProxyTrust({
        "requestheader-client-ca-file": PEM,
        "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]',
        "requestheader-group-headers": '["X-Remote-Group"]',
        "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
      }),
    ).toEqual(trust);
  });

  it("is none without a request-header CA, and a malformed list counts as empty", () => {
    expect(frontProxyTrust(undefined)).toBeUndefined();
    expect(frontProxyTrust({ "client-ca-file": PEM })).toBeUndefined();
    expect(frontProxyTrust({ "requestheader-client-ca-file": PEM, "requestheader-allowed-names": "not json" })?.allowedNames).toEqual([]);
  });
});

describe("the caller the front proxy names", () => {
  const claims = { "x-remote-user": "alice", "x-remote-group": ["dev", "ops,audit"], "x-remote-extra-scopes": "a", "x-remote-extra-acme.com%2fproject": "p1" };

  it("is the user, groups and extra the headers carry, on a connection with the allowed certificate", () => {
    expect(frontProxyCaller(request(claims, { authorized: true, cn: "front-proxy-client" }), trust)).toEqual({
      username: "alice",
      groups: ["dev", "ops", "audit"],
      extra: { scopes: ["a"], "acme.com/project": ["p1"] },
    });
  });

  it("is nobody on a plain connection, an unverified certificate, or another common name", () => {
    expect(frontProxyCaller(request(claims, undefined), trust)).toBeUndefined();
    expect(frontProxyCaller(request(claims, { authorized: false, cn: "front-proxy-client" }), trust)).toBeUndefined();
    expect(frontProxyCaller(request(claims, { authorized: true, cn: "someone-else" }), trust)).toBeUndefined();
    // An empty list of names allows any certificate of the CA.
    expect(frontProxyCaller(request(claims, { authorized: true, cn: "someone-else" }), { ...trust, allowedNames: [] })?.username).toBe("alice");
  });

  it("is nobody when the certificate is right but no user is named", () => {
    expect(frontProxyCaller(request({ "x-remote-group": "dev" }, { authorized: true, cn: "front-proxy-client" }), trust)).toBeUndefined();
  });
});
