"""The math layer stays torch-only: importing it must not pull in any heavy framework."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

FORBIDDEN = ("lightning", "pytorch_lightning", "ray", "vllm", "transformers")


def test_algorithms_import_only_torch() -> None:
    # A fresh interpreter: this test process may already have imported the heavy stacks through other tests.
    code = (
        "import sys, lightning_rl.algorithms\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip() == "", f"lightning_rl.algorithms imported {result.stdout.strip()}"


def test_public_api_is_exported() -> None:
    import lightning_rl.algorithms as algorithms

    for name in algorithms.__all__:
        assert hasattr(algorithms, name), name
