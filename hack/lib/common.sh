# shellcheck shell=bash
# Helpers shared by the hack/*.sh scripts. Source it; it is not meant to be run.
#
# Conventions every script follows:
#   - stdout carries only machine-readable results (for example `export X=...`
#     lines meant for `eval`); all progress, warnings and errors go to stderr.
#   - Runtime state (data dirs, certificates, pids, logs) lives outside the
#     clone, so a `git clean` or a fresh checkout never loses a running
#     cluster's bookkeeping and nothing generated is ever committed by mistake.

# Root for per-user runtime state. Tests running in parallel can isolate
# themselves from each other (and from a developer's cluster) by exporting a
# different AGENT_WATCHDOG_STATE.
aw_state_root() {
	printf '%s\n' "${AGENT_WATCHDOG_STATE:-${XDG_RUNTIME_DIR:-/tmp}/agent-watchdog-$(id -u)}"
}

# Root for build artefacts that are expensive to produce (kube-apiserver takes
# about ten minutes on two cores). Keyed by tool version, so it can be shared by
# every clone and worktree on the machine.
aw_cache_root() {
	printf '%s\n' "${AGENT_WATCHDOG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-watchdog}"
}

aw_log() {
	printf '[%s] %s\n' "${AW_LOG_PREFIX:-${0##*/}}" "$*" >&2
}

aw_die() {
	aw_log "error: $*"
	exit 1
}

# Milliseconds since the epoch (GNU date).
aw_now_ms() {
	date +%s%3N
}

# Human-readable duration since a start time taken with aw_now_ms.
aw_since() {
	local ms=$(($(aw_now_ms) - $1))
	printf '%d.%01ds' $((ms / 1000)) $(((ms % 1000) / 100))
}

# Records the TCP ports listened on right now in AW_USED_PORTS, so that picking
# several ports in a row costs one `ss` run instead of one per candidate.
# Call it in the picking shell itself (not in a $(...) subshell).
aw_snapshot_used_ports() {
	command -v ss >/dev/null 2>&1 || return 0
	local local_addr
	AW_USED_PORTS=" "
	while read -r _ _ _ local_addr _; do
		AW_USED_PORTS+="${local_addr##*:} "
	done < <(ss -Htln 2>/dev/null)
}

# True if something on this machine already listens on TCP port $1, on any
# address. Only listeners count: connections lingering in TIME_WAIT after a
# server stopped do not keep a restarted server (which binds with
# SO_REUSEADDR, as PostgreSQL and Go servers do) from getting its port back.
aw_port_in_use() {
	local port=$1
	if [[ -n "${AW_USED_PORTS:-}" ]]; then
		[[ "$AW_USED_PORTS" == *" $port "* ]]
	elif command -v ss >/dev/null 2>&1; then
		[[ -n "$(ss -Htln "sport = :$port" 2>/dev/null)" ]]
	else
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
	fi
}

# Prints a free TCP port: $1 if it is free, otherwise a random one below the
# kernel's default ephemeral range (32768+), so it cannot collide with the
# source port of an outgoing connection. Further arguments are ports already
# promised to other components of the same stack.
aw_pick_port() {
	local preferred=$1
	shift
	local candidate tries
	candidate=$preferred
	for ((tries = 0; tries < 200; tries++)); do
		if [[ " $* " != *" $candidate "* ]] && ! aw_port_in_use "$candidate"; then
			printf '%s\n' "$candidate"
			return 0
		fi
		candidate=$((20000 + RANDOM % 12000))
	done
	aw_die "could not find a free TCP port"
}

# Polls a command until it succeeds or $1 seconds pass. Returns non-zero on
# timeout. The poll interval is short because every step of a warm start is
# on the critical path of the test suites that call these scripts.
aw_wait_for() {
	local timeout_s=$1
	shift
	local deadline=$(($(aw_now_ms) + timeout_s * 1000))
	until "$@"; do
		if (($(aw_now_ms) >= deadline)); then
			return 1
		fi
		sleep 0.1
	done
}

# Takes an exclusive lock on file $1 for the rest of the calling shell's life,
# on file descriptor $2 (8 or 9 by convention), telling the user when it has
# to wait. Fixed descriptors let every long-lived child be started with them
# closed (`8>&- 9>&-`): a daemon that inherited one would hold the lock until
# it exits and block the next invocation.
aw_lock() {
	local file=$1 fd=$2
	mkdir -p "$(dirname "$file")"
	eval "exec $fd>\"\$file\""
	if ! flock -n "$fd"; then
		aw_log "waiting for another invocation to release $file"
		flock "$fd"
	fi
}

# Prints a script's "# Usage:" header comment (up to its `set -euo` line) to stderr.
aw_usage() {
	sed -n '/^# Usage:/,/^set -euo/p' "$1" | sed '$d; s/^# \{0,1\}//' >&2
}
