"""Records -> tidy tables: results, summary, cells, Table I, MLPerf, staging, layouts, POSIX, capacity."""
