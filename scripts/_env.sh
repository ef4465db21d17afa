# Shared by scripts/demo and scripts/test: a virtualenv with tether in it.
# Sourced, not run. Idempotent: a second run only checks what is there.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TETHER_VENV:-$ROOT/.venv}"

ensure_venv() {  # ensure_venv [extras]
    local extras="${1:-}"
    local py="${PYTHON:-}"
    if [ -z "$py" ]; then
        for candidate in python3.11 python3.12 python3.13 python3; do
            if command -v "$candidate" >/dev/null 2>&1 \
               && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
                py="$candidate"; break
            fi
        done
    fi
    [ -n "$py" ] || { echo "tether needs Python 3.11 or newer" >&2; exit 1; }
    if [ ! -x "$VENV/bin/python" ]; then
        echo "==> creating virtualenv $VENV ($("$py" --version))"
        "$py" -m venv "$VENV"
        "$VENV/bin/python" -m pip install -q -U pip
    fi
    local spec="$ROOT"
    [ -n "$extras" ] && spec="$ROOT[$extras]"
    echo "==> installing tether${extras:+ with [$extras]} into $VENV"
    "$VENV/bin/python" -m pip install -q -e "$spec" 2>&1 | grep -v -E '^(WARNING: Location|  )' || true
    "$VENV/bin/python" -c 'import tether' || { echo "tether failed to install" >&2; exit 1; }
    # An editable install is not byte-compiled (pip compiles only what it
    # copies): compile it once, or every worker process a test starts compiles
    # tether's modules again wherever PYTHONDONTWRITEBYTECODE is set.
    "$VENV/bin/python" -m compileall -q "$ROOT/src" >/dev/null || true
}
