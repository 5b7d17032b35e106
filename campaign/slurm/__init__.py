"""The cluster path: cells as Slurm jobs through submitit (kept apart from the local path)."""
