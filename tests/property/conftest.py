"""Hypothesis settings for the property tests: bounded in time, reproducible, leaving nothing behind.

Every run uses one seed, printed at the end of the run: a fixed one by default, so CI and a developer
see the same examples, or the one given with ``--hypothesis-seed=N`` (re-run a CI failure with the
seed CI printed; try new examples with another). KPROBE_TUI_PROPERTY_SCALE=10 runs ten times the
examples of each test (tests/property/mutation.py).
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, core, settings

DEFAULT_SEED = 20261206
PROFILE = "property"

# deadline: what one example may take. Every parser here answers in milliseconds; a second (on a busy
# 2-core CI machine) catches a blow-up (catastrophic backtracking, a runaway loop), not a slow core.
# database=None: no .hypothesis/ directory in the checkout. print_blob: a failure prints the
# @reproduce_failure line that replays it exactly. A tmp_path shared by the examples of a test is fine:
# each example writes its file anew. derandomize=False: where the environment says CI (CI=true), Hypothesis
# makes its "ci" profile the default, which every profile inherits, and it derives the examples from each
# test's name, ignoring the seed (measured: --hypothesis-seed=7 then replayed the default seed's examples).
settings.register_profile(PROFILE, deadline=timedelta(seconds=1), database=None, print_blob=True, derandomize=False,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                 HealthCheck.function_scoped_fixture])


def pytest_configure(config):
    """Runs when this file is imported, after Hypothesis's plugin read its options (it reads none of ours)."""
    if config.getoption("--hypothesis-profile") is None:
        settings.load_profile(PROFILE)
    if config.getoption("--hypothesis-seed") is None:
        config.option.hypothesis_seed = str(DEFAULT_SEED)
        core.global_force_seed = DEFAULT_SEED  # what --hypothesis-seed sets: the plugin has read its options already


def pytest_terminal_summary(terminalreporter, config):
    seed = config.getoption("--hypothesis-seed")
    terminalreporter.write_line(f"property tests: hypothesis seed {seed} (re-run them with --hypothesis-seed={seed})")
