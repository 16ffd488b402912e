"""Long-term memory as the domain sees it: the record, the ops a model proposes, the plan."""
