"""Every Python example of README.md runs against a real broker."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TOKEN

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
SRC = Path(__file__).resolve().parents[1] / "src"


def test_there_are_examples():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_example_runs(plain, i):
    code = BLOCKS[i]
    url = 'comb.connect("nats://127.0.0.1:4222")'
    assert url in code
    # The README's broker has no auth; the test's wants a token.
    code = code.replace(url, f'comb.connect("{plain.url}", token="{TOKEN}")')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(SRC)})
    print(out.stdout)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip(), "the example printed nothing"
