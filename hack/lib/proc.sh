# shellcheck shell=bash
# Process bookkeeping for the components hack/control-plane.sh starts. Source it after
# common.sh, with PID_DIR and LOG_DIR set; STARTED lists what this invocation started.
#
# Each started process gets a record PID_DIR/<name>, "<pid> <start time> <boot id> <binary>".
# The start time is the kernel's (field 22 of /proc/<pid>/stat, in clock ticks since boot) and
# the boot id the kernel's too: together with the pid they name one process for good, whatever
# it is doing. A record is written as soon as the pid is known, before the process has finished
# exec'ing its binary, so that whatever happens next, a failed `up` can stop what it started.
#
# Why not the command line: while a process is inside execve (paging a large binary in from a
# cold disk can take seconds), /proc/<pid>/cmdline reads empty, exactly as a zombie's does. A
# check by command line takes such a process for dead; one by start time does not. A process is
# gone when its /proc entry is, or when it is a zombie (state Z or X) waiting to be reaped.
#
# AW_PROC (default /proc) lets a test point the checks at a made-up process table.
# AW_EXEC_TIMEOUT (default 120) is how many seconds proc_start waits for an exec to finish.

AW_PROC=${AW_PROC:-/proc}

# Sets PROC_STATE (R, S, D, T, Z, ...) and PROC_START from /proc/<pid>/stat; fails if there is
# no such process. Pure bash: liveness checks run in every poll of every wait.
proc_stat() {
	local line rest fields
	IFS= read -r line 2>/dev/null <"$AW_PROC/$1/stat" || return 1
	# The command name (field 2) is in parentheses and may hold spaces and parentheses itself.
	rest=${line##*) }
	read -r -a fields <<<"$rest"
	((${#fields[@]} >= 20)) || return 1
	PROC_STATE=${fields[0]}
	PROC_START=${fields[19]}
}

# Prints this boot's id (the kernel's), so that a record left from before a reboot matches nothing.
proc_boot_id() {
	local id=unknown
	IFS= read -r id 2>/dev/null <"$AW_PROC/sys/kernel/random/boot_id" || true
	printf '%s\n' "$id"
}

# Reads component $1's record into REC_PID, REC_START, REC_BOOT and REC_BIN.
proc_record() {
	local name=$1 first second third rest
	[[ -s "$PID_DIR/$name" ]] || return 1
	read -r first second third rest <"$PID_DIR/$name"
	[[ "$first" =~ ^[0-9]+$ ]] || return 1
	REC_PID=$first
	if [[ "$second" =~ ^[0-9]+$ ]]; then
		REC_START=$second REC_BOOT=$third REC_BIN=$rest
	else
		# A record of an earlier version of this script: "<pid> <binary>".
		REC_START="" REC_BOOT="" REC_BIN=$second
	fi
}

# True if the process is in the middle of exec'ing (or has exec'd) binary $2: /proc/<pid>/exe
# names the new binary from early in execve, well before its command line can be read.
proc_runs_binary() {
	local pid=$1 bin=$2 exe
	exe="$(readlink "$AW_PROC/$pid/exe" 2>/dev/null)" || return 1
	exe=${exe% (deleted)}
	[[ "$exe" == "$bin" || "$exe" == "$(readlink -f "$bin" 2>/dev/null)" ]]
}

# True if the exec of binary $2 by process $1 has finished: its command line is readable again
# and names the binary (the wrapper of proc_start passes it as argv[0]), or, for a program that
# rewrites its argv, its executable is the binary.
# The executable is read first: the kernel switches a process to its new memory (and so its
# executable) before it has written the new command line, so a command line read before the
# switch is the old program's, and with an executable read after it, would pass for a finished
# exec. Once the executable names the binary, any command line read is the new program's.
proc_exec_done() {
	local pid=$1 bin=$2 argv0="" switched=0
	proc_runs_binary "$pid" "$bin" && switched=1
	IFS= read -r -d "" argv0 2>/dev/null <"$AW_PROC/$pid/cmdline" || [[ -n "$argv0" ]] || return 1
	[[ "$argv0" == "$bin" ]] || ((switched))
}

# True if component $1's recorded process still exists and is not a zombie. Sets REC_* and
# PROC_STATE (T while paused with SIGSTOP, D while in uninterruptible sleep: both alive).
proc_alive() {
	local name=$1
	proc_record "$name" || return 1
	proc_stat "$REC_PID" || return 1
	case "$PROC_STATE" in
	Z | X | x) return 1 ;;
	esac
	if [[ -n "$REC_START" ]]; then
		[[ "$PROC_START" == "$REC_START" && "$REC_BOOT" == "$(proc_boot_id)" ]]
		return
	fi
	# An old record has no start time: identify the process by its binary, which a process in
	# the middle of its exec already shows in /proc/<pid>/exe.
	proc_exec_done "$REC_PID" "$REC_BIN" || proc_runs_binary "$REC_PID" "$REC_BIN"
}

# Writes component $1's record for process $2 running binary $3; fails if the process is gone.
proc_write_record() {
	local name=$1 pid=$2 bin=$3
	proc_stat "$pid" || return 1
	printf '%s %s %s %s\n' "$pid" "$PROC_START" "$(proc_boot_id)" "$bin" >"$PID_DIR/$name"
}

# Starts binary $2 with arguments $3... as component $1.
# setsid gives it its own session: it survives the shell that ran `up` (and that shell's
# terminal hanging up) and does not get the terminal's Ctrl-C. The tiny bash wrapper writes its
# own pid just before exec'ing the binary, so the recorded pid is the binary's whether or not
# setsid had to fork. The result descriptor (3) and the lock descriptors are closed for the
# child: otherwise `$(hack/control-plane.sh up)` would wait for the daemons to exit, and they
# would hold the locks forever.
#
# Returns once the exec has finished (or the process has died, which proc_alive then reports
# truthfully). An exec that does not finish within AW_EXEC_TIMEOUT seconds is stopped, and the
# script fails.
proc_start() {
	local name=$1 bin=$2
	shift 2
	local tmp="$PID_DIR/.$name.starting" timeout_ms=$((${AW_EXEC_TIMEOUT:-120} * 1000))
	rm -f "$tmp"
	: >>"$LOG_DIR/$name.log"
	# shellcheck disable=SC2016 # expanded by the inner bash, not here
	setsid bash -c 'echo "$$" >"$0"; exec "$@"' "$tmp" "$bin" "$@" \
		</dev/null >>"$LOG_DIR/$name.log" 2>&1 3>&- 8>&- 9>&- &
	local launcher=$! deadline=$(($(aw_now_ms) + timeout_ms)) pid=""
	STARTED+=("$name")
	until [[ -s "$tmp" ]] && read -r pid <"$tmp" && [[ "$pid" =~ ^[0-9]+$ ]]; do
		if (($(aw_now_ms) >= deadline)); then
			# The wrapper never got as far as writing its pid: stop what was launched.
			kill -KILL "$launcher" 2>/dev/null || true
			aw_die "could not start $name: no pid after ${AW_EXEC_TIMEOUT:-120}s"
		fi
		sleep 0.01
	done
	rm -f "$tmp"
	if ! proc_write_record "$name" "$pid" "$bin"; then
		# Gone already (the binary could not be run, say): nothing to record, nothing to stop.
		return 0
	fi
	# Until the exec has finished, the pid names a bash, or a process whose command line reads
	# empty while it pages the binary in. The record already identifies it either way; waiting
	# here lets callers (and their health checks) see the component itself.
	until proc_exec_done "$pid" "$bin"; do
		if ! proc_alive "$name"; then
			aw_log "$name (pid $pid) was gone before its exec of $bin finished"
			return 0
		fi
		if (($(aw_now_ms) >= deadline)); then
			aw_log "$name (pid $pid) has not finished exec'ing $bin after ${AW_EXEC_TIMEOUT:-120}s; stopping it"
			proc_stop "$name"
			aw_die "could not start $name"
		fi
		sleep 0.01
	done
}

# Stops the named components: SIGTERM, then SIGKILL for whatever is still running after a grace
# period, then waits until they are really gone (so their ports and files are free when this
# returns). Every signal is sent only after proc_alive re-confirmed the pid's identity; a process
# caught in the middle of its exec gets the signal when the exec completes, or dies of it.
proc_stop() {
	local name names=()
	for name in "$@"; do
		if proc_alive "$name"; then
			names+=("$name")
			kill -TERM "$REC_PID" 2>/dev/null || true
		fi
		rm -f "$PID_DIR/.$name.starting"
	done
	((${#names[@]})) || return 0
	if ! aw_wait_for 10 none_alive "${names[@]}"; then
		aw_log "still running after SIGTERM, killing: ${names[*]}"
		for name in "${names[@]}"; do
			if proc_alive "$name"; then
				kill -KILL "$REC_PID" 2>/dev/null || true
			fi
		done
		# Uninterruptible sleep (disk I/O under load) can hold even SIGKILL back for a while.
		aw_wait_for 30 none_alive "${names[@]}" || aw_log "warning: could not stop ${names[*]}"
	fi
	for name in "${names[@]}"; do
		proc_alive "$name" || rm -f "$PID_DIR/$name"
	done
}

none_alive() {
	local name
	for name in "$@"; do
		if proc_alive "$name"; then
			return 1
		fi
	done
}
