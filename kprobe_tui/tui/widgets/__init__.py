"""Widgets the screens share; every big list is a ``cursor_view.CursorView`` on Textual's Line API (only
the rows on screen are formatted).
"""
