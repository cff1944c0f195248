"""The Runtime: the only component that moves a run between statuses."""
