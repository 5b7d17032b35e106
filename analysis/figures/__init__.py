"""The figures: one module per family, each drawn from the rows of the workload that declares it."""
