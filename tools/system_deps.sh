#!/usr/bin/env bash
# System packages the test suite needs, installed by `make test` itself (the README's second command
# must pass on a fresh machine). As root with apt-get, missing packages are installed; otherwise the
# script prints exactly what to install and exits non-zero.
#
# Each entry: a command whose presence shows the package is there, then the Debian package.
set -euo pipefail
needs=(
    "fusermount3 fuse3"                                   # power-loss tests (tests/reliability/lazyfs.py)
    "/usr/lib/postgresql/15/bin/initdb postgresql-15"     # shared-store tests (throwaway cluster)
    "npm npm"                                             # Node client and MCP conformance tests: npm
                                                          # installs the pinned Node 22 the suite needs
)
missing=()
for entry in "${needs[@]}"; do
    probe=${entry%% *}
    package=${entry#* }
    if [[ $probe == /* ]]; then
        [[ -x $probe ]] || missing+=("$package")
    else
        command -v "$probe" >/dev/null || missing+=("$package")
    fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "installing system packages for the tests: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    exit 0
fi
echo "the tests need these system packages: ${missing[*]}" >&2
echo "install them as root, e.g.: apt-get install -y ${missing[*]}" >&2
exit 1
