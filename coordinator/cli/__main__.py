"""``python -m coordinator.cli`` = ``kip848``."""

from coordinator.cli import main

raise SystemExit(main())
