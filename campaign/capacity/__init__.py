"""``python -m campaign.capacity``: how many accelerators each storage tier can feed. The command
(``command``), the search on one tier with its prediction (``search``), the arguments' checks (``checks``);
what it reads from its campaigns, its figure and its report are the analysis's (``analysis.tables.capacity``,
``analysis.figures.capacity``, ``analysis.report.capacity``)."""
