"""The running kernel (or a snapshot of it), read and written through tracefs.

Pure core: never imports textual or rich, nor anything above it (probes, the UI). Entry points:
``sources.from_args`` / ``sources.locate`` (a ``paths.KernelSources``), ``KernelSources.tracing()`` (a
``tracefs.Tracefs``), ``catalog.Catalog`` (functions and whether each can be probed), ``events.Events``
(probes made, listed, removed), ``capabilities.detect`` and ``access`` (what this kernel and user allow),
``lifetime`` (what is undone at exit).
"""
