"""The live event stream: trace_pipe parser, reader thread, bounded store and filter language.

Pure cores: no textual import here, the TUI and the ``tail`` command sit on top. Entry points:
``session.open_session`` (a ``TailSession``: reader, store and filter together), ``filterexpr`` (the
filter language), ``parser.LineParser`` (one trace_pipe line to an ``Event``).
"""
