"""DWARF debug info through pyelftools: where it is, probeable lines, variables in scope.

Pure core: never imports textual. Entry point: ``scope.open_debuginfo``.
"""
