"""``perf probe``'s command line, filters and printed text, so ``kprobe-tui probe`` is a drop-in for it.

``args`` reads perf probe's command line (its option parser's rules: options in order, -x applying to
the probes after it, one probe from the words after the options); ``strfilter`` is perf's filter
language (``!_* & !*@plt``); ``text`` prints what perf prints (Added new event, -l); ``points`` says
where a probe the kernel holds is, as perf's -l does. Pure: nothing here writes to the kernel.
"""
