#!/usr/bin/env bash
# Set up a virtual environment with hetc and its test extras, then run the tests.
# Without arguments: every test but the `slow` ones (about 10 minutes on 2 cores). Extra
# arguments go to pytest instead (e.g. `-m slow` for the slow ones, `-m ""` for all). Tests run
# in HETC_TEST_WORKERS pytest-xdist workers (default: the number of cores, at most 4; 0: in
# this process).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test]'
# torch (and transformers' model definitions) only export the acceptance models (tests marked
# `torch`); they skip without them.
.venv/bin/pip install -q torch==2.13.0 transformers==5.24.0 \
  || echo "torch==2.13.0 / transformers==5.24.0 not installable here: torch tests will skip"
if [ "$#" -eq 0 ]; then
  set -- -m "not slow"
fi
workers="${HETC_TEST_WORKERS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}"
exec .venv/bin/python -m pytest -n "$workers" "$@"
