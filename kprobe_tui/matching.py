"""Name matching for the function list: substring, glob and fuzzy, with the spans to highlight.

Filtering 100k names must fit in a keystroke, so each mode compiles once to a predicate that runs in
C (``str.__contains__`` on pre-lowered names, or a compiled regex through ``filter``), and a query
that only extends the previous one filters the previous result instead of the whole list.
Matching is smart-case: all-lowercase queries ignore case.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

MODES = ("substring", "glob", "fuzzy")


def _glob_regex(glob: str, any_char: str = ".") -> str:
    """fnmatch-style glob to an anchored regex body (``*`` and ``?`` never cross a name).

    ``any_char``: what ``?`` matches (``\\S``: never whitespace, for names inside a file's lines)."""
    out, i = [], 0
    while i < len(glob):
        char = glob[i]
        if char == "*":
            out.append(any_char + "*")
        elif char == "?":
            out.append(any_char)
        elif char == "[":
            end = glob.find("]", i + 2)
            if end < 0:
                out.append(re.escape(char))
            else:
                body = glob[i + 1 : end].replace("\\", "\\\\")
                # a negated class must not match the newline between names in a joined list (nor, within
                # a line, the whitespace around a name)
                body = ("^\n" if any_char == "." else "^\\s") + body[1:] if body.startswith("!") else body
                out.append("[" + body + "]")
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


@dataclass(frozen=True)
class Matcher:
    query: str
    mode: str  # one of MODES

    @classmethod
    def for_query(cls, query: str, mode: str = "auto") -> Matcher:
        if mode == "auto":
            mode = "glob" if any(c in query for c in "*?[") else "substring"
        if mode not in MODES:
            raise ValueError(f"unknown match mode {mode!r}")
        return cls(query, mode)

    @property
    def ignore_case(self) -> bool:
        return self.query == self.query.lower()

    def _regex(self) -> re.Pattern:
        flags = re.IGNORECASE if self.ignore_case else 0
        if self.mode == "glob":
            return re.compile(_glob_regex(self.query) + r"\Z", flags)
        if self.mode == "fuzzy":
            # t[^c]*c[^p]*p: the same matches as t.*c.*p, without backtracking.
            parts = [re.escape(self.query[0])] if self.query else []
            for char in self.query[1:]:
                parts.append(f"[^{re.escape(char)}]*{re.escape(char)}")
            return re.compile("".join(parts), flags)
        return re.compile(re.escape(self.query), flags)

    def name_regex(self) -> str:
        """A regex matching exactly the names this matches, within a line of text (no whitespace crossed);
        with ``ignore_case`` the caller compiles it with re.IGNORECASE."""
        if self.mode == "glob":
            return _glob_regex(self.query, r"\S")
        if self.mode == "substring":
            return r"\S*?" + re.escape(self.query) + r"\S*"
        raise ValueError(f"no name regex for {self.mode} matching")

    def narrows(self, previous: Matcher | None) -> bool:
        """True when every match of self is also a match of ``previous`` (so filter its result)."""
        if previous is None or previous.mode != self.mode or previous.ignore_case != self.ignore_case:
            return False
        if self.mode == "substring":
            return previous.query in self.query
        if self.mode == "fuzzy":
            rest = iter(self.query)
            return all(char in rest for char in previous.query)
        return False

    def filter(self, names: Sequence[str], lowered: Sequence[str] | None = None, joined: str | None = None) -> list[str]:
        """The names that match, in their order. ``lowered`` (names.lower(), same order) speeds up substring;
        ``joined`` ("\n".join(names)) lets a glob scan every name in one regex pass."""
        if not self.query:
            return list(names)
        if self.mode == "glob" and joined is not None:
            flags = re.MULTILINE | (re.IGNORECASE if self.ignore_case else 0)
            return re.findall(f"^{_glob_regex(self.query)}$", joined, flags)
        if self.mode == "substring":
            if not self.ignore_case:
                query = self.query
                return [name for name in names if query in name]
            if lowered is not None:
                query = self.query
                return [name for name, low in zip(names, lowered) if query in low]
        if self.mode == "glob":
            return list(filter(self._regex().match, names))
        return list(filter(self._regex().search, names))

    def spans(self, name: str) -> list[tuple[int, int]]:
        """Where the query matched in ``name``: what the list highlights."""
        if not self.query:
            return []
        haystack = name.lower() if self.ignore_case else name
        query = self.query.lower() if self.ignore_case else self.query
        if self.mode == "substring":
            found, start = [], haystack.find(query)
            while start >= 0:
                found.append((start, start + len(query)))
                start = haystack.find(query, start + len(query))
            return found
        if self.mode == "fuzzy":
            found, at = [], 0
            for char in query:
                at = haystack.find(char, at)
                if at < 0:
                    return []
                found.append((at, at + 1))
                at += 1
            return found
        found, at = [], 0  # glob: highlight the literal pieces, in order
        for piece in re.split(r"[*?]|\[[^\]]*\]", query):
            if piece:
                at = haystack.find(piece, at)
                if at < 0:
                    break
                found.append((at, at + len(piece)))
                at += len(piece)
        return found


class IncrementalFilter:
    """Filters one fixed list of names; a query that narrows the last one filters the last result."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = names
        self._lowered = [name.lower() for name in names]
        self._joined = "\n".join(names)
        self._last: tuple[Matcher, list[str]] | None = None

    def apply(self, matcher: Matcher) -> list[str]:
        if not matcher.query:
            self._last = None
            return list(self.names)
        if self._last is not None and matcher.narrows(self._last[0]):
            pool = self._last[1]
            result = matcher.filter(pool, [name.lower() for name in pool] if len(pool) < 20000 else None)
        else:
            result = matcher.filter(self.names, self._lowered, self._joined)
        self._last = (matcher, result)
        return result
