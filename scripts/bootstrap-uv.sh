# Sourced by scripts/demo.sh, scripts/test.sh and .ci/run (the one place that gets uv): sets and
# exports UV, the path of the pinned uv, installed on first use under the user's cache directory
# by bootstrap_uv.py (standard library only; nothing goes into any Python, no pip, no uv on PATH
# needed). uv is told never to download a Python (UV_PYTHON_DOWNLOADS=never): the workspace runs
# on an installed Python 3.11 or newer, such as Debian 12's /usr/bin/python3.

polyloop_python=""
for polyloop_candidate in python3 /usr/bin/python3; do
    # A pyenv shim naming a missing version fails here and the next candidate is tried.
    if "$polyloop_candidate" -c 'import sys; sys.exit(sys.version_info < (3, 7))' >/dev/null 2>&1; then
        polyloop_python="$polyloop_candidate"
        break
    fi
done
if [ -z "$polyloop_python" ]; then
    echo "bootstrap-uv: no working python3 (3.7 or newer) to install uv with; install one (Debian/Ubuntu: apt-get install python3) and rerun" >&2
    exit 1
fi
UV="$("$polyloop_python" "$(dirname "${BASH_SOURCE[0]}")/bootstrap_uv.py")" || exit 1
# uv trusts the system's certificate store, as Python's urllib (the bootstrap) does: behind a TLS-
# intercepting proxy whose CA the system trusts, both work or neither does.
export UV UV_PYTHON_DOWNLOADS=never UV_SYSTEM_CERTS="${UV_SYSTEM_CERTS:-1}"
if ! "$UV" python find '>=3.11' >/dev/null 2>&1; then
    echo "bootstrap-uv: PolyLoop needs Python 3.11 or newer and none is installed (uv is told not to download one); install it (Debian 12: apt-get install python3) and rerun" >&2
    exit 1
fi
unset polyloop_python polyloop_candidate
