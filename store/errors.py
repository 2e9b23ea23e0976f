"""The store's errors. The store knows nothing of HTTP; the proxy maps these at its edge.

`StoreUnavailable`: a write could not be made durable (or the store could not be opened).
Nothing was stored by the failing call, so its caller must not drop what it tried to
store. Store code raises it through `unavailable(message)`, which builds the class an
embedding application registered with `raise_as` (the proxy registers its 503 error, a
subclass of this one, in proxy/errors.py), so the application's one error boundary
answers it without knowing the store; without a registration it is this class.

`EventsUnrecorded`: a write without the log (a store shared by replicas) stored its
chunks but not its events: nothing evicted is lost, only the decisions' log.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of every error the store raises on purpose."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class StoreUnavailable(StoreError):
    pass


class EventsUnrecorded(StoreError):
    """A write's chunks are durable but its events (the decision log) are not: nothing
    evicted is lost, so the caller may go on; it should keep the events and retry them."""


_raised: type[StoreUnavailable] = StoreUnavailable


def raise_as(cls: type[StoreUnavailable]) -> None:
    """Have the store raise `cls` (a subclass of StoreUnavailable) where it is unavailable."""
    global _raised
    if not issubclass(cls, StoreUnavailable):
        raise TypeError(f"{cls!r} is not a StoreUnavailable")
    _raised = cls


def unavailable(message: str) -> StoreUnavailable:
    return _raised(message)
