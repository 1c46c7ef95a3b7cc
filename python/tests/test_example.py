"""The README's example script runs and prints what it promises."""

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "geo_index.py"


def test_example_runs():
    out = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "loaded 20000 records" in out.stdout
    assert "check ok" in out.stdout
