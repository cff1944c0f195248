"""Runnable demonstrations built only on stateward's public API."""
