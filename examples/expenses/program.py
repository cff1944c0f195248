"""What every example program does: start a run, stop at the approval, approve it from a second Runtime
(as another process would, rebuilding the agent by its registered name), and print the result."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from examples.expenses.domain import read_ledger

from stateward import RunStatus, Runtime

MAX_APPROVALS = 5  # a plan run asks twice by default; nothing here loops unbounded


def run_program(
    name: str, params: Callable[[argparse.Namespace], dict[str, Any]] | None = None, argv: Sequence[str] | None = None
) -> int:
    """Run agent ``name`` of the registry on one claim, with its JSON ``params`` (the ledger, plus ``params(args)``)."""
    parser = argparse.ArgumentParser(description=f"Run the {name} agent on one expense claim.")
    parser.add_argument("--db", default="expenses.db", help="SQLite store (default: ./expenses.db)")
    parser.add_argument("--ledger", default="payments.jsonl", help="where payments are written")
    parser.add_argument("--expense", default="EXP-1", help="the claim to reimburse (EXP-1, EXP-2, EXP-3)")
    parser.add_argument("--reject", action="store_true", help="reject the first request instead of approving it")
    parser.add_argument("--exact-approval", action="store_true", help="plan agent: bind the approval to the payment")
    args = parser.parse_args(argv)

    from examples.expenses.agents import registry  # what any process running these agents registers

    starter = Runtime.open(args.db, agents=registry)
    # create() records the params with the run, so the approver rebuilds exactly this agent
    agent = registry.create(name, {"ledger": args.ledger, **(params(args) if params else {})})
    run = starter.start(agent, goal=f"reimburse expense {args.expense}")
    starter.close()
    print(f"started {run.run_id}: {run.status.value}")
    answers: list[str] = []
    approver = Runtime.open(args.db, agents=registry)  # a second Runtime: another process would do the same
    try:
        state = approver.get(run.run_id)
        while state.status is RunStatus.WAITING_FOR_USER and state.pending is not None and len(answers) < MAX_APPROVALS:
            pending = state.pending
            print(f"waiting: {pending.request_id}: {pending.question}")
            reject = args.reject and not answers
            answer = approver.reject if reject else approver.approve
            state = answer(run.run_id, pending.request_id, by="example-approver").state
            answers.append(f"{pending.request_id}:{'rejected' if reject else 'approved'}")
    finally:
        approver.close()
    paid = [p for p in read_ledger(Path(args.ledger)) if p["expense_id"] == args.expense]
    summary = {
        "agent": name,
        "run_id": run.run_id,
        "status": state.status.value,
        "terminal_reason": state.terminal_reason,
        "answers": answers,
        "payments": len(paid),
    }
    print(json.dumps(summary))
    return 0 if state.status.is_terminal else 1
