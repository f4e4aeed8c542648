#!/usr/bin/env bash
# Installs the npm dependencies when they are missing or stale, so `npm run dev` and `npm test` can be the
# first commands on a fresh clone. Runs `npm ci` when node_modules is absent or does not hold what
# package-lock.json pins (compared with npm's own record of the install, node_modules/.package-lock.json:
# every non-optional package present at its locked version); prints nothing when it does. Exit code is
# npm's. It needs nothing from node_modules to start: bash and the node that runs npm.
set -euo pipefail
cd "$(dirname "$0")/.."

stale=$(node -e '
  const fs = require("fs");
  let installed;
  try { installed = JSON.parse(fs.readFileSync("node_modules/.package-lock.json", "utf8")).packages; }
  catch { console.log("node_modules is missing"); process.exit(0); }
  const locked = JSON.parse(fs.readFileSync("package-lock.json", "utf8")).packages;
  for (const [path, want] of Object.entries(locked)) {
    if (path === "") continue;
    const have = installed[path];
    if (have ? have.version !== want.version : !want.optional) {
      console.log(`${path} is ${have ? have.version : "absent"}, package-lock.json pins ${want.version}`);
      process.exit(0);
    }
  }
')
if [ -n "$stale" ]; then
  echo "[deps] npm ci ($stale); a few minutes, quiet until done" >&2
  echo "[deps] warnings that npm did not run install scripts (esbuild, protobufjs, @swc/core) are harmless: nothing here needs them" >&2
  npm ci --no-audit --no-fund >&2
fi
