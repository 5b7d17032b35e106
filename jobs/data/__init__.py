"""Datasets: listing and generating them, stored formats, readers, the tf.data pipeline, staging."""
