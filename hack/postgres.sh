#!/usr/bin/env bash
# A throwaway local PostgreSQL server for development and tests, run from the
# distribution's server binaries (no container runtime needed).
#
# Usage: hack/postgres.sh <command>
#
#   up      initialise (first time) and start the server; idempotent. Prints
#           `export DATABASE_URL=postgres://watchdog@127.0.0.1:<port>/watchdog`
#   down    stop the server and delete its data
#   stop    stop the server but keep the data (e.g. to simulate an outage)
#   start   start a stopped server again, with the same data and port
#   status  exit 0 if the server accepts connections
#   env     print the export line of a running server
#
# Stdout carries only the export line; everything else goes to stderr.
#
# The server trusts the role `watchdog` on 127.0.0.1 without a password (it
# owns the `watchdog` database and may create more, so test suites can make
# one database per run) and the `postgres` superuser only on its private unix
# socket. Durability is off (fsync, synchronous_commit, full_page_writes):
# data is disposable and speed matters more.
#
# Environment:
#   AGENT_WATCHDOG_STATE  runtime state root (default $XDG_RUNTIME_DIR or /tmp,
#                         /agent-watchdog-<uid>); this script uses <root>/postgres
#   POSTGRES_PORT         port to use on first `up` (default 25432, or a random
#                         free port if that one is taken). Outside the kernel's
#                         ephemeral range (32768-60999 here), so that while the
#                         server is stopped (the soak stops it) no client socket
#                         or port-0 listener can take its port and keep it from
#                         starting again
#   PG_BIN                directory with initdb/pg_ctl/postgres (default: the
#                         newest /usr/lib/postgresql/*/bin, else $PATH)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"
AW_LOG_PREFIX=postgres

STATE_ROOT="$(aw_state_root)"
STATE_DIR="$STATE_ROOT/postgres"
DATA_DIR="$STATE_DIR/data"
LOG_FILE="$STATE_DIR/postgres.log"
PORT_FILE="$STATE_DIR/port"
DB_NAME=watchdog
DB_USER=watchdog

find_pg_bin() {
	if [[ -n "${PG_BIN:-}" ]]; then
		printf '%s\n' "$PG_BIN"
		return 0
	fi
	local dir
	dir="$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)"
	if [[ -n "$dir" && -x "$dir/pg_ctl" ]]; then
		printf '%s\n' "$dir"
		return 0
	fi
	command -v pg_ctl >/dev/null 2>&1 || aw_die "PostgreSQL server binaries not found (Debian: apt-get install postgresql); or set PG_BIN"
	dirname "$(readlink -f "$(command -v pg_ctl)")"
}

# PostgreSQL refuses to run as root, and should not anyway: as root, every
# server command runs as the `postgres` account and the data dir belongs to it.
AS_PG=()
setup_identity() {
	if (($(id -u) != 0)); then
		return 0
	fi
	id postgres >/dev/null 2>&1 || aw_die "running as root needs a 'postgres' OS user to run the server as"
	AS_PG=(runuser -u postgres --)
}

# Runs PostgreSQL tool $1 as the server's account. The result descriptor (3)
# and the lock descriptor are closed for it, because the server that pg_ctl
# starts would inherit them: `$(hack/postgres.sh up)` would then never return
# and the lock would stay held for as long as the server runs.
pg() {
	local tool=$1
	shift
	"${AS_PG[@]}" "$PG_BIN/$tool" "$@" 3>&- 8>&- 9>&-
}

# postgres lives below the state root, so (as root) that root must be
# traversable by the postgres account; refuse early with a clear message
# rather than letting initdb fail obscurely.
prepare_state_dir() {
	mkdir -p "$STATE_DIR"
	if ((${#AS_PG[@]})); then
		chown postgres: "$STATE_DIR"
		"${AS_PG[@]}" test -x "$STATE_DIR" ||
			aw_die "the postgres user cannot reach $STATE_DIR; point AGENT_WATCHDOG_STATE at a directory it can traverse"
	fi
	chmod 700 "$STATE_DIR"
}

port() {
	cat "$PORT_FILE"
}

database_url() {
	printf 'postgres://%s@127.0.0.1:%s/%s\n' "$DB_USER" "$(port)" "$DB_NAME"
}

running() {
	[[ -s "$DATA_DIR/PG_VERSION" ]] && pg pg_ctl -D "$DATA_DIR" status >/dev/null 2>&1
}

accepting() {
	[[ -s "$PORT_FILE" ]] &&
		"$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$(port)" -d "$DB_NAME" -U "$DB_USER" >/dev/null 2>&1
}

initialize() {
	local port
	rm -rf "$DATA_DIR"
	port="${POSTGRES_PORT:-25432}"
	aw_port_in_use "$port" && port="$(aw_pick_port "$port")"
	# Unix socket paths are limited to 107 bytes; fail with a clear message
	# rather than with a server that will not start.
	((${#STATE_DIR} + 17 <= 107)) ||
		aw_die "state dir path too long for a unix socket ($STATE_DIR); set a shorter AGENT_WATCHDOG_STATE"
	aw_log "initialising $DATA_DIR"
	# --no-sync: the data is disposable, and syncing is most of initdb's time.
	pg initdb -D "$DATA_DIR" --username=postgres --auth=reject --encoding=UTF8 \
		--locale=C --no-sync >"$STATE_DIR/initdb.log" 2>&1 || {
		cat "$STATE_DIR/initdb.log" >&2
		aw_die "initdb failed"
	}
	"${AS_PG[@]}" tee -a "$DATA_DIR/postgresql.conf" >/dev/null <<-EOF

		# Settings for a disposable local test server.
		listen_addresses = '127.0.0.1'
		port = $port
		unix_socket_directories = '$STATE_DIR'
		unix_socket_permissions = 0700
		max_connections = 200
		fsync = off
		synchronous_commit = off
		full_page_writes = off
	EOF
	# First match wins: the superuser only over the private socket, the
	# watchdog role on loopback and from the pods of the real node
	# (hack/control-plane.sh up --kubelet; they reach this loopback server
	# through `hack/control-plane.sh node-expose`), nothing else.
	"${AS_PG[@]}" tee "$DATA_DIR/pg_hba.conf" >/dev/null <<-EOF
		local all postgres trust
		host all $DB_USER 127.0.0.1/32 trust
		host all $DB_USER 10.244.0.0/24 trust
	EOF
	# Single-user mode creates the role and database before the server ever
	# listens, so no client ever sees a half-initialised server.
	if ! pg postgres --single -D "$DATA_DIR" postgres >>"$STATE_DIR/initdb.log" 2>&1 <<-EOF; then
		CREATE ROLE $DB_USER LOGIN CREATEDB;
		CREATE DATABASE $DB_NAME OWNER $DB_USER;
	EOF
		cat "$STATE_DIR/initdb.log" >&2
		aw_die "creating the $DB_NAME role and database failed"
	fi
	printf '%s\n' "$port" >"$PORT_FILE"
}

start_server() {
	aw_port_in_use "$(port)" && aw_die "port $(port) is taken by another process; run '$0 down' to start over on a new port"
	pg pg_ctl -D "$DATA_DIR" -l "$LOG_FILE" -w -t 60 start >/dev/null || {
		tail -n 25 "$LOG_FILE" >&2 || true
		aw_die "PostgreSQL did not start"
	}
	aw_wait_for 30 accepting || aw_die "PostgreSQL started but does not accept connections on port $(port)"
}

cmd_up() {
	local start
	start="$(aw_now_ms)"
	if running && accepting; then
		aw_log "already up"
		printf 'export DATABASE_URL=%s\n' "$(database_url)" >&3
		return 0
	fi
	prepare_state_dir
	if [[ ! -s "$DATA_DIR/PG_VERSION" || ! -s "$PORT_FILE" ]]; then
		initialize
	fi
	running || start_server
	aw_log "up in $(aw_since "$start") (data: $DATA_DIR)"
	printf 'export DATABASE_URL=%s\n' "$(database_url)" >&3
}

cmd_start() {
	[[ -s "$DATA_DIR/PG_VERSION" && -s "$PORT_FILE" ]] || aw_die "no data in $DATA_DIR; use '$0 up' first"
	if running; then
		aw_log "already running"
		return 0
	fi
	local start
	start="$(aw_now_ms)"
	start_server
	aw_log "started in $(aw_since "$start")"
}

cmd_stop() {
	if ! running; then
		aw_log "not running"
		return 0
	fi
	local start
	start="$(aw_now_ms)"
	# fast: disconnect clients and shut down cleanly without waiting for them.
	pg pg_ctl -D "$DATA_DIR" -m fast -w -t 60 stop >/dev/null
	aw_log "stopped in $(aw_since "$start") (data kept in $DATA_DIR)"
}

cmd_down() {
	cmd_stop
	case "$STATE_DIR" in
	*/postgres) rm -rf "$STATE_DIR" ;;
	*) aw_die "refusing to delete unexpected state dir $STATE_DIR" ;;
	esac
	aw_log "removed $STATE_DIR"
}

cmd_status() {
	if running && accepting; then
		echo "postgres: up on 127.0.0.1:$(port) (data: $DATA_DIR)"
		return 0
	fi
	if [[ -s "$DATA_DIR/PG_VERSION" ]]; then
		echo "postgres: stopped (data kept in $DATA_DIR)"
	else
		echo "postgres: down"
	fi
	return 1
}

cmd_env() {
	if ! running || ! accepting; then
		aw_die "PostgreSQL is not running (run: hack/postgres.sh up)"
	fi
	printf 'export DATABASE_URL=%s\n' "$(database_url)" >&3
}

usage() {
	aw_usage "${BASH_SOURCE[0]}"
}

main() {
	exec 3>&1 1>&2
	local cmd=${1:-help}
	(($#)) && shift
	(($# == 0)) || aw_die "unexpected arguments: $*"
	case "$cmd" in
	up | down | stop | start | status | env)
		PG_BIN="$(find_pg_bin)"
		setup_identity
		# Serialise invocations: a test's `stop` racing another's `up`
		# would otherwise see half-done state.
		[[ "$cmd" == status || "$cmd" == env ]] || aw_lock "$STATE_ROOT/postgres.lock" 9
		;;
	esac
	case "$cmd" in
	up) cmd_up ;;
	down) cmd_down ;;
	stop) cmd_stop ;;
	start) cmd_start ;;
	status) cmd_status >&3 ;;
	env) cmd_env ;;
	help | -h | --help) usage ;;
	*)
		usage
		exit 2
		;;
	esac
}

main "$@"
