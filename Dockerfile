# syntax=docker/dockerfile:1
# cocoon-operator-ts image: Temporal workers + watcher in one Node process (src/worker.ts).
#   docker build -t ghcr.io/cocoonstack/cocoon-operator-ts:latest .
# Stages: build (`npm run build`: TypeScript → dist/, then scripts/bundle-workflows.ts writes the workflow
# bundle dist/workflow-bundle.js, so the worker never runs webpack at start-up, and scripts/bundle-operator.ts
# the main thread's dist/operator.js), deps (production
# node_modules only), runtime (non-root, numeric uid so Kubernetes can verify runAsNonRoot). Debian
# (glibc) rather than Alpine: the Temporal SDK's native core ships for glibc.
ARG NODE_IMAGE=node:24-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY scripts ./scripts
RUN npm run build \
 && test -f dist/operator.js \
 && test -f dist/workflow-bundle.js \
 && test -f dist/workflow-thread-preload.cjs

FROM ${NODE_IMAGE} AS deps
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
# Resident memory (docs/performance.md#operator-memory-as-shipped; `npm run bench -- --only shipped` reads
# these ENV lines): V8's young generation at 2 MiB per semi-space in both isolates (the main thread and the
# workflow thread; the default grows to 16), and glibc malloc at 2 arenas for the native Temporal core's
# threads. Measured together: 206 instead of 253-261 MiB after start; with 1000 VMs and the SDK's
# default cache, a peak of 602 instead of 709-791 MiB. glibc's mmap and trim thresholds fixed at 128 KiB
# (by default the mmap threshold rises to the largest block freed, up to 32 MiB, and what is freed below it
# stays in the arenas): with 1000 VMs and a workflow cache of 250, peaks of 237-241 / 259 instead of 263-306 / 281-317 MiB and 220
# instead of 243-279 MiB settled, CPU unchanged (docs/performance.md#glibc-malloc-thresholds-session-36).
ENV NODE_OPTIONS=--max-semi-space-size=2 MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=131072
WORKDIR /app
COPY --from=deps /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
# package.json carries "type": "module", which dist/*.js needs.
COPY package.json ./
USER 65532:65532
# 8080 = /metrics (METRICS_ADDR), 8081 = /healthz and /readyz (PROBE_ADDR).
EXPOSE 8080 8081
# The preload turns off the SDK's per-promise workflow stack capture (WORKFLOW_STACK_TRACES). dist/operator.js
# is the main thread bundled into one file (scripts/bundle-operator.ts: ~12-22 MiB less resident memory); bundled,
# two dependencies of client-node are outside node_modules, where Node no longer silences their deprecation
# warnings (tr46's punycode, node-fetch's url.parse), so those two are turned off here.
CMD ["node", "--disable-warning=DEP0040", "--disable-warning=DEP0169", "--require", "./dist/workflow-thread-preload.cjs", "dist/operator.js"]
