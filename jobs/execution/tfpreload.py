"""Imported by a warm server at its start (``jobs.execution.warm``: ``warm.TENSORFLOW`` in its preload
list): TensorFlow and Keras, quietly, without looking for devices (``tfstart.preload``)."""

from jobs.execution import tfstart

tfstart.preload()
