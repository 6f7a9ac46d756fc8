#!/usr/bin/env bash
# A real, local Kubernetes control plane for development and tests, built from
# source and run as plain processes: no container runtime, no kind, no network
# access beyond the Go module proxy for the first build.
#
# Why not envtest's bare apiserver: the operator relies on things only a fuller
# control plane provides — ServiceAccount admission (so the controller manager
# must create each namespace's `default` ServiceAccount), bound service-account
# tokens, garbage collection, namespace deletion, ValidatingAdmissionPolicy and,
# with --nodes, pods that actually get scheduled and reach Running on a kwok
# node.
#
# Usage: hack/control-plane.sh <command> [options]
#
#   build [--all] [TOOL...]  build missing binaries into the cache (default:
#                            etcd and the kube components; --all adds kwok,
#                            helm, promtool, prometheus, alertmanager, jaeger, kubectl
#                            and the kubelet)
#   up [--nodes|--kubelet]   start the control plane (idempotent); --nodes (or
#                            CONTROL_PLANE_NODES=1) adds kube-scheduler, kwok
#                            and one fake node, for scale; --kubelet adds
#                            kube-scheduler, containerd, runc, a CNI bridge and
#                            one real kubelet node (root only), for fidelity:
#                            containers really run. One cluster has one kind of
#                            node. Prints `export KUBECONFIG=...`
#   down                     stop everything `up` started, delete the state and
#                            undo every change the real node made to the machine
#   status                   show components; exit 0 only if the cluster is up
#   env                      print export lines for a running cluster
#   node-pause               stop the real node's kubelet (SIGSTOP): its
#                            containers keep running while the API server hears
#                            nothing from the node, as when it is cut off
#   node-resume              resume it (SIGCONT) and wait for the node to be Ready
#   node-expose PORT...      let the real node's pods reach a server on this
#                            machine's loopback at 10.244.0.1:PORT (the ledger's
#                            PostgreSQL, say); prints `export NODE_HOST_ADDRESS=...`
#   bin TOOL                 print the path of a tool binary, building it if
#                            needed (etcd, kube-apiserver, kube-controller-manager,
#                            kube-scheduler, kwok, helm, promtool, prometheus,
#                            alertmanager, jaeger, kubectl, kubelet, syft)
#
# Stdout carries only results meant for `eval` or `$(...)`; everything else
# goes to stderr.
#
# Environment:
#   AGENT_WATCHDOG_STATE  runtime state root (default $XDG_RUNTIME_DIR or /tmp,
#                         /agent-watchdog-<uid>); this script uses
#                         <root>/control-plane
#   AGENT_WATCHDOG_CACHE  binary cache root (default $XDG_CACHE_HOME or
#                         ~/.cache, /agent-watchdog); binaries live in
#                         <root>/bin/<tool>-<version>/
#   KUBEBUILDER_ASSETS    directory with prebuilt binaries (etcd,
#                         kube-apiserver, ...); any binary found there is used
#                         instead of building one
#   CONTROL_PLANE_NODES   1 makes `up` behave like `up --nodes`
#   CONTROL_PLANE_TIMEOUT seconds `up` waits for readiness (default 120)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS_DIR="$HACK_DIR/tools"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"
AW_LOG_PREFIX=control-plane

STATE_ROOT="$(aw_state_root)"
STATE_DIR="$STATE_ROOT/control-plane"
CACHE_BIN="$(aw_cache_root)/bin"
PKI="$STATE_DIR/pki"
PID_DIR="$STATE_DIR/pids"
LOG_DIR="$STATE_DIR/logs"
KUBECONFIG_PATH="$STATE_DIR/kubeconfig"

# Addresses. The service range only ever appears as ClusterIPs in API objects;
# nothing routes it. Pod and node addresses handed out by kwok are loopback
# addresses on purpose: nothing listens there, so code under test that tries to
# connect to a pod gets "connection refused" instead of sending packets towards
# some real network.
SERVICE_CIDR=10.0.0.0/24
KWOK_POD_CIDR=127.244.0.0/16
KWOK_NODE_IP=127.0.0.1
KWOK_NODE_NAME=kwok-node-0

# Order matters: start in this order, stop in reverse.
CORE_COMPONENTS=(etcd kube-apiserver kube-controller-manager)
NODE_COMPONENTS=(kube-scheduler kwok)
# shellcheck source=hack/lib/node.sh
source "$HACK_DIR/lib/node.sh"

DEFAULT_TOOLS=(etcd kube-apiserver kube-controller-manager kube-scheduler)
ALL_TOOLS=("${DEFAULT_TOOLS[@]}" kwok helm promtool prometheus alertmanager jaeger kubectl kubelet syft)

# ---------------------------------------------------------------------------
# Tool versions and build recipes. The versions come from the wrapper modules'
# go.mod files under hack/tools, so bumping a tool is a `go get` there and
# nothing else.

# Prints the version of module $2 required by hack/tools/$1/go.mod. Plain
# bash rather than awk: it runs for every binary on every warm start.
gomod_version() {
	local dir=$1 module=$2 first second third
	while read -r first second third _; do
		if [[ "$first" == require ]]; then
			first=$second second=$third
		fi
		if [[ "$first" == "$module" && "$second" == v* ]]; then
			printf '%s\n' "$second"
			return 0
		fi
	done <"$TOOLS_DIR/$dir/go.mod"
	aw_die "no version of $module in hack/tools/$dir/go.mod"
}

# The recipe of tool $1 whose version is that of module $4, required by hack/tools/$2, with main
# package $3.
module_recipe() {
	TOOL_MODULE_DIR=$2
	TOOL_PACKAGE=$3
	TOOL_VERSION="$(gomod_version "$2" "$4")"
	TOOL_CACHE_KEY="$1-$TOOL_VERSION"
}

# Sets TOOL_MODULE_DIR, TOOL_PACKAGE, TOOL_VERSION and TOOL_CACHE_KEY for tool
# $1. Cheap (no Go needed), because warm starts call it for every binary.
tool_recipe() {
	local tool=$1
	case "$tool" in
	etcd)
		# The etcd server's main package is the root of its server module.
		TOOL_MODULE_DIR=etcd
		TOOL_PACKAGE=go.etcd.io/etcd/server/v3
		TOOL_VERSION="$(gomod_version etcd go.etcd.io/etcd/server/v3)"
		TOOL_CACHE_KEY="etcd-$TOOL_VERSION"
		;;
	kube-apiserver | kube-controller-manager | kube-scheduler | kubectl | kubelet)
		TOOL_MODULE_DIR=kube
		TOOL_PACKAGE="k8s.io/kubernetes/cmd/$tool"
		TOOL_VERSION="$(gomod_version kube k8s.io/kubernetes)"
		TOOL_CACHE_KEY="kubernetes-$TOOL_VERSION"
		;;
	kwok) module_recipe "$tool" kwok sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok ;;
	helm) module_recipe "$tool" helm helm.sh/helm/v3/cmd/helm helm.sh/helm/v3 ;;
	promtool | prometheus)
		# Prometheus publishes release X.Y.Z as Go module v0.X0Y.Z
		# (3.16.0 is v0.316.0); the cache key and --version use the release.
		local module_version minor
		module_version="$(gomod_version prometheus github.com/prometheus/prometheus)"
		minor="${module_version#v0.}"
		minor="${minor%%.*}"
		TOOL_MODULE_DIR=prometheus
		TOOL_PACKAGE="github.com/prometheus/prometheus/cmd/$tool"
		TOOL_VERSION="v$((10#$minor / 100)).$((10#$minor % 100)).${module_version##*.}"
		TOOL_CACHE_KEY="$tool-$TOOL_VERSION"
		;;
	alertmanager) module_recipe "$tool" alertmanager github.com/prometheus/alertmanager/cmd/alertmanager github.com/prometheus/alertmanager ;;
	jaeger) module_recipe "$tool" jaeger github.com/jaegertracing/jaeger/cmd/jaeger github.com/jaegertracing/jaeger ;;
	syft) module_recipe "$tool" syft github.com/anchore/syft/cmd/syft github.com/anchore/syft ;;
	*)
		aw_die "unknown tool '$tool' (known: ${ALL_TOOLS[*]})"
		;;
	esac
}

# Sets TOOL_LDFLAGS for tool $1 (after tool_recipe). Every build strips debug
# info (-s -w: about a third smaller, faster to link) and stamps fixed version
# metadata, so the same inputs give the same binary on every machine.
tool_ldflags() {
	local tool=$1
	TOOL_LDFLAGS=(-s -w)
	case "$tool" in
	etcd)
		# etcd's version string is a constant in its source: nothing to stamp.
		;;
	kube-apiserver | kube-controller-manager | kube-scheduler | kubectl | kubelet)
		# Without these every component reports v0.0.0-master, which breaks
		# `kubectl version`, version-skew checks and anything that parses
		# /version. The release commit is not knowable from a module
		# download, so gitCommit is set empty rather than invented.
		local major minor pkg date
		major="${TOOL_VERSION#v}"
		major="${major%%.*}"
		minor="${TOOL_VERSION#v*.}"
		minor="${minor%%.*}"
		date="$(module_date kube k8s.io/kubernetes "$TOOL_VERSION" 2006-01-02T15:04:05Z 1970-01-01T00:00:00Z)"
		for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			TOOL_LDFLAGS+=(
				-X "$pkg.gitVersion=$TOOL_VERSION"
				-X "$pkg.gitMajor=$major"
				-X "$pkg.gitMinor=$minor"
				-X "$pkg.gitCommit="
				-X "$pkg.gitTreeState=clean"
				-X "$pkg.buildDate=$date"
			)
		done
		;;
	kwok)
		TOOL_LDFLAGS+=(-X "sigs.k8s.io/kwok/pkg/consts.Version=${TOOL_VERSION#v}")
		;;
	helm)
		# Helm's release build also tells its default Capabilities which
		# Kubernetes minor it was built against (that of its client-go);
		# without it `helm template` pretends to target v1.20.
		local k8s_minor
		k8s_minor="$(gomod_version helm k8s.io/client-go)"
		k8s_minor="${k8s_minor#v0.}"
		k8s_minor="${k8s_minor%%.*}"
		TOOL_LDFLAGS+=(
			-X "helm.sh/helm/v3/internal/version.version=$TOOL_VERSION"
			-X "helm.sh/helm/v3/internal/version.gitTreeState=clean"
			-X "helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1"
			-X "helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$k8s_minor"
			-X "helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1"
			-X "helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$k8s_minor"
		)
		;;
	promtool | prometheus | alertmanager)
		local pkg=github.com/prometheus/common/version module=github.com/prometheus/$tool module_version
		[[ "$tool" == promtool ]] && module=github.com/prometheus/prometheus
		module_version="$(gomod_version "$TOOL_MODULE_DIR" "$module")"
		TOOL_LDFLAGS+=(
			-X "$pkg.Version=${TOOL_VERSION#v}"
			-X "$pkg.Branch=HEAD"
			-X "$pkg.BuildUser=agent-watchdog"
			-X "$pkg.BuildDate=$(module_date "$TOOL_MODULE_DIR" "$module" "$module_version" 20060102-15:04:05 19700101-00:00:00)"
		)
		;;
	syft)
		# The SBOM names the tool that wrote it: its version, not "[not provided]".
		TOOL_LDFLAGS+=(
			-X "main.version=${TOOL_VERSION#v}"
			-X "main.buildDate=$(module_date syft github.com/anchore/syft "$TOOL_VERSION" 2006-01-02T15:04:05Z 1970-01-01T00:00:00Z)"
		)
		;;
	esac
}

# Prints the publication time of module $2@$3 (required by hack/tools/$1) in Go
# time layout $4, or $5 if it cannot be had: a build date that is the same on
# every machine, unlike `date`.
module_date() {
	local dir=$1 module=$2 version=$3 layout=$4 fallback=$5 date
	if ! date="$(cd "$TOOLS_DIR/$dir" && go list -m -f "{{if .Time}}{{.Time.UTC.Format \"$layout\"}}{{end}}" "$module@$version" 2>/dev/null)"; then
		date=""
	fi
	printf '%s\n' "${date:-$fallback}"
}

# Prints where tool $1 lives (or would live) in the cache.
cached_path() {
	tool_recipe "$1"
	printf '%s\n' "$CACHE_BIN/$TOOL_CACHE_KEY/$1"
}

# Prints the path of tool $1 if it exists already, without building.
existing_bin() {
	local tool=$1 path
	if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "$KUBEBUILDER_ASSETS/$tool" ]]; then
		printf '%s\n' "$KUBEBUILDER_ASSETS/$tool"
		return 0
	fi
	path="$(cached_path "$tool")"
	[[ -x "$path" ]] || return 1
	printf '%s\n' "$path"
}

BUILD_TMP_DIRS=()
cleanup_build_tmp() {
	local dir
	for dir in "${BUILD_TMP_DIRS[@]}"; do
		rm -rf "$dir"
	done
}
# However this script ends early (a component that died, a timeout, aw_die, a signal), what this
# invocation of `up` started is stopped again, newest first, so that a failed `up` leaves nothing
# running. Its logs stay in the state dir.
STARTED=()
on_exit() {
	local rc=$? i
	cleanup_build_tmp
	if ((rc != 0 && ${#STARTED[@]} > 0)); then
		aw_log "stopping what this invocation started (${STARTED[*]}); logs stay in $LOG_DIR"
		aw_log "'hack/control-plane.sh down' discards all state (ports, certificates, data) for a clean start"
		for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do
			proc_stop "${STARTED[$i]}" || true
		done
	fi
}
trap on_exit EXIT
# Turn signals into a normal exit so the EXIT trap above still runs.
trap 'exit 130' INT
trap 'exit 143' TERM

# Alertmanager's ui package embeds ui/app/dist, web assets that its release process builds with
# npm and that its published module does not hold. It is built from a copy of the module in $1
# whose dist holds only a note (the web UI's paths answer 404; the API, the routing and the
# notifications are the module's own), through a modfile that points the module at that copy.
# Prints the modfile's path.
alertmanager_modfile() {
	local dir=$1 module_dir sub
	module_dir="$(cd "$TOOLS_DIR/alertmanager" && go mod download -json github.com/prometheus/alertmanager |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	[[ -d "$module_dir" ]] || aw_die "could not locate the github.com/prometheus/alertmanager module"
	cp -R "$module_dir" "$dir/alertmanager-module"
	chmod -R u+w "$dir/alertmanager-module"
	for sub in elm mantine; do
		mkdir -p "$dir/alertmanager-module/ui/app/dist/$sub"
		printf 'web UI not built\n' >"$dir/alertmanager-module/ui/app/dist/$sub/README.txt"
	done
	cp "$TOOLS_DIR/alertmanager/go.mod" "$dir/build.mod"
	cp "$TOOLS_DIR/alertmanager/go.sum" "$dir/build.sum"
	printf '\nreplace github.com/prometheus/alertmanager => %s\n' "$dir/alertmanager-module" >>"$dir/build.mod"
	printf '%s\n' "$dir/build.mod"
}

# Builds tool $1 into the cache unless it is there already.
build_tool() {
	local tool=$1 final tmp start
	tool_recipe "$tool" # rejects unknown names once, with the list of known ones
	if existing_bin "$tool" >/dev/null; then
		return 0
	fi
	command -v go >/dev/null 2>&1 || aw_die "building $tool needs Go (https://go.dev/dl) or KUBEBUILDER_ASSETS with a prebuilt $tool"
	final="$(cached_path "$tool")"
	mkdir -p "$CACHE_BIN"
	# Another invocation (a parallel test run, say) may be building the same
	# binary; one build at a time also keeps a two-core machine usable.
	aw_lock "$CACHE_BIN/.build.lock" 8
	if [[ -x "$final" ]]; then
		return 0
	fi
	# Holding the lock, any build directory still around belongs to a build
	# that was killed outright.
	rm -rf "$CACHE_BIN"/.build-*
	# Build next to the final location and rename: the rename is atomic, so an
	# interrupted build can never leave a truncated binary behind that later
	# runs would take for a finished one.
	tmp="$(mktemp -d "$CACHE_BIN/.build-$tool.XXXXXX")"
	BUILD_TMP_DIRS+=("$tmp")
	tool_recipe "$tool"
	tool_ldflags "$tool"
	local modfile=()
	[[ "$tool" == alertmanager ]] && modfile=(-modfile "$(alertmanager_modfile "$tmp")")
	aw_log "building $tool ($TOOL_CACHE_KEY) from hack/tools/$TOOL_MODULE_DIR"
	[[ "$TOOL_MODULE_DIR" == kube ]] &&
		aw_log "a cold build of a Kubernetes component takes about 10 minutes on 2 cores; later ones reuse most of it"
	start="$(aw_now_ms)"
	(
		cd "$TOOLS_DIR/$TOOL_MODULE_DIR"
		CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath "${modfile[@]}" \
			-ldflags "${TOOL_LDFLAGS[*]}" -o "$tmp/$tool" "$TOOL_PACKAGE"
	) >&2 || aw_die "building $tool failed"
	mkdir -p "$(dirname "$final")"
	mv -f "$tmp/$tool" "$final"
	rm -rf "$tmp"
	aw_log "built $tool in $(aw_since "$start"): $final"
}

# Prints the path of tool $1, building it first if needed.
resolve_bin() {
	build_tool "$1"
	existing_bin "$1"
}

cmd_build() {
	local tools=() arg start
	for arg in "$@"; do
		case "$arg" in
		--all) tools+=("${ALL_TOOLS[@]}") ;;
		-*) aw_die "unknown option $arg" ;;
		*) tools+=("$arg") ;;
		esac
	done
	((${#tools[@]})) || tools=("${DEFAULT_TOOLS[@]}")
	start="$(aw_now_ms)"
	local tool
	for tool in "${tools[@]}"; do
		build_tool "$tool"
	done
	aw_log "all requested tools present after $(aw_since "$start"); cache: $CACHE_BIN"
}

cmd_bin() {
	(($# == 1)) || aw_die "usage: $0 bin TOOL"
	resolve_bin "$1" >&3
}

# ---------------------------------------------------------------------------
# Process bookkeeping: records that name each started process for good, even while it is
# still exec'ing its binary (hack/lib/proc.sh).
# shellcheck source=hack/lib/proc.sh
source "$HACK_DIR/lib/proc.sh"

# ---------------------------------------------------------------------------
# Ports, certificates and kubeconfigs, all kept in the state dir so that a
# restarted component comes back at the same address with the same identity.

load_ports() {
	[[ -s "$STATE_DIR/ports" ]] || return 1
	# shellcheck source=/dev/null
	source "$STATE_DIR/ports"
}

# Defaults are easy to remember for a developer's single cluster; a parallel
# cluster in another state root simply gets random free ports instead.
ensure_ports() {
	if load_ports; then
		saved_ports_usable && return 0
		aw_log "ports saved in $STATE_DIR are held by processes this state does not know (another cluster left running, or one in another PID namespace); picking new ones"
		rm -f "$STATE_DIR/ports" "$KUBECONFIG_PATH" "$STATE_DIR"/*.kubeconfig "$STATE_DIR/node/kubelet.kubeconfig"
	fi
	aw_snapshot_used_ports
	ETCD_PORT="$(aw_pick_port 12379)"
	ETCD_PEER_PORT="$(aw_pick_port 12380 "$ETCD_PORT")"
	APISERVER_PORT="$(aw_pick_port 16443 "$ETCD_PORT" "$ETCD_PEER_PORT")"
	KCM_PORT="$(aw_pick_port 10357 "$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT")"
	SCHEDULER_PORT="$(aw_pick_port 10359 "$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$KCM_PORT")"
	KWOK_PORT="$(aw_pick_port 10347 "$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$KCM_PORT" "$SCHEDULER_PORT")"
	cat >"$STATE_DIR/ports.tmp" <<-EOF
		ETCD_PORT=$ETCD_PORT
		ETCD_PEER_PORT=$ETCD_PEER_PORT
		APISERVER_PORT=$APISERVER_PORT
		KCM_PORT=$KCM_PORT
		SCHEDULER_PORT=$SCHEDULER_PORT
		KWOK_PORT=$KWOK_PORT
	EOF
	mv -f "$STATE_DIR/ports.tmp" "$STATE_DIR/ports"
}

# Saved ports are ours to reuse while one of our components is alive (it holds them), or while
# nobody listens on them. A listener we have no record of means the state dir outlived its
# processes' records while they kept running: starting on those ports would fail at bind.
saved_ports_usable() {
	local name port
	for name in "${CORE_COMPONENTS[@]}" "${NODE_COMPONENTS[@]}"; do
		proc_alive "$name" && return 0
	done
	aw_snapshot_used_ports
	for port in "$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$KCM_PORT" "$SCHEDULER_PORT" "$KWOK_PORT"; do
		aw_port_in_use "$port" && return 1
	done
	return 0
}

# OpenSSL configuration of its own, so the certificates do not depend on the
# distribution's openssl.cnf defaults.
write_openssl_config() {
	cat >"$PKI/openssl.cnf" <<-'EOF'
		[req]
		distinguished_name = dn
		prompt = no
		[dn]
		CN = unused
		[ca]
		basicConstraints = critical,CA:TRUE
		keyUsage = critical,keyCertSign,cRLSign,digitalSignature
		subjectKeyIdentifier = hash
		[server]
		basicConstraints = critical,CA:FALSE
		keyUsage = critical,digitalSignature,keyEncipherment
		extendedKeyUsage = serverAuth
		authorityKeyIdentifier = keyid
		subjectAltName = IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
		[client]
		basicConstraints = critical,CA:FALSE
		keyUsage = critical,digitalSignature,keyEncipherment
		extendedKeyUsage = clientAuth
		authorityKeyIdentifier = keyid
	EOF
}

# ECDSA P-256 keys: generated in milliseconds (RSA would dominate a warm
# start) and accepted everywhere, including for service-account token signing.
# Every certificate is made by a single openssl process (key, request and
# signature at once, which needs OpenSSL 3), because process start-up is most
# of the cost and all of this is on the critical path of `up`.
KEY_OPTS=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -noenc)

random_serial() {
	printf '0x%08x%08x\n' "${SRANDOM:-$RANDOM}" "${SRANDOM:-$RANDOM}"
}

# Creates the self-signed CA $PKI/$1.crt (+ .key) with common name $2.
make_ca() {
	openssl req -x509 -new "${KEY_OPTS[@]}" -config "$PKI/openssl.cnf" -extensions ca \
		-keyout "$PKI/$1.key" -out "$PKI/$1.crt" -subj "/CN=$2" \
		-days 3650 -sha256 -set_serial "$(random_serial)" 2>/dev/null
}

# Issues $PKI/$1.crt (+ .key) signed by CA $4 (default: the cluster CA);
# $2 subject, $3 extension profile from openssl.cnf.
issue_cert() {
	local name=$1 subject=$2 profile=$3 ca=${4:-ca}
	openssl req -x509 -new "${KEY_OPTS[@]}" -config "$PKI/openssl.cnf" -extensions "$profile" \
		-CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" \
		-keyout "$PKI/$name.key" -out "$PKI/$name.crt" -subj "$subject" \
		-days 3650 -sha256 -set_serial "$(random_serial)" 2>/dev/null
}

ensure_pki() {
	[[ -e "$PKI/done" ]] && return 0
	rm -rf "$PKI"
	mkdir -p "$PKI"
	write_openssl_config
	make_ca ca agent-watchdog-local-ca
	issue_cert apiserver "/CN=kube-apiserver" server
	# system:masters bypasses RBAC entirely: the admin kubeconfig is for tests
	# and humans who need to set up anything, including RBAC itself.
	issue_cert admin "/O=system:masters/CN=agent-watchdog-admin" client
	# The controller manager and scheduler use the identities the built-in
	# RBAC policy grants exactly their permissions to, as in a real cluster.
	issue_cert kube-controller-manager "/CN=system:kube-controller-manager" client
	issue_cert kube-scheduler "/CN=system:kube-scheduler" client
	# The aggregation layer's front proxy: with it the apiserver publishes a
	# complete extension-apiserver-authentication ConfigMap, so components
	# that delegate authentication (controller manager, scheduler, any
	# aggregated API server) start without errors about a missing CA.
	make_ca front-proxy-ca agent-watchdog-front-proxy-ca
	issue_cert front-proxy-client "/CN=front-proxy-client" client front-proxy-ca
	# Signs service-account tokens; the apiserver verifies them with the
	# same file (it accepts a private key and uses its public half, but only
	# in the SEC1 "EC PRIVATE KEY" encoding, hence ecparam, not genpkey).
	openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/service-account.key" 2>/dev/null
	# The API server's identity towards kubelets (logs, exec), bound to system:kubelet-api-admin.
	issue_cert apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client" client
	[[ -s "$PKI/apiserver.crt" && -s "$PKI/front-proxy-client.crt" && -s "$PKI/service-account.key" && -s "$PKI/apiserver-kubelet-client.crt" ]] ||
		aw_die "generating certificates failed (OpenSSL 3 is required; found: $(openssl version))"
	: >"$PKI/done"
}

# Writes kubeconfig $1 for client certificate $2 (user name $3). The admin
# kubeconfig, which is handed out, embeds its certificates so that it stays
# valid wherever it is copied; the components' own ones just point at files
# (three fewer base64 runs per certificate on every start).
write_kubeconfig() {
	local file=$1 cert=$2 user=$3 embed=${4:-}
	local ca_line="certificate-authority: $PKI/ca.crt"
	local cert_line="client-certificate: $PKI/$cert.crt"
	local key_line="client-key: $PKI/$cert.key"
	if [[ -n "$embed" ]]; then
		ca_line="certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")"
		cert_line="client-certificate-data: $(base64 -w0 <"$PKI/$cert.crt")"
		key_line="client-key-data: $(base64 -w0 <"$PKI/$cert.key")"
	fi
	cat >"$file.tmp" <<-EOF
		apiVersion: v1
		kind: Config
		clusters:
		- name: agent-watchdog
		  cluster:
		    server: https://127.0.0.1:$APISERVER_PORT
		    $ca_line
		users:
		- name: $user
		  user:
		    $cert_line
		    $key_line
		contexts:
		- name: agent-watchdog
		  context:
		    cluster: agent-watchdog
		    user: $user
		    namespace: default
		current-context: agent-watchdog
	EOF
	mv -f "$file.tmp" "$file"
}

ensure_kubeconfigs() {
	[[ -s "$KUBECONFIG_PATH" ]] ||
		write_kubeconfig "$KUBECONFIG_PATH" admin agent-watchdog-admin embed
	[[ -s "$STATE_DIR/kube-controller-manager.kubeconfig" ]] ||
		write_kubeconfig "$STATE_DIR/kube-controller-manager.kubeconfig" kube-controller-manager system:kube-controller-manager
	[[ -s "$STATE_DIR/kube-scheduler.kubeconfig" ]] ||
		write_kubeconfig "$STATE_DIR/kube-scheduler.kubeconfig" kube-scheduler system:kube-scheduler
}

# ---------------------------------------------------------------------------
# Talking to the cluster with curl keeps the script independent of whichever
# kubectl (if any) is installed, and is faster than starting kubectl. The user
# agent matters: the apiserver pretty-prints JSON for curl's.
api() {
	curl -sS --max-time 5 -A hack/control-plane.sh --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
		"$@"
}

api_status() {
	api -o /dev/null -w '%{http_code}' "$@" 2>/dev/null || true
}

healthy() {
	local name=$1
	case "$name" in
	etcd) [[ "$(curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null)" == *'"health":"true"'* ]] ;;
	kube-apiserver) [[ "$(api "https://127.0.0.1:$APISERVER_PORT/readyz" 2>/dev/null)" == ok ]] ;;
	kube-controller-manager) [[ "$(curl -ksS --max-time 2 "https://127.0.0.1:$KCM_PORT/healthz" 2>/dev/null)" == ok ]] ;;
	kube-scheduler) [[ "$(curl -ksS --max-time 2 "https://127.0.0.1:$SCHEDULER_PORT/healthz" 2>/dev/null)" == ok ]] ;;
	kwok) [[ "$(curl -fsS --max-time 2 "http://127.0.0.1:$KWOK_PORT/healthz" 2>/dev/null)" == ok ]] ;;
	*) return 1 ;;
	esac
}

up_and_healthy() {
	proc_alive "$1" && healthy "$1"
}

default_service_account_exists() {
	[[ "$(api_status "https://127.0.0.1:$APISERVER_PORT/api/v1/namespaces/default/serviceaccounts/default")" == 200 ]]
}

node_ready_named() {
	local json
	json="$(api "https://127.0.0.1:$APISERVER_PORT/api/v1/nodes/$1" 2>/dev/null)" || return 1
	# Go's encoder writes condition fields in declaration order (type, then
	# status), and the apiserver does not pretty-print for this user agent.
	[[ "$json" == *'{"type":"Ready","status":"True"'* && "$json" != *'node.kubernetes.io/not-ready'* && "$json" != *'node.kubernetes.io/unreachable'* ]]
}

# The fake node. Created with its status (the API allows status on create) and
# already Ready, so the node lifecycle controller never taints it not-ready and
# pods can be scheduled the moment `up` returns; kwok then owns the status.
# It takes 20,000 pods (a kubelet's default is 110) so that the scale benches
# can bind every pod of 10,000 runs to it.
create_node() {
	local code
	# A node left from an earlier kwok that died stays NotReady (the node lifecycle controller
	# set its conditions to Unknown, and a new kwok only renews heartbeats): make it afresh.
	if ! node_ready_named "$KWOK_NODE_NAME" && [[ "$(api_status "https://127.0.0.1:$APISERVER_PORT/api/v1/nodes/$KWOK_NODE_NAME")" == 200 ]]; then
		aw_log "node $KWOK_NODE_NAME is left from an earlier kwok and not Ready: creating it again"
		api_status -X DELETE "https://127.0.0.1:$APISERVER_PORT/api/v1/nodes/$KWOK_NODE_NAME" >/dev/null
	fi
	code="$(api_status -X POST -H 'Content-Type: application/json' \
		"https://127.0.0.1:$APISERVER_PORT/api/v1/nodes" --data-binary @- <<-EOF
			{
			  "apiVersion": "v1",
			  "kind": "Node",
			  "metadata": {
			    "name": "$KWOK_NODE_NAME",
			    "annotations": {
			      "kwok.x-k8s.io/node": "fake",
			      "node.alpha.kubernetes.io/ttl": "0"
			    },
			    "labels": {
			      "type": "kwok",
			      "kubernetes.io/arch": "amd64",
			      "kubernetes.io/os": "linux",
			      "kubernetes.io/hostname": "$KWOK_NODE_NAME"
			    }
			  },
			  "status": {
			    "capacity": {"cpu": "32", "memory": "256Gi", "pods": "20000"},
			    "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "20000"},
			    "conditions": [
			      {"type": "Ready", "status": "True", "reason": "KubeletReady",
			       "message": "created ready by hack/control-plane.sh",
			       "lastHeartbeatTime": "$(date -u +%FT%TZ)",
			       "lastTransitionTime": "$(date -u +%FT%TZ)"}
			    ]
			  }
			}
		EOF
	)"
	case "$code" in
	201 | 409) ;;
	*) aw_die "creating node $KWOK_NODE_NAME failed (HTTP $code)" ;;
	esac
}

# ---------------------------------------------------------------------------
# Components.

start_component() {
	local name=$1 bin=${BIN[$1]}
	case "$name" in
	etcd)
		mkdir -p "$STATE_DIR/etcd"
		# Throwaway data: fsync off makes every write several times faster.
		proc_start etcd "$bin" \
			--name=agent-watchdog \
			--data-dir="$STATE_DIR/etcd" \
			--listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
			--advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
			--listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
			--initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
			--initial-cluster="agent-watchdog=http://127.0.0.1:$ETCD_PEER_PORT" \
			--unsafe-no-fsync \
			--log-level=warn
		;;
	kube-apiserver)
		# The audit log records only the Job controller and the service
		# accounts of the agent-watchdog-bench namespace, so that the
		# benches can count each side's API requests on the server
		# (apiserver_request_total has no label for the client). Every
		# other request is audited at level None and costs nothing.
		cat >"$STATE_DIR/audit-policy.yaml" <<-'EOF'
			apiVersion: audit.k8s.io/v1
			kind: Policy
			omitStages: [RequestReceived, ResponseStarted]
			rules:
			  - level: Metadata
			    users: ["system:serviceaccount:kube-system:job-controller"]
			  - level: Metadata
			    userGroups: ["system:serviceaccounts:agent-watchdog-bench"]
			  - level: None
		EOF
		# Admission plugins are the defaults plus NodeRestriction, as
		# kubeadm sets them (the ServiceAccount plugin and
		# ValidatingAdmissionPolicy must behave as in production, and a
		# real node may only touch its own objects). The kubernetes Service gets no endpoints: the
		# only address we could advertise is loopback, which Endpoints
		# reject, and nothing in the cluster could route to it anyway.
		proc_start kube-apiserver "$bin" \
			--bind-address=127.0.0.1 \
			--advertise-address=127.0.0.1 \
			--secure-port="$APISERVER_PORT" \
			--etcd-servers="http://127.0.0.1:$ETCD_PORT" \
			--tls-cert-file="$PKI/apiserver.crt" \
			--tls-private-key-file="$PKI/apiserver.key" \
			--client-ca-file="$PKI/ca.crt" \
			--requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
			--requestheader-allowed-names=front-proxy-client \
			--requestheader-username-headers=X-Remote-User \
			--requestheader-group-headers=X-Remote-Group \
			--requestheader-extra-headers-prefix=X-Remote-Extra- \
			--proxy-client-cert-file="$PKI/front-proxy-client.crt" \
			--proxy-client-key-file="$PKI/front-proxy-client.key" \
			--authorization-mode=Node,RBAC \
			--enable-admission-plugins=NodeRestriction \
			--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
			--kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
			--kubelet-certificate-authority="$PKI/ca.crt" \
			--kubelet-preferred-address-types=InternalIP,Hostname,InternalDNS,ExternalDNS,ExternalIP \
			--service-account-issuer="https://127.0.0.1:$APISERVER_PORT" \
			--api-audiences="https://127.0.0.1:$APISERVER_PORT" \
			--service-account-key-file="$PKI/service-account.key" \
			--service-account-signing-key-file="$PKI/service-account.key" \
			--service-cluster-ip-range="$SERVICE_CIDR" \
			--allow-privileged=true \
			--endpoint-reconciler-type=none \
			--audit-policy-file="$STATE_DIR/audit-policy.yaml" \
			--audit-log-path="$LOG_DIR/audit.log" \
			--audit-log-format=json \
			--audit-log-maxsize=200 \
			--audit-log-maxbackup=1 \
			--profiling=false \
			"${APISERVER_EXTRA_ARGS[@]}"
		;;
	kube-controller-manager)
		# Always running: it creates every namespace's `default`
		# ServiceAccount (pods cannot be admitted without it), and runs
		# garbage collection, namespace deletion and the job/replicaset
		# controllers. Controllers that only make sense with a cloud
		# provider or a real pod network stay off.
		proc_start kube-controller-manager "$bin" \
			--kubeconfig="$STATE_DIR/kube-controller-manager.kubeconfig" \
			--authentication-kubeconfig="$STATE_DIR/kube-controller-manager.kubeconfig" \
			--authorization-kubeconfig="$STATE_DIR/kube-controller-manager.kubeconfig" \
			--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics \
			--bind-address=127.0.0.1 \
			--secure-port="$KCM_PORT" \
			--leader-elect=false \
			--root-ca-file="$PKI/ca.crt" \
			--service-account-private-key-file="$PKI/service-account.key" \
			--use-service-account-credentials=true \
			--cluster-signing-cert-file="$PKI/ca.crt" \
			--cluster-signing-key-file="$PKI/ca.key" \
			--service-cluster-ip-range="$SERVICE_CIDR" \
			--flex-volume-plugin-dir="$STATE_DIR/flexvolume" \
			--kube-api-qps=500 \
			--kube-api-burst=1000 \
			--profiling=false
		;;
	kube-scheduler)
		proc_start kube-scheduler "$bin" \
			--kubeconfig="$STATE_DIR/kube-scheduler.kubeconfig" \
			--authentication-kubeconfig="$STATE_DIR/kube-scheduler.kubeconfig" \
			--authorization-kubeconfig="$STATE_DIR/kube-scheduler.kubeconfig" \
			--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics \
			--bind-address=127.0.0.1 \
			--secure-port="$SCHEDULER_PORT" \
			--leader-elect=false \
			--profiling=false
		;;
	kwok)
		# A copy of the stages, so a running cluster does not depend on the
		# clone it was started from staying checked out.
		cp "$TOOLS_DIR/kwok/stages.yaml" "$STATE_DIR/kwok-stages.yaml"
		# kwok only drives nodes whose Lease it holds, under an identity
		# that is new for every process. A Lease left by a previous kwok
		# would make this one wait for it to expire (up to 40s) before any
		# pod progresses; no kwok is running, so nobody holds it any more.
		api_status -X DELETE "https://127.0.0.1:$APISERVER_PORT/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/$KWOK_NODE_NAME" >/dev/null
		proc_start kwok "$bin" \
			--kubeconfig="$KUBECONFIG_PATH" \
			--config="$STATE_DIR/kwok-stages.yaml" \
			--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
			--node-lease-duration-seconds=40 \
			--cidr="$KWOK_POD_CIDR" \
			--node-ip="$KWOK_NODE_IP" \
			--server-address="127.0.0.1:$KWOK_PORT"
		;;
	*) aw_die "unknown component $name" ;;
	esac
}

# Waits for "$@" (a predicate) or fails with the logs of the components that
# were started by this invocation, then stops them so a retry starts clean. A
# component that exits while we wait fails the wait at once instead of after
# the full timeout.
wait_or_fail() {
	local what=$1
	shift
	DIED=""
	if aw_wait_for "${CONTROL_PLANE_TIMEOUT:-120}" predicate_unless_died "$@" && [[ -z "$DIED" ]]; then
		return 0
	fi
	if [[ -n "$DIED" ]]; then
		aw_log "$DIED exited while waiting for $what"
	else
		aw_log "timed out waiting for $what"
	fi
	local name
	for name in "${STARTED[@]}"; do
		aw_log "---- last lines of $LOG_DIR/$name.log ----"
		tail -n 25 "$LOG_DIR/$name.log" >&2 || true
	done
	# The EXIT trap stops what this invocation started.
	exit 1
}

predicate_unless_died() {
	local name
	for name in "${STARTED[@]}"; do
		if ! proc_alive "$name"; then
			DIED=$name
			return 0
		fi
	done
	"$@"
}

print_env() {
	printf 'export KUBECONFIG=%q\n' "$KUBECONFIG_PATH" >&3
}

cluster_up() {
	local name
	load_ports || return 1
	for name in "${CORE_COMPONENTS[@]}"; do
		up_and_healthy "$name" || return 1
	done
	if [[ -e "$STATE_DIR/nodes" ]]; then
		nodes_up || return 1
	fi
	if [[ -e "$STATE_DIR/kubelet" ]]; then
		kubelet_up || return 1
	fi
}

nodes_up() {
	local name
	[[ -e "$STATE_DIR/nodes" ]] || return 1
	for name in "${NODE_COMPONENTS[@]}"; do
		up_and_healthy "$name" || return 1
	done
}

kubelet_up() {
	[[ -e "$STATE_DIR/kubelet" ]] && load_node_ports && up_and_healthy kube-scheduler || return 1
	proc_alive containerd && node_healthy containerd && proc_alive kubelet && ! kubelet_paused && node_healthy kubelet && node_ready
}

cmd_up() {
	local with_nodes=0 with_kubelet=0 arg
	[[ "${CONTROL_PLANE_NODES:-0}" == 1 ]] && with_nodes=1
	for arg in "$@"; do
		case "$arg" in
		--nodes) with_nodes=1 ;;
		--kubelet) with_kubelet=1 ;;
		*) aw_die "unknown option $arg" ;;
		esac
	done
	((with_nodes && with_kubelet)) && aw_die "--nodes and --kubelet give different clusters; choose one"
	command -v openssl >/dev/null 2>&1 || aw_die "openssl is required"
	command -v curl >/dev/null 2>&1 || aw_die "curl is required"

	aw_lock "$STATE_ROOT/control-plane.lock" 9
	# One cluster has one kind of node: pods without a node selector must land where the suites
	# that use this cluster expect them.
	if ((with_kubelet)) && [[ -e "$STATE_DIR/nodes" ]]; then
		aw_die "this cluster runs the kwok node (up --nodes); 'hack/control-plane.sh down' first, or use another AGENT_WATCHDOG_STATE for the real node"
	fi
	if ((with_nodes)) && [[ -e "$STATE_DIR/kubelet" ]]; then
		aw_die "this cluster runs the real node (up --kubelet); 'hack/control-plane.sh down' first, or use another AGENT_WATCHDOG_STATE for kwok"
	fi
	((with_kubelet)) && node_require
	# The real node has no kube-proxy, so a Service's ClusterIP leads nowhere: the API server
	# reaches an aggregated API (the run history's APIService) at its endpoints' pod addresses,
	# which this machine routes to over the node's bridge. The loopback cluster keeps the default
	# (an ExternalName Service can then name a server on loopback, where no endpoint may point).
	# A property of the cluster, not of this call: a plain `up` that starts a killed API server of
	# the real node's cluster again must start it the same way.
	APISERVER_EXTRA_ARGS=()
	if ((with_kubelet)) || [[ -e "$STATE_DIR/kubelet" ]]; then
		APISERVER_EXTRA_ARGS+=(--enable-aggregator-routing=true)
	fi
	local start
	start="$(aw_now_ms)"
	if cluster_up && { ((with_nodes == 0)) || nodes_up; } && { ((with_kubelet == 0)) || kubelet_up; }; then
		aw_log "already up"
		print_env
		return 0
	fi

	# Builds (only on a machine's first run) happen before anything starts.
	local components=("${CORE_COMPONENTS[@]}") name path
	((with_nodes)) && components+=("${NODE_COMPONENTS[@]}")
	((with_kubelet)) && components+=(kube-scheduler)
	declare -gA BIN=()
	for name in "${components[@]}"; do
		BIN[$name]="$(resolve_bin "$name")"
	done
	((with_kubelet)) && BIN[kubelet]="$(resolve_bin kubelet)"

	# Certificates, keys and etcd data are nobody else's business.
	umask 077
	mkdir -p "$STATE_DIR/bin" "$PID_DIR" "$LOG_DIR"
	for name in "${!BIN[@]}"; do
		ln -sfn "${BIN[$name]}" "$STATE_DIR/bin/$name"
	done
	ensure_ports

	# From here on, independent work overlaps with process start-up: etcd
	# does not need certificates, so it boots while they are generated, and
	# the apiserver's start-up (the longest step) covers the remaining
	# bookkeeping.
	if ! proc_alive etcd; then
		start_component etcd
	fi
	ensure_pki
	ensure_kubeconfigs
	wait_or_fail "etcd to become healthy" healthy etcd
	proc_alive kube-apiserver || start_component kube-apiserver
	# Offer the remaining tools through CONTROL_PLANE_BIN when they are
	# already built, without paying for building them.
	for name in kwok kube-scheduler helm promtool kubectl kubelet; do
		if [[ ! -e "$STATE_DIR/bin/$name" ]] && path="$(existing_bin "$name")"; then
			ln -sfn "$path" "$STATE_DIR/bin/$name"
		fi
	done
	wait_or_fail "kube-apiserver /readyz" healthy kube-apiserver
	aw_log "kube-apiserver ready after $(aw_since "$start")"
	# The other components only start once the apiserver is ready: before its
	# RBAC bootstrap has run they are refused access to their own
	# configuration and exit.
	for name in "${components[@]:2}"; do
		proc_alive "$name" || start_component "$name"
	done
	# The ServiceAccount admission plugin rejects pods in a namespace until
	# its `default` ServiceAccount exists. Waiting for the controller manager
	# to create the one in `default` means callers can create pods as soon as
	# `up` returns, and that namespaces they create get theirs promptly.
	wait_or_fail "the default ServiceAccount" default_service_account_exists
	wait_or_fail "kube-controller-manager /healthz" healthy kube-controller-manager

	if ((with_nodes)); then
		wait_or_fail "kube-scheduler /healthz" healthy kube-scheduler
		wait_or_fail "kwok /healthz" healthy kwok
		create_node
		wait_or_fail "node $KWOK_NODE_NAME to be Ready" node_ready_named "$KWOK_NODE_NAME"
		: >"$STATE_DIR/nodes"
	fi
	if ((with_kubelet)); then
		wait_or_fail "kube-scheduler /healthz" healthy kube-scheduler
		node_up
	fi
	aw_log "control plane up in $(aw_since "$start") (state: $STATE_DIR)"
	print_env
}

cmd_down() {
	aw_lock "$STATE_ROOT/control-plane.lock" 9
	if [[ ! -d "$STATE_DIR" ]]; then
		aw_log "not running"
		return 0
	fi
	local start
	start="$(aw_now_ms)"
	# The real node first: its containers must stop before anything they talk to does, and what
	# it changed on the machine is undone while its records are still in the state dir.
	node_down
	# Clients first, so nothing logs errors about a vanished apiserver, and
	# etcd last.
	proc_stop kwok kube-scheduler kube-controller-manager
	proc_stop kube-apiserver
	proc_stop etcd
	case "$STATE_DIR" in
	*/control-plane) rm -rf "$STATE_DIR" ;;
	*) aw_die "refusing to delete unexpected state dir $STATE_DIR" ;;
	esac
	aw_log "stopped and removed $STATE_DIR in $(aw_since "$start")"
}

cmd_status() {
	if [[ ! -d "$STATE_DIR" ]] || ! load_ports; then
		echo "control plane: down (no state in $STATE_DIR)"
		return 1
	fi
	local name state rc=0 components=("${CORE_COMPONENTS[@]}")
	[[ -e "$STATE_DIR/nodes" || -e "$PID_DIR/kwok" ]] && components+=("${NODE_COMPONENTS[@]}")
	[[ -e "$STATE_DIR/kubelet" || -e "$PID_DIR/kubelet" ]] && components+=(kube-scheduler)
	for name in "${components[@]}"; do
		if proc_alive "$name"; then
			if healthy "$name"; then state=healthy; else state=unhealthy rc=1; fi
			printf '%-24s pid %-8s %s\n' "$name" "$REC_PID" "$state"
		else
			printf '%-24s %-12s %s\n' "$name" "-" "not running"
			rc=1
		fi
	done
	if [[ -e "$STATE_DIR/kubelet" || -e "$PID_DIR/kubelet" ]]; then
		load_node_ports || true
		node_status || rc=1
	fi
	if ((rc == 0)); then
		echo "control plane: up (KUBECONFIG=$KUBECONFIG_PATH)"
	else
		echo "control plane: down or degraded; logs in $LOG_DIR"
	fi
	return "$rc"
}

cmd_env() {
	cluster_up || aw_die "control plane is not up (run: hack/control-plane.sh up)"
	print_env
	printf 'export CONTROL_PLANE_BIN=%q\n' "$STATE_DIR/bin" >&3
	printf 'export CONTROL_PLANE_STATE=%q\n' "$STATE_DIR" >&3
}

usage() {
	aw_usage "${BASH_SOURCE[0]}"
}

main() {
	# Results go to fd 3 (the real stdout); everything else, including output
	# of the tools called along the way, goes to stderr.
	exec 3>&1 1>&2
	local cmd=${1:-help}
	(($#)) && shift
	case "$cmd" in
	build) cmd_build "$@" ;;
	up) cmd_up "$@" ;;
	down) cmd_down "$@" ;;
	status) cmd_status "$@" >&3 ;;
	env) cmd_env "$@" ;;
	node-pause) cmd_node_pause "$@" ;;
	node-resume) cmd_node_resume "$@" ;;
	node-expose) cmd_node_expose "$@" ;;
	bin) cmd_bin "$@" ;;
	help | -h | --help) usage ;;
	*)
		usage
		exit 2
		;;
	esac
}

main "$@"
