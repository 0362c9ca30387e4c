"""The property suite's own promises: each example is bounded in memory, and a run is replayed by its printed seed."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.property.conftest import DEFAULT_SEED
from tests.property.mutation import MEMORY_BOUND, examples
from tests.unit.test_no_internal_error import PROJECT


def test_an_example_that_allocates_what_a_header_claims_fails():
    @examples(1)
    @given(st.just(4 * MEMORY_BOUND))
    def allocates_the_claim(claimed: int) -> None:
        bytearray(claimed)

    with pytest.raises(MemoryError):
        allocates_the_claim()


def run_property_test(*options: str) -> tuple[str, list[str]]:
    """One property test in a child pytest, every example shown: its seed line and the examples tried."""
    child = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s", "--hypothesis-verbosity=verbose",
                            "tests/property/test_probe_spec.py::test_an_argument_parses_or_is_refused", *options],
                           cwd=PROJECT, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stdout + child.stderr
    [seed] = re.findall(r"property tests: hypothesis seed (\S+) \(re-run them with --hypothesis-seed=\1\)", child.stdout)
    return seed, [line for line in child.stdout.splitlines() if line.startswith("    text=")]  # each example's text


def test_a_run_prints_its_seed_and_the_seed_replays_it():
    seed, tried = run_property_test()
    assert seed == str(DEFAULT_SEED) and len(tried) > 100
    assert run_property_test(f"--hypothesis-seed={seed}") == (seed, tried)
    other_seed, other = run_property_test("--hypothesis-seed=7")
    assert other_seed == "7" and other != tried
