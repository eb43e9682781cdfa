#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine, then runs it all:
# ZooKeeper (apt-get, when missing), a virtualenv with shardcron and its dev tools,
# lint, type checks, the documentation site, and the whole pytest suite against a real
# ZooKeeper.
set -euo pipefail
cd "$(dirname "$0")"

# System packages: ZooKeeper (and Java) for the registry tests, Chromium for the console's
# browser tests, SPIN and a C compiler for the model check of the claim protocol
# (spec/claims.pml) and for the shim that steps a worker's wall clock (tests/clockshim.c).
# A missing one is installed; if that fails, so does this script.
missing=()
[ -x /usr/share/zookeeper/bin/zkServer.sh ] && command -v java >/dev/null || missing+=(zookeeper)
command -v chromium >/dev/null || missing+=(chromium)
command -v spin >/dev/null || missing+=(spin)
command -v gcc >/dev/null || missing+=(gcc)
if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing ${missing[*]} from Debian packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade "pip>=25.1" 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -m pip install -q -e ".[postgres,mysql,console]" --group dev 2>&1 | grep -v '^WARNING: Location' || true

echo "== ruff"
.venv/bin/ruff check src tests bench
.venv/bin/ruff format --check src tests bench
echo "== mypy --strict"
.venv/bin/mypy
echo "== mkdocs build --strict"
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "${SITE_DIR:-site}"
echo "== pytest"
.venv/bin/pytest "$@"
