"""Signal sources. A controller proposes the next ControlDecision; it never changes a run."""
