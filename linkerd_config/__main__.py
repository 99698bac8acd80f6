"""``python -m linkerd_config`` is the ``linkerd-config`` command."""

from linkerd_config.cli import main

raise SystemExit(main())
