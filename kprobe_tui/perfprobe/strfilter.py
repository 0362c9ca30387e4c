"""perf's filter language (tools/perf/util/strfilter.c): globs joined by ``!``, ``&``, ``|`` and parentheses.

``perf probe --funcs`` filters names with ``!_* & !*@plt`` by default, ``--vars`` with
``!__k???tab_* & !__crc_*``, and ``-l``/``-d`` with the filter given. Globs are perf's strglobmatch:
``*``, ``?``, ``[...]`` (``!`` or ``^`` negates, ``a-z`` ranges), ``\\`` escaping, case-sensitive.
As in perf, ``&`` binds tighter than ``|``, and a bad filter is refused with a caret under its column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kprobe_tui.errors import UserError

_SEPARATORS = "|&!()"
# Parentheses and ! are read recursively (3 frames a level): well inside Python's 1000. Each --filter
# given after the first adds one level (``or_``).
MAX_NESTING = 100
_NEVER = re.compile(r"(?!)")


@dataclass(frozen=True)
class _Glob:
    pattern: re.Pattern

    def matches(self, text: str) -> bool:
        return self.pattern.fullmatch(text) is not None


@dataclass(frozen=True)
class _Not:
    operand: _Node

    def matches(self, text: str) -> bool:
        return not self.operand.matches(text)


@dataclass(frozen=True)
class _And:
    """Terms of a chain of ``&``, kept flat: a thousand-term chain is a loop, not a thousand frames."""

    terms: tuple[_Node, ...]

    def matches(self, text: str) -> bool:
        return all(term.matches(text) for term in self.terms)


@dataclass(frozen=True)
class _Or:
    terms: tuple[_Node, ...]

    def matches(self, text: str) -> bool:
        return any(term.matches(text) for term in self.terms)


_Node = _Glob | _Not | _And | _Or


class StrFilter:
    """A parsed filter: ``matches(name)``; ``or_(text)`` adds an alternative, as a second --filter does."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._root = _Parser(text).parse()

    def matches(self, name: str) -> bool:
        return self._root.matches(name)

    def or_(self, text: str) -> StrFilter:
        """perf's strfilter__or: ``(old)|(new)``."""
        return StrFilter(f"({self.text})|({text})")


def glob_regex(glob: str) -> re.Pattern:
    """perf's strglobmatch as a regex (case-sensitive, whole string).

    As fnmatch does since Python 3.11, the parts between two ``*`` match at their first place, in an
    atomic group: perf's backtracking (and a plain ``.*`` per star) takes exponential time on
    ``*a*a*a...b`` (30 stars against 200 a's ran for minutes)."""
    parts: list[str | None] = []  # regex pieces; None for a '*'
    i = 0
    while i < len(glob):
        char = glob[i]
        if char == "*":
            parts.append(None)
        elif char == "?":
            parts.append(".")
        elif char == "\\" and i + 1 < len(glob):
            i += 1
            parts.append(re.escape(glob[i]))
        elif char == "[":
            end = glob.find("]", i + 2)
            body = glob[i + 1 : end]
            negate = body[:1] in ("!", "^")
            members = _char_class(body[1:] if negate else body) if end >= 0 else None
            if members is None:
                return _NEVER  # a broken class never matches (perf: "always returns false")
            parts.append("[" + ("^" if negate else "") + members + "]")
            i = end
        else:
            parts.append(re.escape(char))
        i += 1
    return re.compile("(?s:" + _starred(parts) + r")\Z")


def _char_class(body: str) -> str | None:
    """The inside of a regex class for perf's ``[...]`` body; None when perf's never matches: an empty
    one, or a range running backwards (``z-a``, an error in perf's __match_charclass)."""
    if not body:
        return None
    members = [re.escape(body[0])]  # the first character is itself, even '-' or ']'
    k = 1
    while k < len(body):
        if body[k] == "-" and k + 1 < len(body):
            low, high = body[k - 1], body[k + 1]
            if low > high:
                return None
            members.append(f"{re.escape(low)}-{re.escape(high)}")
            k += 2
        else:
            members.append(re.escape(body[k]))
            k += 1
    return "".join(members)


def _starred(parts: list[str | None]) -> str:
    """The pieces joined, each run between two stars as ``(?>.*?RUN)``, the last run as ``.*RUN``."""
    out: list[str] = []
    i = 0
    while i < len(parts) and parts[i] is not None:
        out.append(parts[i] or "")
        i += 1
    while i < len(parts):
        while i < len(parts) and parts[i] is None:
            i += 1
        run = []
        while i < len(parts) and parts[i] is not None:
            run.append(parts[i] or "")
            i += 1
        out.append(f"(?>.*?{''.join(run)})" if i < len(parts) else ".*" + "".join(run))
    return "".join(out)


class _Parser:
    """strfilter_node__new: a token is an operator, a parenthesis, or a run of anything else up to a
    separator or a space (``\\`` escapes one; ``[!`` is a glob's, not a NOT)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0
        self.depth = 0

    def _token(self) -> tuple[int, str]:
        text, at = self.text, self.at
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            self.at = at
            return at, ""
        end = at + 1
        if text[at] not in _SEPARATORS:
            while end < len(text):
                if text[end - 1] == "\\" or (text[end] == "!" and text[end - 1] == "["):
                    end += 1
                    continue
                if text[end] in _SEPARATORS or text[end].isspace():
                    break
                end += 1
        self.at = end
        return at, text[at:end]

    def _error(self, column: int) -> UserError:
        return UserError(f"filter parse error at {column + 1}: {self.text!r}\n  {' ' * (column + 1)}^",
                         "a filter is globs joined by ! (not), & (and), | (or) and parentheses, e.g. '!_* & !*@plt'")

    def parse(self) -> _Node:
        node = self._expression()
        column, token = self._token()
        if token:
            raise self._error(column)
        return node

    def _expression(self) -> _Node:
        """OR of ANDs of (NOT)* atoms: perf's tree, read left to right."""
        terms = [self._conjunction()]
        while self._peek()[1] == "|":
            self._token()
            terms.append(self._conjunction())
        return terms[0] if len(terms) == 1 else _Or(tuple(terms))

    def _conjunction(self) -> _Node:
        terms = [self._negation()]
        while self._peek()[1] == "&":
            self._token()
            terms.append(self._negation())
        return terms[0] if len(terms) == 1 else _And(tuple(terms))

    def _negation(self) -> _Node:
        column, token = self._token()
        if token in ("!", "("):
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise UserError(f"filter nested more than {MAX_NESTING} deep at {column + 1}: {self.text[:80]!r}",
                                "write fewer parentheses and ! (or fewer --filter options)")
            node = self._negation() if token == "!" else self._expression()
            self.depth -= 1
            if token == "!":
                return _Not(node)
            close_column, close = self._token()
            if close != ")":
                raise self._error(close_column)
            return node
        if not token or token in _SEPARATORS:
            raise self._error(column)
        return _Glob(glob_regex(token))

    def _peek(self) -> tuple[int, str]:
        at = self.at
        found = self._token()
        self.at = at
        return found
