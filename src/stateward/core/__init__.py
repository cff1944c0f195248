"""Pure types and rules: statuses and their one transition table, decisions, run state, budgets,
events, errors. Nothing in here performs I/O or imports another stateward layer."""
