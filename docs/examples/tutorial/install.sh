#!/usr/bin/env bash
# The tutorial's install, run by tests/test_wheel.py in a fresh directory with
# pip pointed at the built wheel (PIP_NO_INDEX, PIP_FIND_LINKS): the package
# a reader installs, not the source tree.
set -euo pipefail

# --8<-- [start:install]
python -m venv .venv
. .venv/bin/activate
pip install tether
# --8<-- [end:install]
