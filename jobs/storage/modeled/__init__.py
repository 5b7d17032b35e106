"""Modelled tiers: a FUSE layer in front of the tier's files that serves each request after the time
a modelled device would take (``disk``: a hard disk from its physics), set up and torn down by ``mount``."""
