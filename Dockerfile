# One image for the operator and for sandbox pods running the example agent:
#
#   docker build -t agent-watchdog:dev .
#   docker run --rm agent-watchdog:dev --help
#   docker run --rm --read-only --tmpfs /tmp agent-watchdog:dev operator --help
#
# The sources are TypeScript with erasable syntax only; the image holds them as JavaScript (Node's
# own type stripping, once, at build time: an operator that loads JavaScript does not carry the
# type stripper, about 30 MiB of an idle operator), the generated CRDs and the production
# dependencies only. The
# runtime stage is distroless (Node, glibc, the CA bundle): no shell, no npm, no package manager
# ever enters it, so none of their bytes are in the image. hack/images.sh builds this same file
# with no registry, from local stand-ins for both base images.

# ---- base images, pinned ----------------------------------------------------------------------
# By digest (the multi-platform index), so that a rebuild gets the same bytes whatever the tags
# point to since; the tag stays for people and for update bots. Bump both together, and check a
# new digest with `crane digest <image>:<tag>` or `docker buildx imagetools inspect`.
# hack/images.sh, which has no registry, passes its local stand-ins by name instead.
ARG NODE_IMAGE=node:24.21.0-bookworm-slim@sha256:2fe369e969550cde8e867afc3fe370b260140cab4a23d467074295b42163d553
ARG RUNTIME_IMAGE=gcr.io/distroless/nodejs24-debian12:nonroot@sha256:14d42e2511532589a7c7e01a753667a74fcc96266e137e8125006b87b0c32d0a

# ---- production dependencies ----------------------------------------------------------------
FROM ${NODE_IMAGE} AS deps
# Where npm gets the packages from: a registry (a mirror, say), or only its cache
# (hack/images.sh fills one on the host and builds with NPM_CONFIG_OFFLINE=true).
ARG NPM_CONFIG_REGISTRY=https://registry.npmjs.org/
ARG NPM_CONFIG_OFFLINE=false
ARG NPM_CONFIG_CACHE=/tmp/npm-cache
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: no production dependency needs an install script, and none should run.
# Type declarations and source maps are of no use at run time and are a large part of the tree.
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund \
    && find node_modules -type f \( -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.map' -o -name '*.md' \) -delete \
    && rm -rf node_modules/@types

# ---- the sources as JavaScript ---------------------------------------------------------------
FROM ${NODE_IMAGE} AS js
WORKDIR /app
COPY operator ./operator
COPY hack/image/to-javascript.mjs ./
RUN node --no-warnings to-javascript.mjs operator

# ---- runtime --------------------------------------------------------------------------------
FROM ${RUNTIME_IMAGE}

ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="agent-watchdog" \
      org.opencontainers.image.description="Kubernetes operator that keeps long-running AI agent runs alive and honest; also runs the example sandbox agent" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="gcr.io/distroless/nodejs24-debian12:nonroot"

# Read-only root filesystem: nothing writes outside /tmp (mount an emptyDir or tmpfs there).
# HOME points there too, so that nothing that looks for a home directory finds an unwritable one.
ENV NODE_ENV=production \
    HOME=/tmp \
    TMPDIR=/tmp

WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json package-lock.json ./
COPY crds ./crds
COPY --from=js /app/operator ./operator

# The distroless "nonroot" user id: numeric, so that runAsNonRoot can verify it without a passwd
# entry.
USER 65532:65532

# metrics, probes
EXPOSE 8080 8081

ENTRYPOINT ["/nodejs/bin/node", "/app/operator/cli/main.js"]
CMD ["operator"]
