"""The paper's ablations (§5): rows and cells, reports, Figure 5, cost plans, task data."""
