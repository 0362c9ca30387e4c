"""One module per ``kprobe-tui`` subcommand: ``add_parser(subparsers)`` and ``run(args) -> exit status``.

``cli.COMMANDS`` lists them (the order of the help); ``cli`` imports a command's module only when it is
named. Output goes to stdout (text, or JSON with --json); errors are ``UserError``s the CLI prints.
"""
