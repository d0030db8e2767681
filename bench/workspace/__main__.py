"""`python -m bench.workspace`: see bench/workspace/__init__.py."""

from bench.workspace.runner import main

raise SystemExit(main())
