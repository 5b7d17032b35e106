"""Modelled tiers: a FUSE layer in front of the tier's files that serves each request after the time
a modelled device would take (``disk``: a hard disk from its physics), set up and torn down by ``mount``.

The layer is written for FUSE 3. mfusepy loads libfuse 2 first when both are installed (Debian's s3fs
brings libfuse2), and the layer then ends before it mounts; so the binding is told which library to
load before anything here imports it."""

import os

os.environ["FUSE_LIBRARY_NAME"] = "fuse3"  # read by mfusepy when it is first imported
