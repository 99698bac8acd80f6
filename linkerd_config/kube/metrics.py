"""How the machinery's components own their Prometheus metrics.

controller-runtime keeps each package's metrics beside its code; so do we. Each component
(REST client, informer, work queue, controller, leader election, admission webhooks) declares
a :class:`ComponentMetrics` subclass in its own module, holding its families with
controller-runtime's names, labels and buckets so dashboards written for Go controllers work
unchanged. A component takes an optional ``registry`` and reads its families with
``TheirMetrics.of(registry)``:

* the families are created once per registry, however many components share it (two work
  queues in one registry share one ``workqueue_depth`` family, labelled by queue name);
* no registry means a private one nobody scrapes: every component always records, so none of
  them ever checks whether metrics exist.

The app owns one registry per process (not the process-global default), so tests can run
several managers side by side. Components pre-create their label values at start-up so every
series exists from the first scrape instead of appearing on first use.
"""

from __future__ import annotations

import weakref
from typing import ClassVar, Self

from prometheus_client import CollectorRegistry


class ComponentMetrics:
    """One component's metric families in one registry; build them in ``__init__``."""

    _by_registry: ClassVar[weakref.WeakKeyDictionary[CollectorRegistry, dict[type, object]]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    @classmethod
    def of(cls, registry: CollectorRegistry | None) -> Self:
        """This component's families in ``registry``, created on first use; private if None."""
        if registry is None:
            return cls(CollectorRegistry())
        families = cls._by_registry.setdefault(registry, {})
        found = families.get(cls)
        if found is None:
            found = families[cls] = cls(registry)
        assert isinstance(found, cls)
        return found
