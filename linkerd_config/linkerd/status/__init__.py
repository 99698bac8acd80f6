"""What the controller says of a LinkerdConfig: its conditions and Events (``report``), kstatus
progress (``readiness``), and ``plan``/``status`` read from the caches (``plan``, ``view``)."""
