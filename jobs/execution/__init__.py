"""How a run's processes start: local tasks, Slurm job steps, the tf.data service, the traced child."""
