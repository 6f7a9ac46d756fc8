# shellcheck shell=bash
# The real node of `hack/control-plane.sh up --kubelet`: the project's own containerd (its own
# root, state, socket and config), runc, a CNI bridge with host-local addresses, and a kubelet
# built from the same pinned Kubernetes module as the control plane, registered under the Node
# authorizer with its own client and serving certificates.
#
# Sourced by hack/control-plane.sh, whose variables (STATE_DIR, PKI, LOG_DIR, the ports, ...) and
# process bookkeeping (proc_start, proc_alive, proc_stop) it uses.
#
# A node changes the machine in ways a process list does not show: mounts, cgroups, a network
# bridge, iptables chains, kernel settings the kubelet and the bridge plugin change, a few paths
# the kubelet insists on. `node_up` records what it is about to touch (NODE_DIR/before) and
# `node_down` puts every one of those back, so that a machine after `down` is the machine before
# `up`; test/node/cleanup.test.ts compares the two.

NODE_NAME=kubelet-node-0
NODE_DIR="$STATE_DIR/node"
NODE_BRIDGE=awbr0
NODE_POD_CIDR=10.244.0.0/24
# The bridge's own address is the node's address: it exists on every machine (the script creates
# it), it is reachable from the host and from every pod, and it names no real network.
NODE_IP=10.244.0.1
# The ClusterIP of the `kubernetes` Service (the first address of SERVICE_CIDR). There is no
# kube-proxy, so one DNAT rule takes pods' in-cluster API traffic to the API server on loopback.
KUBERNETES_SERVICE_IP=10.0.0.1
NODE_NAT_CHAIN=AGENT-WATCHDOG-SVC
CONTAINERD_SOCK="$NODE_DIR/containerd/containerd.sock"
# Marks which cluster owns the machine's one real node (a second kubelet would fight the first
# over its bridge, its ports and the kubelet's fixed paths). Removed by `down`.
NODE_OWNER_FILE=/run/agent-watchdog-real-node
# Settings the kubelet (setupKernelTunables) and the CNI bridge plugin change at start.
NODE_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward)
# Paths outside the state dir that the kubelet or containerd create whatever they are told.
NODE_FIXED_PATHS=(/var/lib/kubelet /var/log/containers /var/log/pods /run/containerd /var/lib/cni /etc/cni)
# Cgroups made in every hierarchy: the kubelet's, and containerd's default parent.
NODE_CGROUPS=(kubepods k8s.io)
NODE_PACKAGES="containerd runc containernetworking-plugins iptables iproute2"

node_ctr() {
	ctr --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"
}

# Fails with what to install when the node's programs are missing.
node_require() {
	local missing=() tool
	for tool in containerd containerd-shim-runc-v2 runc ctr iptables ip gcc; do
		command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
	done
	[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/firewall ]] || missing+=("CNI plugins in /usr/lib/cni")
	((${#missing[@]} == 0)) || aw_die "the real node needs ${missing[*]} (Debian: apt-get install $NODE_PACKAGES gcc libc6-dev)"
	(($(id -u) == 0)) || aw_die "the real node needs root (it runs containers, mounts and a network bridge)"
}

load_node_ports() {
	[[ -s "$NODE_DIR/ports" ]] || return 1
	# shellcheck source=/dev/null
	source "$NODE_DIR/ports"
}

ensure_node_ports() {
	if load_node_ports; then
		# As with the control plane's ports: a listener this state has no record of would make
		# the kubelet fail at bind.
		if proc_alive kubelet || { aw_snapshot_used_ports && ! aw_port_in_use "$KUBELET_PORT" && ! aw_port_in_use "$KUBELET_HEALTHZ_PORT"; }; then
			return 0
		fi
		aw_log "the kubelet's saved ports are held by processes this state does not know; picking new ones"
	fi
	aw_snapshot_used_ports
	KUBELET_PORT="$(aw_pick_port 10250 "$APISERVER_PORT")"
	KUBELET_HEALTHZ_PORT="$(aw_pick_port 10248 "$APISERVER_PORT" "$KUBELET_PORT")"
	printf 'KUBELET_PORT=%s\nKUBELET_HEALTHZ_PORT=%s\n' "$KUBELET_PORT" "$KUBELET_HEALTHZ_PORT" >"$NODE_DIR/ports.tmp"
	mv -f "$NODE_DIR/ports.tmp" "$NODE_DIR/ports"
}

# ---------------------------------------------------------------------------------------------
# What the machine looked like before the node, so that `down` can restore exactly that.

node_record_machine() {
	local before="$NODE_DIR/before"
	[[ -e "$before/done" ]] && return 0
	mkdir -p "$before"
	local name path
	for name in "${NODE_SYSCTLS[@]}"; do
		printf '%s=%s\n' "$name" "$(sysctl -n "$name" 2>/dev/null || echo '')"
	done >"$before/sysctl"
	for path in "${NODE_FIXED_PATHS[@]}"; do
		[[ -e "$path" ]] && printf '%s\n' "$path"
	done >"$before/paths" || true
	: >"$before/cgroups"
	for name in "${NODE_CGROUPS[@]}"; do
		for path in /sys/fs/cgroup/*/"$name"; do
			if [[ -d "$path" ]]; then printf '%s\n' "$path" >>"$before/cgroups"; fi
		done
	done
	iptables_snapshot >"$before/iptables"
	nft list tables 2>/dev/null >"$before/nft-tables" || true
	: >"$before/done"
}

# ---------------------------------------------------------------------------------------------
# Certificates and configuration.

ensure_node_pki() {
	[[ -s "$PKI/kubelet-node.crt" ]] ||
		issue_cert kubelet-node "/O=system:nodes/CN=system:node:$NODE_NAME" client
	if [[ ! -s "$PKI/kubelet-serving.crt" ]]; then
		# The serving certificate names the node's address, which the API server dials for logs
		# and exec and verifies against the cluster CA (--kubelet-certificate-authority).
		cat >"$PKI/kubelet-serving.cnf" <<-EOF
			[req]
			distinguished_name = dn
			prompt = no
			[dn]
			CN = $NODE_NAME
			[serving]
			basicConstraints = critical,CA:FALSE
			keyUsage = critical,digitalSignature,keyEncipherment
			extendedKeyUsage = serverAuth
			authorityKeyIdentifier = keyid
			subjectAltName = IP:$NODE_IP,DNS:$NODE_NAME
		EOF
		openssl req -x509 -new "${KEY_OPTS[@]}" -config "$PKI/kubelet-serving.cnf" -extensions serving \
			-CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -keyout "$PKI/kubelet-serving.key" -out "$PKI/kubelet-serving.crt" \
			-subj "/CN=$NODE_NAME" -days 3650 -sha256 -set_serial "$(random_serial)" 2>/dev/null ||
			aw_die "issuing the kubelet's serving certificate failed"
	fi
	[[ -s "$NODE_DIR/kubelet.kubeconfig" ]] ||
		write_kubeconfig "$NODE_DIR/kubelet.kubeconfig" kubelet-node "system:node:$NODE_NAME"
}

# The pause image: one static binary, as a docker-archive tarball built without any image tool,
# cached by the hash of its source so that every `up` after the first just imports it.
pause_image_ref() {
	printf 'localhost/agent-watchdog/pause:%s\n' "$(sha256sum "$HACK_DIR/node/pause.c" | cut -c1-12)"
}

ensure_pause_archive() {
	local ref tag archive work
	ref="$(pause_image_ref)"
	tag="${ref##*:}"
	archive="$CACHE_BIN/../images/pause-$tag.tar"
	if [[ -s "$archive" ]]; then
		PAUSE_ARCHIVE="$archive"
		return 0
	fi
	work="$(mktemp -d)"
	BUILD_TMP_DIRS+=("$work")
	mkdir -p "$work/rootfs" "$(dirname "$archive")"
	gcc -static -Os -s -o "$work/rootfs/pause" "$HACK_DIR/node/pause.c" || aw_die "building the pause program failed (needs gcc and libc6-dev)"
	chmod 0755 "$work/rootfs/pause"
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/rootfs" -cf "$work/layer.tar" pause
	local diff_id config_id
	diff_id="$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
	printf '{"architecture":"amd64","os":"linux","config":{"User":"65535:65535","Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
		"$diff_id" >"$work/config.json"
	config_id="$(sha256sum "$work/config.json" | cut -d' ' -f1)"
	mkdir -p "$work/archive/$diff_id"
	mv "$work/layer.tar" "$work/archive/$diff_id/layer.tar"
	mv "$work/config.json" "$work/archive/$config_id.json"
	printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$config_id" "$ref" "$diff_id" >"$work/archive/manifest.json"
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/archive" -cf "$archive.tmp" .
	mv -f "$archive.tmp" "$archive"
	PAUSE_ARCHIVE="$archive"
}

write_containerd_config() {
	mkdir -p "$NODE_DIR/containerd" "$NODE_DIR/cni" "$NODE_DIR/cni-ipam"
	cat >"$NODE_DIR/containerd/config.toml" <<-EOF
		# containerd of the real node: nothing outside the state dir but its shims' sockets, which
		# containerd 1.6 always puts in /run/containerd/s and removes when each shim exits.
		version = 2
		root = "$NODE_DIR/containerd/root"
		state = "$NODE_DIR/containerd/state"
		disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

		[grpc]
		  address = "$CONTAINERD_SOCK"
		[ttrpc]
		  address = "$CONTAINERD_SOCK.ttrpc"
		[debug]
		  level = "warn"

		[plugins."io.containerd.internal.v1.opt"]
		  path = "$NODE_DIR/containerd/opt"
		[plugins."io.containerd.grpc.v1.cri"]
		  sandbox_image = "$(pause_image_ref)"
		  # This machine's root may not lower oom_score_adj (no CAP_SYS_RESOURCE).
		  restrict_oom_score_adj = true
		  netns_mounts_under_state_dir = true
		  stream_server_address = "127.0.0.1"
		  stream_server_port = "0"
		  [plugins."io.containerd.grpc.v1.cri".cni]
		    bin_dir = "/usr/lib/cni"
		    conf_dir = "$NODE_DIR/cni"
		    max_conf_num = 1
		  [plugins."io.containerd.grpc.v1.cri".containerd]
		    snapshotter = "overlayfs"
		    default_runtime_name = "runc"
		    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
		      runtime_type = "io.containerd.runc.v2"
		      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
		        SystemdCgroup = false
		        Root = "$NODE_DIR/containerd/runc"
	EOF
	# A bridge with host-local addresses, so pods get addresses and reach each other; the firewall
	# plugin admits their traffic even where a FORWARD policy of DROP (dockerd's) is in force.
	cat >"$NODE_DIR/cni/10-agent-watchdog.conflist" <<-EOF
		{
		  "cniVersion": "1.0.0",
		  "name": "agent-watchdog",
		  "plugins": [
		    {
		      "type": "bridge",
		      "bridge": "$NODE_BRIDGE",
		      "isGateway": true,
		      "ipMasq": false,
		      "hairpinMode": true,
		      "ipam": {
		        "type": "host-local",
		        "ranges": [[{ "subnet": "$NODE_POD_CIDR", "gateway": "$NODE_IP" }]],
		        "routes": [{ "dst": "0.0.0.0/0" }],
		        "dataDir": "$NODE_DIR/cni-ipam"
		      }
		    },
		    { "type": "firewall", "backend": "iptables" }
		  ]
		}
	EOF
}

write_kubelet_config() {
	mkdir -p "$NODE_DIR/kubelet" "$NODE_DIR/pod-logs"
	cat >"$NODE_DIR/kubelet-config.yaml" <<-EOF
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		address: $NODE_IP
		port: $KUBELET_PORT
		readOnlyPort: 0
		healthzBindAddress: 127.0.0.1
		healthzPort: $KUBELET_HEALTHZ_PORT
		# No anonymous access: the API server presents its kubelet client certificate, and every
		# request is authorized by a SubjectAccessReview.
		authentication:
		  anonymous: {enabled: false}
		  webhook: {enabled: true, cacheTTL: 30s}
		  x509: {clientCAFile: $PKI/ca.crt}
		authorization:
		  mode: Webhook
		  webhook: {cacheAuthorizedTTL: 30s, cacheUnauthorizedTTL: 5s}
		tlsCertFile: $PKI/kubelet-serving.crt
		tlsPrivateKeyFile: $PKI/kubelet-serving.key
		containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
		cgroupDriver: cgroupfs
		failCgroupV1: false
		failSwapOn: false
		podLogsDir: $NODE_DIR/pod-logs
		resolvConf: /etc/resolv.conf
		clusterDomain: cluster.local
		# This machine's root may not lower oom_score_adj, and its hard limit on open files is
		# lower than the kubelet's default.
		oomScoreAdj: 0
		maxOpenFiles: 20000
		makeIPTablesUtilChains: false
		protectKernelDefaults: false
		serializeImagePulls: false
		# Images are imported, never pulled: never collect them, and evict only when really short.
		imageGCHighThresholdPercent: 100
		imageGCLowThresholdPercent: 99
		evictionHard: {memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%, nodefs.inodesFree: 2%}
		shutdownGracePeriod: 0s
		kubeAPIQPS: 50
		kubeAPIBurst: 100
	EOF
}

# ---------------------------------------------------------------------------------------------
# The network: the bridge exists before the kubelet (its address is the node's), and one DNAT rule
# stands in for kube-proxy's for the `kubernetes` Service.

node_network_up() {
	if ! ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
		ip link add "$NODE_BRIDGE" type bridge
	fi
	ip addr replace "$NODE_IP/${NODE_POD_CIDR#*/}" dev "$NODE_BRIDGE"
	ip link set "$NODE_BRIDGE" up
	# DNAT to 127.0.0.1 is allowed only for packets arriving on an interface that routes loopback
	# addresses; the setting lives and dies with the bridge.
	sysctl -qw "net.ipv4.conf.$NODE_BRIDGE.route_localnet=1"
	# Not flushed: `up` runs again to restart a component while pods still use what node-expose
	# added. Only a Service rule to another API server port (an earlier cluster's) is replaced.
	iptables -t nat -N "$NODE_NAT_CHAIN" 2>/dev/null || true
	local service=(-d "$KUBERNETES_SERVICE_IP/32" -p tcp -m tcp --dport 443 -j DNAT --to-destination "127.0.0.1:$APISERVER_PORT") line rule=()
	if ! iptables -t nat -C "$NODE_NAT_CHAIN" "${service[@]}" 2>/dev/null; then
		while IFS= read -r line; do
			[[ "$line" == "-A $NODE_NAT_CHAIN -d $KUBERNETES_SERVICE_IP/32 "* ]] || continue
			read -ra rule <<<"${line#-A "$NODE_NAT_CHAIN" }"
			iptables -t nat -D "$NODE_NAT_CHAIN" "${rule[@]}"
		done < <(iptables -t nat -S "$NODE_NAT_CHAIN")
		iptables -t nat -I "$NODE_NAT_CHAIN" 1 "${service[@]}"
	fi
	iptables -t nat -C PREROUTING -i "$NODE_BRIDGE" -j "$NODE_NAT_CHAIN" 2>/dev/null ||
		iptables -t nat -A PREROUTING -i "$NODE_BRIDGE" -j "$NODE_NAT_CHAIN"
}

# ---------------------------------------------------------------------------------------------
# Start, health, pause.

node_healthy() {
	case "$1" in
	containerd) node_ctr version >/dev/null 2>&1 ;;
	kubelet) [[ "$(curl -fsS --max-time 2 "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz" 2>/dev/null)" == ok ]] ;;
	*) return 1 ;;
	esac
}

# True while the kubelet is stopped by node-pause (state T in /proc).
kubelet_paused() {
	proc_alive kubelet || return 1
	local state
	state="$(awk '/^State:/ {print $2}' "/proc/$REC_PID/status" 2>/dev/null)"
	[[ "$state" == T ]]
}

node_ready() {
	node_ready_named "$NODE_NAME"
}

pause_image_present() {
	node_ctr images ls -q 2>/dev/null | grep -qxF "$(pause_image_ref)"
}

# The API server's identity towards kubelets may do what kubeadm's may: everything on the
# kubelet API (logs, exec, port-forward, metrics), nothing else.
ensure_kubelet_api_binding() {
	local code
	code="$(api_status -X POST -H 'Content-Type: application/json' \
		"https://127.0.0.1:$APISERVER_PORT/apis/rbac.authorization.k8s.io/v1/clusterrolebindings" --data-binary @- <<-EOF
			{
			  "apiVersion": "rbac.authorization.k8s.io/v1",
			  "kind": "ClusterRoleBinding",
			  "metadata": {"name": "agent-watchdog:kube-apiserver-kubelet-client"},
			  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kubelet-api-admin"},
			  "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kube-apiserver-kubelet-client"}]
			}
		EOF
	)"
	case "$code" in
	201 | 409) ;;
	*) aw_die "creating the kubelet API binding failed (HTTP $code)" ;;
	esac
}

# Claims the machine's real node for this cluster, or says who has it.
claim_real_node() {
	if [[ -s "$NODE_OWNER_FILE" ]]; then
		local owner
		owner="$(cat "$NODE_OWNER_FILE")"
		if [[ "$owner" != "$STATE_DIR" ]]; then
			aw_die "this machine's real node belongs to the cluster in $owner; stop it first (AGENT_WATCHDOG_STATE=${owner%/control-plane} hack/control-plane.sh down)"
		fi
	fi
	printf '%s\n' "$STATE_DIR" >"$NODE_OWNER_FILE"
}

# Starts containerd and the kubelet (whichever is not running) and waits for the node to be Ready.
node_up() {
	node_require
	mkdir -p "$NODE_DIR"
	claim_real_node
	node_record_machine
	ensure_node_ports
	ensure_node_pki
	ensure_pause_archive
	write_containerd_config
	write_kubelet_config
	node_network_up
	ensure_kubelet_api_binding
	if kubelet_paused; then
		aw_log "the kubelet was paused (node-pause); resuming it"
		kill -CONT "$REC_PID"
	fi
	# The control plane keeps its files private (umask 077), but what containerd and the kubelet
	# create is read by containers running as other users: image layers, volumes, the pod dirs.
	local saved_umask
	saved_umask="$(umask)"
	umask 022
	if ! proc_alive containerd; then
		proc_start containerd "$(command -v containerd)" --config "$NODE_DIR/containerd/config.toml"
	fi
	wait_or_fail "containerd" node_healthy containerd
	pause_image_present || node_ctr images import "$PAUSE_ARCHIVE" >&2 || aw_die "importing the pause image failed"
	if ! proc_alive kubelet; then
		proc_start kubelet "${BIN[kubelet]}" \
			--config="$NODE_DIR/kubelet-config.yaml" \
			--kubeconfig="$NODE_DIR/kubelet.kubeconfig" \
			--root-dir="$NODE_DIR/kubelet" \
			--hostname-override="$NODE_NAME" \
			--node-ip="$NODE_IP" \
			--node-labels="watchdog.dev/node=real" \
			--v=1
	fi
	umask "$saved_umask"
	wait_or_fail "kubelet /healthz" node_healthy kubelet
	wait_or_fail "node $NODE_NAME to be Ready" node_ready
	: >"$STATE_DIR/kubelet"
}

# Makes a server on the host's loopback reachable from pods at the node's address, port for port
# (the ledger's PostgreSQL, a test's fake e-mail service). Only the ports asked for: pods must not
# reach etcd or anything else that trusts loopback.
cmd_node_expose() {
	(($# > 0)) || aw_die "usage: hack/control-plane.sh node-expose PORT..."
	load_ports || aw_die "the control plane is not up"
	[[ -e "$STATE_DIR/kubelet" ]] || aw_die "no real node in this cluster (hack/control-plane.sh up --kubelet)"
	local port
	for port in "$@"; do
		if ! [[ "$port" =~ ^[0-9]+$ ]] || ((port == 0 || port > 65535)); then aw_die "not a port: $port"; fi
		[[ "$port" == "$APISERVER_PORT" || "$port" == "$ETCD_PORT" || "$port" == "$ETCD_PEER_PORT" ]] &&
			aw_die "port $port belongs to the control plane; pods reach the API server at $KUBERNETES_SERVICE_IP:443"
		iptables -t nat -C "$NODE_NAT_CHAIN" -d "$NODE_IP/32" -p tcp --dport "$port" -j DNAT --to-destination "127.0.0.1:$port" 2>/dev/null ||
			iptables -t nat -A "$NODE_NAT_CHAIN" -d "$NODE_IP/32" -p tcp --dport "$port" -j DNAT --to-destination "127.0.0.1:$port"
		aw_log "pods reach 127.0.0.1:$port of this machine at $NODE_IP:$port"
	done
	printf 'export NODE_HOST_ADDRESS=%s\n' "$NODE_IP" >&3
}

# SIGSTOP / SIGCONT of the kubelet: its containers keep running, and the API server hears nothing
# from the node, as when a node is cut off from the control plane.
cmd_node_pause() {
	load_ports || aw_die "the control plane is not up"
	proc_alive kubelet || aw_die "no kubelet is running (hack/control-plane.sh up --kubelet)"
	kill -STOP "$REC_PID"
	aw_log "kubelet (pid $REC_PID) paused; its containers keep running"
}

cmd_node_resume() {
	load_ports || aw_die "the control plane is not up"
	load_node_ports || aw_die "no real node in this cluster"
	proc_alive kubelet || aw_die "no kubelet is running (hack/control-plane.sh up --kubelet)"
	kill -CONT "$REC_PID"
	aw_log "kubelet (pid $REC_PID) resumed; waiting for node $NODE_NAME to be Ready"
	aw_wait_for "${CONTROL_PLANE_TIMEOUT:-120}" node_ready || aw_die "node $NODE_NAME did not become Ready again"
	aw_log "node $NODE_NAME is Ready"
}

node_status() {
	local name state rc=0
	for name in containerd kubelet; do
		if proc_alive "$name"; then
			if [[ "$name" == kubelet ]] && kubelet_paused; then
				state="paused (node-pause)"
				rc=1
			elif node_healthy "$name"; then state=healthy; else
				state=unhealthy
				rc=1
			fi
			printf '%-24s pid %-8s %s\n' "$name" "$REC_PID" "$state"
		else
			printf '%-24s %-12s %s\n' "$name" "-" "not running"
			rc=1
		fi
	done
	if node_ready; then state=Ready; else
		state="not Ready"
		rc=1
	fi
	printf '%-24s %-12s %s\n' "node $NODE_NAME" "$NODE_IP" "$state"
	return "$rc"
}

# ---------------------------------------------------------------------------------------------
# Down: stop everything, then put back what the machine looked like before.

# Pids of shims serving this containerd (they outlive containerd by design).
node_shim_pids() {
	local dir cmdline
	for dir in /proc/[0-9]*; do
		cmdline="$(tr '\0' ' ' 2>/dev/null <"$dir/cmdline")" || continue
		[[ "$cmdline" == *containerd-shim* && "$cmdline" == *"$CONTAINERD_SOCK"* ]] && printf '%s\n' "${dir#/proc/}"
	done
	return 0
}

node_unmount_all() {
	local mounts
	# Deepest first; the kubelet's root is a shared bind mount of itself.
	mapfile -t mounts < <(awk -v dir="$NODE_DIR" '$5 == dir || index($5, dir "/") == 1 {print $5}' /proc/self/mountinfo | awk '{print length, $0}' | sort -rn | cut -d' ' -f2-)
	local m
	for m in "${mounts[@]}"; do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || aw_log "warning: could not unmount $m"
	done
}

node_remove_cgroups() {
	local before="$NODE_DIR/before/cgroups" name dir
	for name in "${NODE_CGROUPS[@]}"; do
		for dir in /sys/fs/cgroup/*/"$name"; do
			[[ -d "$dir" ]] || continue
			grep -qxF "$dir" "$before" 2>/dev/null && continue
			find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
			if [[ -d "$dir" ]]; then aw_log "warning: could not remove cgroup $dir"; fi
		done
	done
}

# iptables-save without counters: the part of the rules that is the machine's configuration.
iptables_snapshot() {
	{ iptables-save 2>/dev/null || true; } | { grep -E '^(\*|:|-A)' || true; } | sed -E 's/ \[[0-9]+:[0-9]+\]$//'
}

# Prints the lines of table $1 in snapshot $2.
iptables_table() {
	awk -v t="*$1" '/^\*/ {cur = $0; next} cur == t' <<<"$2"
}

# Removes the rules and chains that were not there before `up`, and the nf_tables tables that
# iptables left behind empty.
node_restore_iptables() {
	[[ -e "$NODE_DIR/before/iptables" ]] || return 0
	local before now tables table was line chain
	before="$(cat "$NODE_DIR/before/iptables")"
	now="$(iptables_snapshot)"
	mapfile -t tables < <(sed -n 's/^\*//p' <<<"$now")
	for table in "${tables[@]}"; do
		was="$(iptables_table "$table" "$before")"
		# Newest rules first, so that the jumps go before the chains they name.
		while IFS= read -r line; do
			[[ -n "$line" ]] || continue
			grep -qxF -- "$line" <<<"$was" && continue
			# iptables-save quotes the way a shell does, so that it can be read back.
			eval "iptables -t \"\$table\" -D ${line#-A }" 2>/dev/null || aw_log "warning: could not remove iptables rule: $line"
		done < <(iptables_table "$table" "$now" | grep '^-A' | tac)
		while IFS= read -r chain; do
			[[ -n "$chain" ]] || continue
			grep -q "^:$chain " <<<"$was" && continue
			iptables -t "$table" -F "$chain" 2>/dev/null || true
			iptables -t "$table" -X "$chain" 2>/dev/null || aw_log "warning: could not remove iptables chain $table/$chain"
		done < <(iptables_table "$table" "$now" | awk '/^:/ && $2 == "-" {print substr($1, 2)}')
	done
	command -v nft >/dev/null 2>&1 || return 0
	local family name
	while read -r _ family name; do
		grep -qxF "table $family $name" "$NODE_DIR/before/nft-tables" 2>/dev/null && continue
		# Empty: nothing but the table, its chains' headers and their closing braces.
		if ! nft list table "$family" "$name" 2>/dev/null | grep -qvE '^\s*(table .*\{|chain .*\{|type .*;|\}|)$'; then
			nft delete table "$family" "$name" 2>/dev/null || aw_log "warning: could not remove nf_tables table $family $name"
		fi
	done < <(nft list tables 2>/dev/null)
}

node_restore_sysctls() {
	local file="$NODE_DIR/before/sysctl" line
	[[ -e "$file" ]] || return 0
	while IFS= read -r line; do
		[[ -n "${line#*=}" ]] && sysctl -qw "$line" 2>/dev/null
	done <"$file"
	return 0
}

node_remove_paths() {
	local file="$NODE_DIR/before/paths" path
	[[ -e "$NODE_DIR/before/done" ]] || return 0
	for path in "${NODE_FIXED_PATHS[@]}"; do
		grep -qxF "$path" "$file" 2>/dev/null && continue
		[[ -e "$path" ]] || continue
		# Only what the node made: mounts below it are gone by now.
		rm -rf --one-file-system "$path" 2>/dev/null || aw_log "warning: could not remove $path"
	done
}

node_down() {
	[[ -d "$NODE_DIR" ]] || return 0
	load_node_ports || true
	# A paused kubelet cannot act on SIGTERM until it is resumed.
	if kubelet_paused; then kill -CONT "$REC_PID" 2>/dev/null || true; fi
	proc_stop kubelet
	if proc_alive containerd; then
		local id ids
		mapfile -t ids < <(node_ctr tasks ls -q 2>/dev/null)
		for id in "${ids[@]}"; do node_ctr tasks kill --all --signal SIGKILL "$id" >/dev/null 2>&1 || true; done
		for id in "${ids[@]}"; do node_ctr tasks delete --force "$id" >/dev/null 2>&1 || true; done
		mapfile -t ids < <(node_ctr containers ls -q 2>/dev/null)
		for id in "${ids[@]}"; do node_ctr containers delete "$id" >/dev/null 2>&1 || true; done
	fi
	proc_stop containerd
	local pid
	for pid in $(node_shim_pids); do kill -KILL "$pid" 2>/dev/null || true; done
	aw_wait_for 5 test -z "$(node_shim_pids)" || aw_log "warning: containerd shims still running: $(node_shim_pids | tr '\n' ' ')"
	node_unmount_all
	node_remove_cgroups
	ip link show "$NODE_BRIDGE" >/dev/null 2>&1 && ip link delete "$NODE_BRIDGE"
	node_restore_iptables
	node_restore_sysctls
	node_remove_paths
	if [[ -s "$NODE_OWNER_FILE" && "$(cat "$NODE_OWNER_FILE")" == "$STATE_DIR" ]]; then rm -f "$NODE_OWNER_FILE"; fi
	rm -f "$STATE_DIR/kubelet"
}
