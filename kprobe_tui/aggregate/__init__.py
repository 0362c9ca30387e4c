"""Answers about many hits at once: counts, histograms, latency, top-N.

Pure core (never imports textual or rich): the aggregation model, its compiler to hist triggers
and synthetic events, the kernel ``hist`` file parser, the user-space aggregator, and one result
type whichever engine ran. ``run.AggregationRun`` drives an engine on ``targets.run_builder``'s
targets; the CLI and the TUI only ask it for samples and render them. ``live`` is the statistics
view's question and runner.
"""
