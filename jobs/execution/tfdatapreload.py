"""Imported by a warm server at its start (``jobs.execution.warm``: ``warm.TENSORFLOW_DATA`` in its preload
list): TensorFlow without Keras, quietly, without looking for devices (``tfstart.preload``), for cells whose
workload builds no Keras model (``Workload.uses_keras = False``): 0.8-1.0 s of CPU less per server."""

from jobs.execution import tfstart

tfstart.preload(keras=False)
