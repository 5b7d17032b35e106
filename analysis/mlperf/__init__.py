"""MLPerf Storage's view of a campaign: each cell of emulated accelerators checked against MLPerf Storage's
training rules, every rule's figure beside its limit, and a verdict of CLOSED, OPEN or INVALID
(``python -m analysis mlperf <campaign>``; the rules' numbers in ``training.yaml``)."""
