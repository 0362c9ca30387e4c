"""The live event stream: trace_pipe parser, reader thread, bounded store and filter language.

Pure cores: no textual import here, the TUI and the ``tail`` command sit on top.
"""
