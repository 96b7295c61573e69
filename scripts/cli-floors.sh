#!/bin/sh
# The CLI's tests under the lowest typer, click and rich that pyproject.toml allows (issue 37:
# a GPU image's own older typer/click refused an option the newest accepted). A venv holds only
# those three at their floors and sees the rest of .venv's packages through a .pth line, which
# Python appends after the venv's own site-packages, so the floors win.
# Usage: sh scripts/cli-floors.sh [VENV] (default .venv); run by `make test-floors`.
set -eu
VENV=${1:-.venv}
FLOORS="typer==0.16.0 click==8.2.0 rich==13.0.0"  # the `>=` floors in pyproject.toml
dir=.venv-floors
if [ ! -f "$dir/.installed" ] || [ "$(cat "$dir/.installed")" != "$FLOORS" ]; then
  rm -rf "$dir"
  "$VENV/bin/python" -m venv "$dir"
  # shellcheck disable=SC2086
  "$dir/bin/pip" install -q $FLOORS
  site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  main=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$main" > "$site/zz-tailpod-venv.pth"
  echo "$FLOORS" > "$dir/.installed"
fi
PYTHONPATH=$(pwd) "$dir/bin/python" - <<'PY'
import click, rich, typer  # noqa: E401
from importlib.metadata import version
print("floors:", "typer", typer.__version__, "click", version("click"), "rich", version("rich"))
PY
PYTHONPATH=$(pwd) exec "$dir/bin/python" -m pytest -q -p no:cacheprovider -n 2 tests/unit/cli
