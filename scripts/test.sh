#!/usr/bin/env bash
# npm test: installs the npm dependencies when missing or stale (scripts/deps.sh), builds the stack's
# tools if needed, brings the local stack up (idempotent), exports its environment and runs vitest with
# the given arguments, on Node 24 when scripts/node.sh can provide it.
# Exit code is vitest's (or the setup step's when that fails first). The stack is left running;
# `npm run stack -- down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
bash scripts/tools.sh all

if [ "${COCOON_TEST_NODE:-24}" != "system" ]; then
  if node_bin=$(bash scripts/node.sh); then
    export PATH="$node_bin:$PATH"
  else
    echo "[test] Node 24 unavailable; running tests on $(node --version)" >&2
  fi
fi
echo "[test] node $(node --version)" >&2

tsx=node_modules/.bin/tsx
"$tsx" scripts/stack.ts up
eval "$("$tsx" scripts/stack.ts env)"

set +e
node_modules/.bin/vitest run "$@"
rc=$?
set -e
exit "$rc"
