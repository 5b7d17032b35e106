"""A user's own trace (a Darshan log, a DFTracer trace, a traced cell's folder), shown as an I/O profile:
``python -m analysis trace <file>`` (``command``) writes its tables (``tables``) and figure (``figure``).
The traces are read by ``jobs.traces``, which the replay workload shares."""
