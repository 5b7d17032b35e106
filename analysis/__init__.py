"""The analysis: reads a campaign's records (never measures, never imports TensorFlow) and writes its
tables, figures and report. ``tables/`` turns records into tidy tables, ``figures/`` draws them,
``claims/`` judges the paper's claims on them, ``report/`` writes report.html; the commands are
``__main__`` (``python -m analysis``), ``build``, ``compare``, ``profile`` and ``perfetto``; ``outputs``
says which files of a folder are the tool's."""
