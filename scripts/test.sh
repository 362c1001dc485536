#!/usr/bin/env bash
# Set up a virtual environment with hetc and its test extras, then run the tests.
# Extra arguments go to pytest (e.g. `-m "not slow"` for the quick subset).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test]'
# torch only exports the acceptance models (tests marked `torch`); they skip without it.
.venv/bin/pip install -q torch==2.13.0 || echo "torch==2.13.0 not installable here: torch tests will skip"
exec .venv/bin/python -m pytest "$@"
