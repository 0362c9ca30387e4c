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
    left: _Node
    right: _Node

    def matches(self, text: str) -> bool:
        return self.left.matches(text) and self.right.matches(text)


@dataclass(frozen=True)
class _Or:
    left: _Node
    right: _Node

    def matches(self, text: str) -> bool:
        return self.left.matches(text) or self.right.matches(text)


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
    """perf's strglobmatch as a regex (case-sensitive, whole string)."""
    out, i = [], 0
    while i < len(glob):
        char = glob[i]
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "\\" and i + 1 < len(glob):
            i += 1
            out.append(re.escape(glob[i]))
        elif char == "[":
            end = glob.find("]", i + 2)
            if end < 0:
                return re.compile(r"(?!)")  # a broken class never matches (perf: "always returns false")
            body = glob[i + 1 : end]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\").replace("[", "\\[") + "]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out), re.S)


class _Parser:
    """strfilter_node__new: a token is an operator, a parenthesis, or a run of anything else up to a
    separator or a space (``\\`` escapes one; ``[!`` is a glob's, not a NOT)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

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
        root = self._conjunction()
        while True:
            column, token = self._peek()
            if token != "|":
                return root
            self._token()
            root = _Or(root, self._conjunction())

    def _conjunction(self) -> _Node:
        node = self._negation()
        while True:
            _, token = self._peek()
            if token != "&":
                return node
            self._token()
            node = _And(node, self._negation())

    def _negation(self) -> _Node:
        column, token = self._token()
        if token == "!":
            return _Not(self._negation())
        if token == "(":
            node = self._expression()
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
