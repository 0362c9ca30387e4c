"""Probes from what a person asks: perf's syntax parsed, guarded, compiled and rendered.

Pure core: never imports textual or rich. Entry points: ``pipeline`` (``parse``, ``plan``, ``create``: one
way for every front end), ``spec.parse_spec`` and ``compile.compile_spec`` underneath it, ``render`` (the
same probe as tracefs, perf and bpftrace write it), ``form`` (the builder's form as data),
``binary.BinaryCatalog`` (a user program's functions).
"""
