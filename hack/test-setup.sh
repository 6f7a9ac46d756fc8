#!/usr/bin/env bash
# Everything the test suites need that npm does not bring, installed or built before they start,
# so that `npm ci && npm test` works on a new machine by itself. `npm test` runs it first.
#
# Usage: hack/test-setup.sh
#
#   1. Debian's packages: PostgreSQL's server, shellcheck (the scripts' lint), containerd, runc,
#      the CNI plugins, iptables, nftables, iproute2 and gcc (the real node), buildah and
#      mmdebstrap (images with no registry), Chromium and a font (the console's browser tests),
#      faketime (an operator whose own clock is off, in the clock tests).
#      Installed with apt-get as root (or with sudo when it needs no password); otherwise this
#      names the missing ones and stops.
#   2. The control plane, the kubelet and the tools, built from their pinned Go modules into the
#      cache outside the clone (the first time only: tens of minutes; later a few seconds).
#   3. The project image and the Python example's image, built from their Dockerfiles with no
#      registry (cached by their inputs).
#
# The suites' global setups start the clusters and PostgreSQL themselves, one after another.
# Stdout stays empty; progress goes to stderr.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT_DIR="$(cd "$HACK_DIR/.." && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"
AW_LOG_PREFIX=test-setup
exec 1>&2

started="$(aw_now_ms)"
step() { aw_log "$* ($(aw_since "$started"))"; }

[[ -x "$ROOT_DIR/node_modules/node/bin/node" ]] || aw_die "Node 24 is not installed in node_modules: run 'npm ci' first"

# What each package is for is in the usage above; keep the two lists in step.
PACKAGES=(shellcheck containerd runc containernetworking-plugins iptables nftables iproute2 gcc libc6-dev buildah mmdebstrap chromium fonts-dejavu-core faketime)
if ! command -v initdb >/dev/null 2>&1 && ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
	PACKAGES+=(postgresql)
fi
missing=()
for package in "${PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]} > 0)); then
	command -v apt-get >/dev/null 2>&1 || aw_die "missing packages: ${missing[*]}; this machine has no apt-get: install their equivalents"
	as_root=()
	if [[ "$(id -u)" != 0 ]]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			as_root=(sudo -n)
		else
			aw_die "the tests need Debian packages that are not installed: ${missing[*]}
  install them as root:  apt-get update && apt-get install -y ${missing[*]}
  (the real-node suite also runs only as root)"
		fi
	fi
	step "installing Debian packages: ${missing[*]}"
	"${as_root[@]}" apt-get update -qq
	DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

step "building the control plane, the kubelet and tools (cached outside the clone after the first time)"
bash "$HACK_DIR/control-plane.sh" build --all

step "building the project image and the Python example's image, with no registry (cached by their inputs)"
bash "$HACK_DIR/images.sh" --no-import --size --sbom >/dev/null
bash "$HACK_DIR/images.sh" --python-example --no-import >/dev/null

step "ready"
