"""A consumer's reads that another thread can cancel: the tf.data service's consumer (``jobs.execution
.service.watched``) may wait for ever on the elements a dead worker held, and a thread blocked in
TensorFlow cannot be interrupted from Python. Within ``cancellable()``, ``next_of(it)`` reads through a
concrete function run under one cancellation manager (TensorFlow's own, as ``tf.function`` callers
use it), so ``cancel()`` from any thread ends a read blocked in it with ``CancelledError``; the consumer
then unwinds, its iterator is released while the dispatcher still answers, and nothing keeps calling
the dispatcher after the service has ended. Outside the block, ``next_of(it)`` is plain ``next``."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

_local = threading.local()


@contextlib.contextmanager
def cancellable() -> Iterator[Callable[[], None]]:
    """A block in which this thread's ``next_of`` reads can be cancelled; yields the function that
    cancels them (safe from any thread, at any time, more than once)."""
    import gc

    from tensorflow.python.eager import cancellation

    manager = cancellation.CancellationManager()
    _local.manager = manager
    try:
        yield manager.start_cancel
    finally:
        _local.manager = None
        # a concrete function sits in reference cycles: collected now, the iterator it holds is released
        # while the service still answers (later, the client's release fails and TensorFlow says so)
        gc.collect()


def next_of(iterator) -> Callable[[], object]:
    """A function returning ``iterator``'s next element (StopIteration at its end), cancellable when
    called inside this thread's ``cancellable()`` block."""
    manager = getattr(_local, "manager", None)
    if manager is None:
        return lambda: next(iterator)
    import tensorflow as tf

    # an optional, not get_next: the end of the data is a value, not an error logged by the runtime
    next_optional = tf.function(iterator.get_next_as_optional).get_concrete_function()
    read = manager.get_cancelable_function(next_optional)

    def step():
        element = read()
        if not element.has_value():
            raise StopIteration
        return element.get_value()

    return step
