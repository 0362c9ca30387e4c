from kprobe_tui.cli import main

raise SystemExit(main())
