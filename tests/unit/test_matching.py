"""Matching on the real kernel's function names: every mode, smart case, and narrowing."""

from __future__ import annotations

import fnmatch
import re

import pytest

from kprobe_tui.matching import IncrementalFilter, Matcher


@pytest.fixture(scope="module")
def names() -> list[str]:
    found = set()
    with open("/proc/kallsyms") as handle:
        for line in handle:
            parts = line.split()
            if parts[1] in "tT" and not parts[2].startswith("__pfx_"):
                found.add(parts[2])
    assert len(found) > 10000
    return sorted(found)


def test_substring_is_smart_case():
    assert Matcher.for_query("read").filter(["vfs_read", "VFS_READ", "write"]) == ["vfs_read", "VFS_READ"]
    assert Matcher.for_query("READ").filter(["vfs_read", "VFS_READ"]) == ["VFS_READ"]


def test_auto_mode_picks_glob_for_wildcards():
    assert Matcher.for_query("tcp_*").mode == "glob"
    assert Matcher.for_query("tcp_").mode == "substring"


def test_glob_matches_fnmatch_on_real_names(names):
    for pattern in ("tcp_*", "*_read", "vfs_?ead", "[a-c]*_init", "[!a-y]*lock"):
        expected = [name for name in names if fnmatch.fnmatchcase(name, pattern)]
        assert Matcher.for_query(pattern, "glob").filter(names) == expected, pattern
        # one regex pass over the joined list: a negated class must not swallow the newline between names
        assert Matcher.for_query(pattern, "glob").filter(names, joined="\n".join(names)) == expected, pattern
        assert expected, f"{pattern} should match something on a real kernel"


def test_fuzzy_is_a_subsequence_match(names):
    expected = [name for name in names if re.search("t.*c.*p.*s.*n.*d", name, re.IGNORECASE)]
    assert Matcher.for_query("tcpsnd", "fuzzy").filter(names) == expected
    assert "tcp_sendmsg" in expected


def test_spans_mark_what_matched():
    assert Matcher.for_query("read", "substring").spans("vfs_read_read") == [(4, 8), (9, 13)]
    assert Matcher.for_query("vfrd", "fuzzy").spans("vfs_read") == [(0, 1), (1, 2), (4, 5), (7, 8)]
    assert Matcher.for_query("tcp_*msg", "glob").spans("tcp_sendmsg") == [(0, 4), (8, 11)]


@pytest.mark.parametrize("mode,query", [("substring", "tcp_sendmsg"), ("fuzzy", "tcpsndmsg"), ("glob", "tcp_*msg")])
def test_incremental_filter_equals_full_filter_at_every_keystroke(names, mode, query):
    incremental = IncrementalFilter(names)
    for end in range(1, len(query) + 1):
        matcher = Matcher.for_query(query[:end], mode)
        assert incremental.apply(matcher) == matcher.filter(names), query[:end]
    # deleting characters (a wider query) must not reuse the narrower result
    wider = Matcher.for_query(query[:2], mode)
    assert incremental.apply(wider) == wider.filter(names)


def test_narrowing_only_when_results_are_a_subset():
    assert Matcher("tcp_s", "substring").narrows(Matcher("tcp_", "substring"))
    assert not Matcher("tcp", "substring").narrows(Matcher("tcp_", "substring"))
    assert Matcher("tcsm", "fuzzy").narrows(Matcher("tsm", "fuzzy"))
    assert not Matcher("Tcp", "substring").narrows(Matcher("cp", "substring"))  # case sense changed
