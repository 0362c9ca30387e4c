"""The app's screens, one a module (``functions.FunctionsScreen`` is the first): views of the cores'
public API, never of tracefs, pyelftools or the DWARF engine (``devtools.layering`` checks it).
"""
