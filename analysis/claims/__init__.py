"""The paper's claims: what it states (paper_claims.yaml), how each is judged on the runs, the verdicts."""
