"""Credentials: kubeconfig files (YAML as kubectl and the project's control plane write them, or
JSON), the inline JSON variable, in-cluster service accounts, and TLS with client certificates
against a local HTTPS server."""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import textwrap
import unittest

from agent_watchdog import ApiClient, ApiError, ClusterConfig, KubeConfigError, in_cluster_config, load_config, load_kubeconfig, parse_yaml

from fake_apiserver import FakeApiServer

# As hack/control-plane.sh writes it (write_kubeconfig), with the embedded data replaced.
CONTROL_PLANE_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: agent-watchdog
  cluster:
    server: https://127.0.0.1:24837
    certificate-authority-data: {ca}
users:
- name: agent-watchdog-admin
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: agent-watchdog
  context:
    cluster: agent-watchdog
    user: agent-watchdog-admin
    namespace: default
current-context: agent-watchdog
"""

# As kubectl config view --raw writes one (indented sequences, quoted values, comments, {}).
KUBECTL_STYLE = """\
# written by kubectl
apiVersion: v1
clusters:
  - cluster:
      insecure-skip-tls-verify: true
      server: "https://example.invalid:6443"  # the server
      tls-server-name: 'api.internal'
    name: other
  - cluster:
      certificate-authority: pki/ca.crt
      server: https://127.0.0.1:6443
    name: kind-kind
contexts:
- context:
    cluster: kind-kind
    namespace: agents
    user: kind-kind
  name: kind-kind
current-context: kind-kind
kind: Config
preferences: {}
users:
- name: kind-kind
  user:
    client-certificate: pki/client.crt
    client-key: /abs/client.key
- name: tokens
  user:
    token: abc.def
"""


class YamlTest(unittest.TestCase):
    def test_control_plane_layout(self) -> None:
        doc = parse_yaml(CONTROL_PLANE_KUBECONFIG.format(ca="Q0E=", cert="Q0VSVA==", key="S0VZ"))
        self.assertEqual(doc["clusters"], [{"name": "agent-watchdog", "cluster": {"server": "https://127.0.0.1:24837", "certificate-authority-data": "Q0E="}}])
        self.assertEqual(doc["contexts"][0]["context"]["namespace"], "default")
        self.assertEqual(doc["current-context"], "agent-watchdog")

    def test_kubectl_layout(self) -> None:
        doc = parse_yaml(KUBECTL_STYLE)
        self.assertEqual(doc["clusters"][0]["cluster"], {"insecure-skip-tls-verify": True, "server": "https://example.invalid:6443", "tls-server-name": "api.internal"})
        self.assertEqual(doc["preferences"], {})
        self.assertEqual(doc["users"][1], {"name": "tokens", "user": {"token": "abc.def"}})

    def test_scalars_and_blocks(self) -> None:
        doc = parse_yaml(textwrap.dedent("""\
            a: |
              one
              two
            b: >-
              folded
              text
            c: "tab\\there \\u00e9"
            d: 'it''s'
            e: [1, "two", {x: y}]
            f: ~
            g: 0123
            h: 12
            """))
        self.assertEqual(doc, {"a": "one\ntwo\n", "b": "folded text", "c": "tab\there é", "d": "it's", "e": [1, "two", {"x": "y"}], "f": None, "g": "0123", "h": 12})

    def test_refuses_what_it_does_not_read(self) -> None:
        for text in ("a: &x 1\nb: *x\n", "a: !!binary abc\n", "a: [1,\n  2]\n", "a: b\n  c: d\n"):
            with self.subTest(text=text), self.assertRaises(KubeConfigError):
                parse_yaml(text)


class LoadTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp()

    def tearDown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def write(self, name: str, text: str) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def test_yaml_file_with_relative_paths(self) -> None:
        path = self.write("config", KUBECTL_STYLE)
        config = load_kubeconfig([path])
        self.assertEqual(config.server, "https://127.0.0.1:6443")
        self.assertEqual(config.ca_file, os.path.join(self.dir, "pki", "ca.crt"))
        self.assertEqual(config.client_cert_file, os.path.join(self.dir, "pki", "client.crt"))
        self.assertEqual(config.client_key_file, "/abs/client.key")
        self.assertEqual(config.namespace, "agents")

    def test_embedded_data_is_decoded(self) -> None:
        text = CONTROL_PLANE_KUBECONFIG.format(ca=base64.b64encode(b"CA").decode(), cert=base64.b64encode(b"CERT").decode(), key=base64.b64encode(b"KEY").decode())
        config = load_kubeconfig([self.write("kubeconfig", text)])
        self.assertEqual((config.ca_data, config.client_cert_data, config.client_key_data), (b"CA", b"CERT", b"KEY"))

    def test_json_file_env_var_and_merging(self) -> None:
        doc = {
            "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
            "users": [{"name": "u", "user": {"token": "t0k"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
        config = load_config({"AGENT_WATCHDOG_KUBECONFIG_JSON": json.dumps(doc)})
        self.assertEqual((config.server, config.authorization()), ("http://127.0.0.1:1", "Bearer t0k"))
        first = self.write("a.json", json.dumps({"current-context": "x"}))
        second = self.write("b.json", json.dumps({**doc, "current-context": "ignored"}))
        config = load_config({"KUBECONFIG": os.pathsep.join([first, os.path.join(self.dir, "missing"), second])})
        self.assertEqual(config.authorization(), "Bearer t0k")

    def test_refuses_plugins_and_missing_credentials(self) -> None:
        doc = {
            "clusters": [{"name": "c", "cluster": {"server": "https://x"}}],
            "users": [{"name": "u", "user": {"exec": {"command": "gke-gcloud-auth-plugin"}}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
        with self.assertRaisesRegex(KubeConfigError, "exec"):
            load_kubeconfig([self.write("exec.json", json.dumps(doc))])
        with self.assertRaisesRegex(KubeConfigError, "no credentials"):
            load_config({"HOME": self.dir})

    def test_in_cluster_token_is_read_again(self) -> None:
        sa = os.path.join(self.dir, "sa")
        os.makedirs(sa)
        self.write("sa/token", "first\n")
        self.write("sa/namespace", "agents")
        self.assertIsNone(in_cluster_config({}, sa))
        config = in_cluster_config({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, sa)
        assert config is not None
        self.assertEqual((config.server, config.namespace, config.ca_file), ("https://[fd00::1]:443", "agents", None))
        self.assertEqual(config.authorization(), "Bearer first")
        self.write("sa/token", "second\n")
        self.assertEqual(config.authorization(), "Bearer first")  # within the TTL
        self.assertEqual(config.authorization(refresh=True), "Bearer second")  # after a 401


def _openssl(*args: str, cwd: str) -> None:
    subprocess.run(["nice", "-n", "19", "openssl", *args], cwd=cwd, check=True, capture_output=True)


@unittest.skipUnless(shutil.which("openssl"), "needs the openssl command to make test certificates")
class TlsTest(unittest.TestCase):
    """A real TLS handshake with a CA, a server certificate and a client certificate."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.dir = tempfile.mkdtemp()
        d = cls.dir
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=test-ca", "-days", "2",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
        for name, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"), ("client", "extendedKeyUsage=clientAuth\n")):
            with open(os.path.join(d, f"{name}.ext"), "w") as f:
                f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nauthorityKeyIdentifier=keyid\n" + ext)
            _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
            _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                     "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.dir, ignore_errors=True)

    def server(self, require_client_cert: bool) -> FakeApiServer:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(self.dir, "server.crt"), os.path.join(self.dir, "server.key"))
        if require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(os.path.join(self.dir, "ca.crt"))
        fake = FakeApiServer(tls=ctx).start()
        self.addCleanup(fake.stop)
        return fake

    def client(self, config: ClusterConfig) -> ApiClient:
        client = ApiClient(config)
        self.addCleanup(client.close)
        return client

    def read(self, name: str) -> str:
        with open(os.path.join(self.dir, name), encoding="ascii") as f:
            return f.read()

    def test_client_certificate_data_from_a_yaml_kubeconfig(self) -> None:
        fake = self.server(require_client_cert=True)
        b64 = lambda name: base64.b64encode(self.read(name).encode()).decode()  # noqa: E731
        text = CONTROL_PLANE_KUBECONFIG.format(ca=b64("ca.crt"), cert=b64("client.crt"), key=b64("client.key")).replace("https://127.0.0.1:24837", fake.url)
        path = os.path.join(self.dir, "kubeconfig")
        with open(path, "w") as f:
            f.write(text)
        client = self.client(load_config({"KUBECONFIG": path}))
        run = client.get("/apis/watchdog.dev/v1alpha1/namespaces/ns/agentruns/r")
        self.assertEqual(run["metadata"]["uid"], "uid-r")
        self.assertEqual([f for f in os.listdir(self.dir) if f.startswith("agent-watchdog-")], [])  # temp files gone

    def test_certificate_files_and_a_token_that_rotates(self) -> None:
        fake = self.server(require_client_cert=False)
        token_file = os.path.join(self.dir, "token")
        with open(token_file, "w") as f:
            f.write("old")
        config = ClusterConfig(server=fake.url, ca_file=os.path.join(self.dir, "ca.crt"), token_file=token_file, source="test")
        client = self.client(config)
        fake.authorize = lambda header: header == "Bearer old"
        client.merge_patch("/apis/watchdog.dev/v1alpha1/namespaces/ns/agentruns/r/status", {"status": {"checkpoint": {"step": 1}}})
        with open(token_file, "w") as f:
            f.write("new")
        fake.authorize = lambda header: header == "Bearer new"  # the old token expired: a 401, then a fresh read
        run = client.get("/apis/watchdog.dev/v1alpha1/namespaces/ns/agentruns/r")
        self.assertEqual(run["status"]["checkpoint"], {"step": 1})
        auths = [h.get("Authorization") for _, _, _, h in fake.requests]
        self.assertEqual(auths, ["Bearer old", "Bearer old", "Bearer new"])
        self.assertEqual(fake.content_types, ["application/merge-patch+json"])

    def test_refuses_a_server_it_cannot_verify(self) -> None:
        fake = self.server(require_client_cert=False)
        client = self.client(ClusterConfig(server=fake.url, source="test"))  # system CAs only
        with self.assertRaises(ssl.SSLError):
            client.get("/apis/watchdog.dev/v1alpha1/namespaces/ns/agentruns/r")
        insecure = self.client(ClusterConfig(server=fake.url, insecure_skip_tls_verify=True, source="test"))
        self.assertEqual(insecure.get("/apis/watchdog.dev/v1alpha1/namespaces/ns/agentruns/r")["kind"], "AgentRun")

    def test_api_errors_carry_code_and_reason(self) -> None:
        fake = self.server(require_client_cert=False)
        client = self.client(ClusterConfig(server=fake.url, ca_file=os.path.join(self.dir, "ca.crt"), source="test"))
        with self.assertRaises(ApiError) as caught:
            client.get("/apis/watchdog.dev/v1alpha1/namespaces/ns/agentruns/nope")
        self.assertEqual(caught.exception.code, 404)
        with self.assertRaises(ApiError) as caught:
            client.get("/nowhere")
        self.assertIn("404 page not found", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
