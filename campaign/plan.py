"""``plan.json`` and the cell id live in ``jobs.plan`` (the analysis and the workloads read them too);
this name stays for code written against ``campaign.plan``."""

from jobs.plan import *  # noqa: F401,F403
from jobs.plan import ADDED_SETTINGS, FILENAME, SHARED_WORKLOAD_FIELDS, VERSION, PlanError, PlannedCell  # noqa: F401
