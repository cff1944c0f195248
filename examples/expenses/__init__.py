"""The tutorial's expense-reimbursement agent, three ways, as runnable programs (see docs/tutorial/)."""
