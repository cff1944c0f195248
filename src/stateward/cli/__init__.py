"""The ``stateward`` command line. Each command imports only what it needs, so answering a request
from a shell costs a process start, not a framework import."""

DEFAULT_DB = "stateward.db"  # in the working directory, unless --db or STATEWARD_DB says otherwise
