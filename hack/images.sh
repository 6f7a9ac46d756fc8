#!/usr/bin/env bash
# Container images with no registry: the project's image built from its own Dockerfile, unchanged,
# on local stand-ins for the Dockerfile's base images, all from Debian's packages and the pinned
# Node 24 binary (the `node` devDependency); then imported into the real node's containerd.
#
# Usage: hack/images.sh [--no-import] [--size] [--sbom] [--python-example]
#
#   (default)    build what is missing (cached by the hash of its inputs), import the image into
#                the real node of the cluster in AGENT_WATCHDOG_STATE when one runs
#                (hack/control-plane.sh up --kubelet), also as agent-watchdog:<version> (the name
#                the samples use), and print the project image's reference
#   --no-import  build only
#   --size       also print the project image's size in bytes on a second line
#   --sbom       also print the path of the project image's SBOM on the next line: SPDX JSON
#                that syft (built from its Go module, `hack/control-plane.sh bin syft`) writes
#                from the image's archive whenever the image is built
#   --python-example
#                build the Python SDK's example agent image instead (operator/python/Dockerfile),
#                import it the same way, and print its reference
#
# The builder is Debian's buildah, with its own storage under the cache root, chroot isolation and
# no network: nothing is pulled from anywhere, and the machine's own image stores are not touched.
# The Dockerfiles pin the real base images by digest; a digest names bytes only a registry has, so
# the build passes the stand-ins by name instead (the NODE_IMAGE, RUNTIME_IMAGE and PYTHON_IMAGE
# build arguments), and users with a registry build the same files against the pinned images:
#   node:24.21.0-bookworm-slim               Debian bookworm minbase (mmdebstrap), the Node binary
#                                            and npm: the dependency stage runs `npm ci` offline
#                                            from a cache this script fills on the host
#   gcr.io/distroless/nodejs24-debian12:nonroot
#                                            glibc, libstdc++, the CA bundle, tzdata and netbase
#                                            extracted from their .debs, the Node binary, and the
#                                            nonroot user 65532: no shell, no package manager
#   python:3.11-slim-bookworm                Debian bookworm minbase with its python3 (3.11), for
#                                            the Python example agent
#
# Environment:
#   AGENT_WATCHDOG_CACHE  cache root (default ~/.cache/agent-watchdog): images/ holds buildah's
#                         storage, the npm cache and the exported archives
#   AGENT_WATCHDOG_STATE  which cluster's node to import into (as hack/control-plane.sh)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT_DIR="$(cd "$HACK_DIR/.." && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"
AW_LOG_PREFIX=images

# Files in the images are read by their non-root users.
umask 022
IMAGES_DIR="$(aw_cache_root)/images"
STORAGE=(--root "$IMAGES_DIR/storage" --runroot "$(aw_state_root)/buildah-run" --storage-driver overlay)
NODE_BIN="$ROOT_DIR/node_modules/node/bin/node"
DEPS_BASE=docker.io/library/node:24.21.0-bookworm-slim
RUNTIME_BASE=gcr.io/distroless/nodejs24-debian12:nonroot
PROJECT_REPO=localhost/agent-watchdog
PYTHON_BASE=docker.io/library/python:3.11-slim-bookworm
PYTHON_EXAMPLE_REPO=localhost/agent-watchdog-python-example
# The .debs of the distroless stand-in (what distroless's cc and nodejs images hold).
RUNTIME_DEBS=(libc6 libgcc-s1 libstdc++6 gcc-12-base ca-certificates tzdata netbase)

WORK_DIRS=()
cleanup() {
	local dir
	for dir in "${WORK_DIRS[@]}"; do
		[[ -n "$dir" ]] && rm -rf "$dir"
	done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

workdir() {
	local dir
	dir="$(mktemp -d "$IMAGES_DIR/.work.XXXXXX")"
	WORK_DIRS+=("$dir")
	# apt-get download writes as its own unprivileged user.
	chmod 0755 "$dir"
	printf '%s\n' "$dir"
}

bah() {
	CONTAINERS_REGISTRIES_CONF="$IMAGES_DIR/registries.conf" buildah "${STORAGE[@]}" "$@"
}

require() {
	local missing=() tool
	for tool in buildah mmdebstrap apt-get dpkg-deb sha256sum; do
		command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
	done
	((${#missing[@]} == 0)) || aw_die "building images needs ${missing[*]} (Debian: apt-get install buildah mmdebstrap)"
	[[ -x "$NODE_BIN" ]] || aw_die "no Node binary at $NODE_BIN: run npm ci first"
	(($(id -u) == 0)) || aw_die "buildah with its own storage and chroot isolation needs root here"
}

# Short names resolve to docker.io, as Docker resolves them, and the builder never asks anyone.
write_config() {
	mkdir -p "$IMAGES_DIR"
	cat >"$IMAGES_DIR/registries.conf" <<-'EOF'
		unqualified-search-registries = ["docker.io"]
		short-name-mode = "permissive"
	EOF
	printf '{"default":[{"type":"insecureAcceptAnything"}]}\n' >"$IMAGES_DIR/policy.json"
}

image_exists() {
	bah images --quiet "$1" >/dev/null 2>&1
}

# Commits directory $2 as image $1, with buildah config arguments $3...
commit_rootfs() {
	local name=$1 rootfs=$2
	shift 2
	local container mount
	# The image's / takes the directory's own mode, and mktemp makes 0700 ones.
	chmod 0755 "$rootfs"
	container="$(bah from --signature-policy "$IMAGES_DIR/policy.json" scratch)"
	mount="$(bah mount "$container")"
	cp -a "$rootfs/." "$mount/"
	bah umount "$container" >/dev/null
	bah config "$@" "$container"
	bah commit --quiet --signature-policy "$IMAGES_DIR/policy.json" --rm "$container" "$name" >/dev/null
}

# Labels each stand-in with the hash of what made it, so a changed recipe or Node binary rebuilds it.
recipe_hash() {
	{
		sha256sum "$NODE_BIN" | cut -d' ' -f1
		sed -n '/^commit_rootfs()/,/^}/p; /^build_deps_base()/,/^}/p; /^build_runtime_base()/,/^}/p' "${BASH_SOURCE[0]}"
		printf '%s\n' "$@"
	} | sha256sum | cut -c1-16
}

base_current() {
	local name=$1 hash=$2
	image_exists "$name" && [[ "$(bah inspect --format '{{index .ImageAnnotations "org.agent-watchdog.recipe"}}' "$name" 2>/dev/null)" == "$hash" ]]
}

build_deps_base() {
	local hash work start npm_package
	hash="$(recipe_hash deps "$(npm --version)")"
	base_current "$DEPS_BASE" "$hash" && return 0
	start="$(aw_now_ms)"
	aw_log "building the stand-in for $DEPS_BASE (Debian bookworm minbase, Node, npm)"
	work="$(workdir)"
	mkdir -p "$work/rootfs"
	mmdebstrap --quiet --variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
		bookworm "$work/rootfs" >&2 || aw_die "mmdebstrap failed"
	install -D -m 0755 "$NODE_BIN" "$work/rootfs/usr/local/bin/node"
	# npm as the official image lays it out; the machine's own npm, since nothing may be fetched.
	mkdir -p "$work/rootfs/usr/local/lib/node_modules"
	# The package of the npm that runs here (the one the recipe's `npm --version` names), found from
	# its command: `npm root -g` would name the global folder of whichever node runs npm, which is
	# the project's own Node 24 when that comes first on PATH, and holds no npm.
	npm_package="$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")"
	[[ -f "$npm_package/package.json" ]] || aw_die "could not find npm's package from $(command -v npm)"
	cp -a "$npm_package" "$work/rootfs/usr/local/lib/node_modules/npm"
	ln -s ../lib/node_modules/npm/bin/npm-cli.js "$work/rootfs/usr/local/bin/npm"
	ln -s ../lib/node_modules/npm/bin/npx-cli.js "$work/rootfs/usr/local/bin/npx"
	commit_rootfs "$DEPS_BASE" "$work/rootfs" --annotation "org.agent-watchdog.recipe=$hash" \
		--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env NODE_VERSION="$("$NODE_BIN" --version | tr -d v)" \
		--cmd node
	aw_log "built $DEPS_BASE in $(aw_since "$start")"
}

build_runtime_base() {
	local hash work start deb
	hash="$(recipe_hash runtime "${RUNTIME_DEBS[@]}")"
	base_current "$RUNTIME_BASE" "$hash" && return 0
	start="$(aw_now_ms)"
	aw_log "building the stand-in for $RUNTIME_BASE (${RUNTIME_DEBS[*]}, Node)"
	work="$(workdir)"
	mkdir -p "$work/debs" "$work/rootfs"
	(cd "$work/debs" && apt-get download "${RUNTIME_DEBS[@]}" >&2) || aw_die "apt-get download ${RUNTIME_DEBS[*]} failed (apt-get update first?)"
	# Each package's control file in /var/lib/dpkg/status.d/, as distroless records what it holds
	# (it has no dpkg database): scanners, syft included, list the image's Debian packages from it.
	mkdir -p "$work/rootfs/var/lib/dpkg/status.d"
	for deb in "$work"/debs/*.deb; do
		dpkg-deb --extract "$deb" "$work/rootfs"
		dpkg-deb --field "$deb" >"$work/rootfs/var/lib/dpkg/status.d/$(dpkg-deb --field "$deb" Package)"
	done
	local r="$work/rootfs"
	# Merged /usr, as bookworm's own images have it.
	for dir in bin sbin lib lib64; do
		if [[ -d "$r/$dir" && ! -L "$r/$dir" ]]; then
			mkdir -p "$r/usr/$dir"
			cp -a "$r/$dir/." "$r/usr/$dir/"
			rm -rf "${r:?}/$dir"
		fi
		ln -sfn "usr/$dir" "$r/$dir"
	done
	rm -rf "$r/usr/share/doc" "$r/usr/share/man" "$r/usr/share/lintian" "$r/usr/share/locale" "$r/usr/share/gcc" "$r/usr/share/gdb"
	# The CA bundle update-ca-certificates would have made.
	mkdir -p "$r/etc/ssl/certs"
	find "$r/usr/share/ca-certificates" -name '*.crt' -print0 | sort -z | xargs -0 cat >"$r/etc/ssl/certs/ca-certificates.crt"
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$r/etc/passwd"
	printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$r/etc/group"
	printf 'hosts: files dns\n' >"$r/etc/nsswitch.conf"
	# What distroless says it is: scanners take the distribution from here to name each package
	# (pkg:deb/debian/...?distro=debian-12) and to match advisories against it.
	printf 'PRETTY_NAME="Distroless"\nNAME="Debian GNU/Linux"\nID="debian"\nVERSION_ID="12"\nVERSION="Debian GNU/Linux 12 (bookworm)"\nHOME_URL="https://github.com/GoogleContainerTools/distroless"\n' >"$r/etc/os-release"
	ln -sfn /usr/share/zoneinfo/Etc/UTC "$r/etc/localtime"
	mkdir -p "$r/tmp" "$r/root" "$r/home/nonroot"
	chmod 1777 "$r/tmp"
	chmod 0700 "$r/root"
	chown 65532:65532 "$r/home/nonroot"
	install -D -m 0755 "$NODE_BIN" "$r/nodejs/bin/node"
	commit_rootfs "$RUNTIME_BASE" "$r" --annotation "org.agent-watchdog.recipe=$hash" \
		--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
		--user 65532:65532 --workingdir /home/nonroot --entrypoint '["/nodejs/bin/node"]'
	aw_log "built $RUNTIME_BASE in $(aw_since "$start")"
}

build_python_base() {
	local hash work start
	hash="$(recipe_hash python "$(sed -n '/^build_python_base()/,/^}/p' "${BASH_SOURCE[0]}" | sha256sum)")"
	base_current "$PYTHON_BASE" "$hash" && return 0
	start="$(aw_now_ms)"
	aw_log "building the stand-in for $PYTHON_BASE (Debian bookworm minbase, python3)"
	work="$(workdir)"
	mkdir -p "$work/rootfs"
	mmdebstrap --quiet --variant=minbase --include=python3,ca-certificates --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
		bookworm "$work/rootfs" >&2 || aw_die "mmdebstrap failed"
	rm -rf "$work/rootfs/var/cache/apt/"* "$work/rootfs/var/lib/apt/lists/"*
	commit_rootfs "$PYTHON_BASE" "$work/rootfs" --annotation "org.agent-watchdog.recipe=$hash" \
		--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 --cmd python3
	aw_log "built $PYTHON_BASE in $(aw_since "$start")"
}

# The Python example's image, tagged by the hash of what its build reads.
python_example_ref() {
	local hash
	hash="$(
		cd "$ROOT_DIR/operator/python"
		{
			find Dockerfile .dockerignore example_agent.py agent_watchdog -type f -not -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum
			bah inspect --type image --format '{{.FromImageID}}' "$PYTHON_BASE"
		} | sha256sum | cut -c1-12
	)"
	printf '%s:%s\n' "$PYTHON_EXAMPLE_REPO" "$hash"
}

build_python_example() {
	local ref=$1 start
	image_exists "$ref" && return 0
	start="$(aw_now_ms)"
	aw_log "building $ref from operator/python/Dockerfile"
	bah bud --quiet --signature-policy "$IMAGES_DIR/policy.json" --pull=never --isolation oci --network none --layers \
		--build-arg PYTHON_IMAGE="$PYTHON_BASE" \
		--tag "$ref" --file "$ROOT_DIR/operator/python/Dockerfile" "$ROOT_DIR/operator/python" >&2 || aw_die "building $ref failed"
	aw_log "built $ref in $(aw_since "$start")"
}

# The project image's tag: its version and the hash of everything the build reads.
project_tag() {
	local version hash
	version="$(sed -n 's/^  "version": "\(.*\)",$/\1/p' "$ROOT_DIR/package.json" | head -n 1)"
	hash="$(
		cd "$ROOT_DIR"
		{
			sha256sum Dockerfile .dockerignore package.json package-lock.json
			find crds operator -type f -print0 | sort -z | xargs -0 sha256sum
			bah inspect --type image --format '{{.FromImageID}}' "$DEPS_BASE"
			bah inspect --type image --format '{{.FromImageID}}' "$RUNTIME_BASE"
		} | sha256sum | cut -c1-12
	)"
	printf '%s-%s\n' "${version:-0.0.0}" "$hash"
}

# npm's cache of the production dependencies, filled on the host (which reaches the registry with
# its own configuration); the image's `npm ci` then runs offline from it.
fill_npm_cache() {
	local work
	work="$(workdir)"
	cp "$ROOT_DIR/package.json" "$ROOT_DIR/package-lock.json" "$work/"
	# The project's Node runs npm here, as it runs everything else.
	(cd "$work" && PATH="$(dirname "$NODE_BIN"):$PATH" npm ci --omit=dev --ignore-scripts --no-audit --no-fund --cache "$IMAGES_DIR/npm-cache" >&2) ||
		aw_die "filling the npm cache for the image failed"
}

build_project() {
	local ref=$1 start
	image_exists "$ref" && return 0
	start="$(aw_now_ms)"
	aw_log "building $ref from the Dockerfile"
	fill_npm_cache
	local cache_copy
	cache_copy="$(workdir)"
	cp -a "$IMAGES_DIR/npm-cache/." "$cache_copy/"
	bah bud --quiet --signature-policy "$IMAGES_DIR/policy.json" --pull=never --isolation oci --network none --layers \
		--build-arg NODE_IMAGE="$DEPS_BASE" --build-arg RUNTIME_IMAGE="$RUNTIME_BASE" \
		--build-arg NPM_CONFIG_OFFLINE=true --build-arg NPM_CONFIG_CACHE=/npm-cache \
		--volume "$cache_copy:/npm-cache" \
		--build-arg REVISION="$(git -C "$ROOT_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
		--tag "$ref" --file "$ROOT_DIR/Dockerfile" "$ROOT_DIR" >&2 || aw_die "building $ref failed"
	aw_log "built $ref in $(aw_since "$start")"
	prune_project_images "$ref"
}

# The image as a docker-archive tarball, which containerd imports.
archive_of() {
	local ref=$1 archive
	archive="$IMAGES_DIR/archives/$(tr '/:' '__' <<<"$ref").tar"
	if [[ ! -s "$archive" ]]; then
		mkdir -p "$IMAGES_DIR/archives"
		rm -f "$IMAGES_DIR/archives/$(tr '/:' '__' <<<"${ref%:*}")"_*.tar
		bah push --quiet --signature-policy "$IMAGES_DIR/policy.json" "$ref" "docker-archive:$archive.tmp:$ref" >&2
		mv -f "$archive.tmp" "$archive"
	fi
	printf '%s\n' "$archive"
}

# The image's software bill of materials, written once per build: syft reads the image's archive
# (the base's Debian packages, the Node binary, every npm package of node_modules) and writes SPDX
# JSON. It never reaches a network: no update check, nothing to download.
sbom_of() {
	local ref=$1 sbom syft
	sbom="$IMAGES_DIR/sboms/$(tr '/:' '__' <<<"$ref").spdx.json"
	if [[ ! -s "$sbom" ]]; then
		mkdir -p "$IMAGES_DIR/sboms"
		rm -f "$IMAGES_DIR/sboms/$(tr '/:' '__' <<<"${ref%:*}")"_*.spdx.json
		syft="$(bash "$HACK_DIR/control-plane.sh" bin syft)" || aw_die "building syft failed"
		SYFT_CHECK_FOR_APP_UPDATE=false "$syft" scan "docker-archive:$(archive_of "$ref")" --quiet \
			--source-name "${ref%:*}" --source-version "${ref##*:}" --output "spdx-json=$sbom.tmp" >&2 ||
			aw_die "writing the SBOM of $ref failed"
		mv -f "$sbom.tmp" "$sbom"
	fi
	printf '%s\n' "$sbom"
}

# Imports image $1 into the real node's containerd unless it is there already.
import_into_node() {
	local ref=$1 sock
	sock="$(aw_state_root)/control-plane/node/containerd/containerd.sock"
	if [[ ! -S "$sock" ]]; then
		aw_log "no real node in the cluster at $(aw_state_root) (hack/control-plane.sh up --kubelet); not importing"
		return 0
	fi
	if ! ctr --address "$sock" --namespace k8s.io images ls -q 2>/dev/null | grep -qxF "$ref"; then
		local start
		start="$(aw_now_ms)"
		ctr --address "$sock" --namespace k8s.io images import "$(archive_of "$ref")" >&2 || aw_die "importing $ref into the node failed"
		aw_log "imported $ref into the node in $(aw_since "$start")"
	fi
	# The name the samples and the README use (agent-watchdog:<version>) names this build too.
	[[ "$ref" == "$PROJECT_REPO:"* ]] || return 0
	local alias="docker.io/library/agent-watchdog:${ref##*:}"
	alias="${alias%-*}"
	ctr --address "$sock" --namespace k8s.io images tag --force "$ref" "$alias" >/dev/null ||
		aw_die "tagging $ref as $alias failed"
}

# The image's size in bytes: its uncompressed layers, as `docker images` counts them, which is
# what its docker-archive holds (plus a few hundred bytes of JSON).
image_size() {
	stat --format %s "$(archive_of "$1")"
}

# Older builds of the project image: each keeps its own layers, so only the newest stays.
prune_project_images() {
	local keep=$1 name
	while IFS= read -r name; do
		[[ "$name" == "$keep" || "$name" != "$PROJECT_REPO:"* ]] && continue
		bah rmi "$name" >/dev/null 2>&1 || true
	done < <(bah images --noheading --format '{{.Repository}}:{{.Tag}}' 2>/dev/null)
}

main() {
	local import=1 size=0 sbom=0 python=0 arg
	for arg in "$@"; do
		case "$arg" in
		--no-import) import=0 ;;
		--python-example) python=1 ;;
		--size) size=1 ;;
		--sbom) sbom=1 ;;
		-h | --help)
			aw_usage "${BASH_SOURCE[0]}"
			return 0
			;;
		*)
			aw_usage "${BASH_SOURCE[0]}"
			return 2
			;;
		esac
	done
	require
	# Made here, not by buildah, which would make the state root private to root, and other
	# scripts' servers (PostgreSQL runs as its own user) must traverse it.
	mkdir -p "$IMAGES_DIR" "$(aw_state_root)/buildah-run"
	aw_lock "$IMAGES_DIR/.lock" 8
	write_config
	if ((python)); then
		build_python_base
		local python_ref
		python_ref="$(python_example_ref)"
		build_python_example "$python_ref"
		((import)) && import_into_node "$python_ref"
		printf '%s\n' "$python_ref"
		((size)) && image_size "$python_ref"
		return 0
	fi
	build_deps_base
	build_runtime_base
	local ref
	ref="$PROJECT_REPO:$(project_tag)"
	build_project "$ref"
	local sbom_path
	sbom_path="$(sbom_of "$ref")"
	((import)) && import_into_node "$ref"
	printf '%s\n' "$ref"
	((size)) && image_size "$ref"
	((sbom)) && printf '%s\n' "$sbom_path"
	return 0
}

main "$@"
