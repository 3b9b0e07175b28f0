#!/usr/bin/env bash
# The whole suite as on a fresh machine: a fresh clone of one commit, run under `env -i` with
# PATH=/usr/bin:/bin and a new, empty HOME in a temporary directory, so no user cache is used:
# not uv's (every wheel is downloaded again, and the pinned uv itself), not Phoenix's
# environment, not mypy's. Only the system (Debian's python3, the preflight's packages) is shared.
#
#   scripts/fresh-clone-test.sh [--shared-uv-cache] [COMMIT] [-- COMMAND...]
#
# COMMIT defaults to HEAD of this checkout; COMMAND to `bash scripts/test.sh`. Prints the elapsed
# time and PASSED or FAILED last; exits with the command's status. --shared-uv-cache keeps this
# machine's uv cache (UV_CACHE_DIR, as .ci/check-fresh-clone does) and the test model's server
# environment that scripts/model-test-server.sh built here (llama-cpp-python compiled from source
# takes 12-17 minutes; uv's cache does not hold that build): no wheel is downloaded or built
# again, every other cache (Phoenix's environment, mypy's) is still new.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
commit=HEAD
shared=()
model_envs=()
if [ "${1:-}" = --shared-uv-cache ]; then
    source "$here/scripts/bootstrap-uv.sh" >/dev/null
    shared=("UV_CACHE_DIR=$("$UV" cache dir)")
    shopt -s nullglob
    model_envs=("${XDG_CACHE_HOME:-$HOME/.cache}"/polyloop/model-server-llama-cpp-python-*/)
    shopt -u nullglob
    shift
fi
if [ "$#" -gt 0 ] && [ "$1" != -- ]; then commit="$1"; shift; fi
[ "${1:-}" = -- ] && shift
command=("$@")
[ "${#command[@]}" -gt 0 ] || command=(bash scripts/test.sh)
say() { echo "fresh-clone-test: $*"; }

sha="$(git -C "$here" rev-parse --verify --quiet "$commit^{commit}")" || {
    say "no commit $commit in $here"
    exit 2
}
# A short path, as a habit: the CLI's suggested commands start with the clone's absolute path
# (they are folded to 80 columns whatever its length, tests/cli/rendering/test_layout.py).
work="$(mktemp -d /tmp/plf.XXXXXX)"
# The cluster runs as another user when this is root: it must be able to enter the clone's parents.
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
git clone --quiet --no-hardlinks "$here" "$work/c" && git -C "$work/c" checkout --quiet "$sha" || {
    say "could not clone $here at $sha"
    exit 2
}
mkdir "$work/home"
if [ "${#model_envs[@]}" -gt 0 ]; then
    mkdir -p "$work/home/.cache/polyloop"
    for built in "${model_envs[@]}"; do ln -s "${built%/}" "$work/home/.cache/polyloop/"; done
fi
say "commit $sha in $work/c, HOME=$work/home, PATH=/usr/bin:/bin: ${command[*]}"
started="$(date +%s)"
(cd "$work/c" && env -i "HOME=$work/home" "PATH=/usr/bin:/bin" "${shared[@]}" "${command[@]}")
status=$?
elapsed=$(($(date +%s) - started))
verdict=PASSED
[ "$status" = 0 ] || verdict="FAILED (exit $status)"
say "$verdict in $((elapsed / 60)) min $((elapsed % 60)) s ($elapsed s), commit $sha"
exit "$status"
