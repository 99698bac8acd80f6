"""The managed ConfigMap: what it should hold (``desired``), whether and what to write
(``decision``), and the writes themselves (``writes``)."""
