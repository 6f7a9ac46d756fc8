#!/usr/bin/env bash
# End-to-end run on a kind cluster, for machines with Docker: builds the image,
# installs the Helm chart with it, shows sample runs of the example agent
# reaching the phases they should, runs the end-to-end suite against the
# cluster, and deletes the cluster again.
#
# The rest of the project never needs Docker (tests run against the local
# control plane of hack/control-plane.sh); this is the one place where the
# image itself is built and run.
#
# Usage: hack/kind-e2e.sh [--dry-run] [--keep]
#
#   --dry-run   print the commands it would run, one per line on stdout, and
#               run none of them
#   --keep      leave the cluster running afterwards (also KEEP_CLUSTER=1);
#               delete it later with `kind delete cluster --name <name>`
#
# Environment:
#   KIND_CLUSTER_NAME  cluster name (default agent-watchdog-e2e); a cluster of
#                      that name left from an earlier run is deleted first
#   KIND_NODE_IMAGE    node image for `kind create cluster --image` (default:
#                      kind's own default); Kubernetes 1.36 or later, which
#                      the chart requires
#   KIND               kind command (default: `kind` on PATH, else
#                      `go run sigs.k8s.io/kind@v0.33.0`)
#   DOCKER             docker command (default docker)
#   HELM, KUBECTL      helm and kubectl (default: on PATH, else the ones
#                      hack/control-plane.sh builds)
#   IMAGE              image to build and load (default agent-watchdog:e2e)
#   RELEASE_NAMESPACE  namespace of the Helm release (default agent-watchdog)
#   SAMPLES_NAMESPACE  namespace of the sample runs (default
#                      agent-watchdog-samples)
#   HELM_EXTRA_ARGS    more arguments for `helm upgrade --install`, split on
#                      spaces (e.g. "--set replicaCount=2")
#   E2E_TEST_COMMAND   the end-to-end suite (default `npm run test:kind`), run
#                      from the repository root with KUBECONFIG and
#                      AGENT_WATCHDOG_E2E_KUBECONFIG naming the kind cluster's
#                      kubeconfig, AGENT_WATCHDOG_IMAGE the image and
#                      AGENT_WATCHDOG_NAMESPACE the release's namespace
#   E2E_TIMEOUT        seconds to wait for each sample run (default 300)
#
# Stdout carries only the --dry-run listing; progress goes to stderr.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT_DIR="$(cd "$HACK_DIR/.." && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"
AW_LOG_PREFIX=kind-e2e

KIND_VERSION=v0.33.0
DRY_RUN=0
KEEP="${KEEP_CLUSTER:-0}"
for arg in "$@"; do
	case "$arg" in
	--dry-run) DRY_RUN=1 ;;
	--keep) KEEP=1 ;;
	-h | --help)
		sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
		exit 0
		;;
	*) aw_die "unknown argument $arg (try --help)" ;;
	esac
done

CLUSTER="${KIND_CLUSTER_NAME:-agent-watchdog-e2e}"
IMAGE="${IMAGE:-agent-watchdog:e2e}"
RELEASE_NAMESPACE="${RELEASE_NAMESPACE:-agent-watchdog}"
SAMPLES_NAMESPACE="${SAMPLES_NAMESPACE:-agent-watchdog-samples}"
E2E_TEST_COMMAND="${E2E_TEST_COMMAND:-npm run test:kind}"
E2E_TIMEOUT="${E2E_TIMEOUT:-300}"
KUBECONFIG_PATH="$(aw_state_root)/kind/$CLUSTER.kubeconfig"

# The image reference split for the chart's values; a registry port
# (host:5000/name:tag) is not mistaken for a tag.
IMAGE_REPOSITORY="${IMAGE%:*}"
IMAGE_TAG="${IMAGE##*:}"
if [[ "$IMAGE" != *:* || "$IMAGE_TAG" == */* ]]; then
	aw_die "IMAGE must name a tag (name:tag), got $IMAGE"
fi

# Tools are arrays, so that a command with arguments (go run ...) stays one
# tool.
if [[ -n "${KIND:-}" ]]; then
	read -r -a KIND_CMD <<<"$KIND"
elif command -v kind >/dev/null 2>&1; then
	KIND_CMD=(kind)
else
	KIND_CMD=(go run "sigs.k8s.io/kind@$KIND_VERSION")
fi
read -r -a DOCKER_CMD <<<"${DOCKER:-docker}"

# A tool from PATH, else the one hack/control-plane.sh builds. A dry run
# never builds anything: it lists the tool by its bare name.
resolve_tool() {
	local name=$1 override=$2
	if [[ -n "$override" ]]; then
		printf '%s\n' "$override"
	elif command -v "$name" >/dev/null 2>&1; then
		printf '%s\n' "$name"
	elif ((DRY_RUN)); then
		aw_log "$name is not on PATH; a real run uses the one hack/control-plane.sh builds"
		printf '%s\n' "$name"
	else
		bash "$HACK_DIR/control-plane.sh" bin "$name"
	fi
}
HELM_BIN="$(resolve_tool helm "${HELM:-}")"
KUBECTL_BIN="$(resolve_tool kubectl "${KUBECTL:-}")"

HELM_EXTRA=()
if [[ -n "${HELM_EXTRA_ARGS:-}" ]]; then
	read -r -a HELM_EXTRA <<<"$HELM_EXTRA_ARGS"
fi

# Runs a command, or with --dry-run prints it, shell-quoted, on stdout.
run() {
	if ((DRY_RUN)); then
		local quoted
		printf -v quoted '%q ' "$@"
		printf '%s\n' "${quoted% }"
		return 0
	fi
	aw_log "+ $*"
	"$@"
}

# Like run, with a document on stdin; a dry run prints the document after the
# command.
run_with_input() {
	local input=$1
	shift
	if ((DRY_RUN)); then
		run "$@"
		printf '%s\n' "$input" | sed 's/^/    /'
		return 0
	fi
	aw_log "+ $* <<<(document)"
	"$@" <<<"$input"
}

kubectl_() {
	run "$KUBECTL_BIN" --kubeconfig "$KUBECONFIG_PATH" "$@"
}

# A sample run of the example agent, with short timeouts so that each
# behaviour shows within a minute or two.
sample_run() {
	local name=$1 behaviour=$2
	cat <<EOF
---
apiVersion: watchdog.dev/v1alpha1
kind: AgentRun
metadata:
  name: $name
  namespace: $SAMPLES_NAMESPACE
spec:
  goal: $behaviour
  watchdog:
    heartbeatTimeout: 30s
    maxRestarts: 2
    backoff: {initial: 5s, factor: 2, max: 30s}
  template:
    spec:
      containers:
        - name: agent
          image: $IMAGE
          imagePullPolicy: IfNotPresent
          args: ["example-agent"]
          env:
            - {name: EXAMPLE_STEP_DELAY_MS, value: "500"}
            - {name: EXAMPLE_LOOP_DELAY_MS, value: "200"}
EOF
}

# Waits until a run reaches a phase; prints its status when it does not.
wait_phase() {
	local name=$1 phase=$2
	if ((DRY_RUN)); then
		kubectl_ wait --namespace "$SAMPLES_NAMESPACE" --for="jsonpath={.status.phase}=$phase" "agentrun/$name" --timeout="${E2E_TIMEOUT}s"
		return 0
	fi
	if ! kubectl_ wait --namespace "$SAMPLES_NAMESPACE" --for="jsonpath={.status.phase}=$phase" "agentrun/$name" --timeout="${E2E_TIMEOUT}s"; then
		"$KUBECTL_BIN" --kubeconfig "$KUBECONFIG_PATH" describe agentrun --namespace "$SAMPLES_NAMESPACE" "$name" >&2 || true
		aw_die "run $name did not reach $phase"
	fi
}

created=0
teardown() {
	local status=$?
	((DRY_RUN)) && return 0
	if ((status != 0)) && ((created)); then
		aw_log "failed (exit $status); the operator's last logs:"
		"$KUBECTL_BIN" --kubeconfig "$KUBECONFIG_PATH" logs --namespace "$RELEASE_NAMESPACE" \
			--selector app.kubernetes.io/name=agent-watchdog --tail=100 --all-containers >&2 || true
		"$KUBECTL_BIN" --kubeconfig "$KUBECONFIG_PATH" get agentruns,pods --all-namespaces >&2 || true
	fi
	if ((created)) && ! ((KEEP)); then
		aw_log "deleting cluster $CLUSTER"
		"${KIND_CMD[@]}" delete cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG_PATH" >&2 || true
	elif ((created)); then
		aw_log "keeping cluster $CLUSTER; KUBECONFIG=$KUBECONFIG_PATH"
	fi
	return "$status"
}

main() {
	if ! ((DRY_RUN)); then
		"${DOCKER_CMD[@]}" info >/dev/null 2>&1 || aw_die "this needs a running Docker engine ($(printf '%q ' "${DOCKER_CMD[@]}")info failed)"
		mkdir -p "$(dirname "$KUBECONFIG_PATH")"
	fi
	trap teardown EXIT
	cd "$ROOT_DIR"

	# A cluster left over from an interrupted run would make `create` fail.
	run "${KIND_CMD[@]}" delete cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG_PATH"
	local create=("${KIND_CMD[@]}" create cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG_PATH" --wait 180s)
	[[ -n "${KIND_NODE_IMAGE:-}" ]] && create+=(--image "$KIND_NODE_IMAGE")
	created=1
	run "${create[@]}"

	local revision
	revision="$(git -C "$ROOT_DIR" rev-parse HEAD 2>/dev/null || echo unknown)"
	run "${DOCKER_CMD[@]}" build --tag "$IMAGE" --build-arg "REVISION=$revision" "$ROOT_DIR"
	run "${KIND_CMD[@]}" load docker-image "$IMAGE" --name "$CLUSTER"

	run "$HELM_BIN" upgrade --install agent-watchdog "$ROOT_DIR/charts/agent-watchdog" \
		--kubeconfig "$KUBECONFIG_PATH" \
		--namespace "$RELEASE_NAMESPACE" --create-namespace \
		--set "image.repository=$IMAGE_REPOSITORY" \
		--set "image.tag=$IMAGE_TAG" \
		--set image.pullPolicy=IfNotPresent \
		"${HELM_EXTRA[@]}" \
		--wait --timeout 5m

	# Sample runs of the example agent in the image: a healthy run completes,
	# a crash is replaced and the next attempt completes from the checkpoint,
	# and a tool loop stops for a person.
	kubectl_ create namespace "$SAMPLES_NAMESPACE"
	run_with_input "$(sample_run healthy healthy; sample_run crash crash; sample_run tool-loop tool-loop)" \
		"$KUBECTL_BIN" --kubeconfig "$KUBECONFIG_PATH" apply -f -
	wait_phase healthy Completed
	wait_phase crash Completed
	wait_phase tool-loop NeedsHumanIntervention

	# The end-to-end suite, against this cluster, from the repository's root.
	run env "KUBECONFIG=$KUBECONFIG_PATH" "AGENT_WATCHDOG_E2E_KUBECONFIG=$KUBECONFIG_PATH" \
		"AGENT_WATCHDOG_IMAGE=$IMAGE" "AGENT_WATCHDOG_NAMESPACE=$RELEASE_NAMESPACE" \
		bash -c "$E2E_TEST_COMMAND"
	if ((DRY_RUN)); then
		aw_log "dry run: nothing was run"
	else
		aw_log "passed"
	fi
}

main
