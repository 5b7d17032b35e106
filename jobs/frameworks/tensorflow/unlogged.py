"""A read inside tf.data's map that fails without a word: ``ignore_errors`` drops its element and the run
judges its dropped images after it (``jobs.data.read_errors``), where an exception raised into TensorFlow
would be logged with its Python traceback once per element."""

from __future__ import annotations

_UNREAD = "not read: the run judges its dropped images after it"  # a quietly failed element's (unseen) error


def quietly(func, inputs, dtype, catch: tuple[type[BaseException], ...]):
    """``func(*inputs)`` (a scalar of ``dtype``) run by ``tf.numpy_function`` in the pipeline's map, the
    element failing without a word when ``func`` raises one of ``catch``: ``ignore_errors`` drops it, and
    the run judges its dropped images after it (``jobs.data.read_errors``; the store's failed GETs,
    ``object_reads``). An exception raised into TensorFlow would be logged as a warning with its Python
    traceback, once per element: a store killed under 512 images printed 379 of them (9,495 lines)."""
    import numpy as np
    import tensorflow as tf

    empty = np.array(b"", dtype=object) if dtype == tf.string else np.zeros((), dtype=dtype.as_numpy_dtype)

    def call(*args):
        try:
            return func(*args), np.True_
        except catch:
            return empty, np.False_

    out, ok = tf.numpy_function(call, inputs, (dtype, tf.bool), stateful=True)
    out.set_shape([])
    return unread_unless(ok, out)


def unread_unless(ok, value):
    """``value``, or the element failed without a word where ``ok`` is false: ``ignore_errors`` drops it,
    and the run judges its dropped images after it."""
    import tensorflow as tf

    with tf.control_dependencies([tf.debugging.Assert(ok, [_UNREAD])]):  # fails the element, unlogged
        return tf.identity(value)
