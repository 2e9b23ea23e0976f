"""`python -m proxy.cli ...`, the same as the `ctxwarden` script (bench/ starts it this way)."""

from proxy.cli import main

raise SystemExit(main())
