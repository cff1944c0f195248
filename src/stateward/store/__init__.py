"""Durable storage of runs: the event log, run snapshots, pending requests, artifacts, gateway state."""
