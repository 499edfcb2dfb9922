"""Lets the tests import app.py under ordinary CPython.

componentize-py generates the `wit_world` package (and `componentize_py_types`) only while it
builds the component; stand_ins/ holds small look-alikes of them, so the action's logic is tested
without Wasm. The built component is checked with `cojoin plugin test`.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "stand_ins"), str(HERE.parent)]
