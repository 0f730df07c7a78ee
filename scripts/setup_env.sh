#!/usr/bin/env bash
# Sourced by the other scripts: create .venv on first use and (re)install when the requirements change.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python_bin="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  echo "[setup] creating $venv with $($python_bin --version)"
  "$python_bin" -m venv "$venv"
fi
stamp="$venv/.normjax-installed"
want="$(cat "$root/requirements.txt" "$root/requirements-dev.txt" "$root/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] installing dependencies into $venv (first run takes a few minutes)"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -r "$root/requirements-dev.txt"
  "$venv/bin/python" -m pip install --quiet --no-deps -e "$root"
  echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
