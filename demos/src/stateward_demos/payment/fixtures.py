"""Offline world for the Payment SDK (paysdk) v1 -> v2 migration research scenario.

Everything the research tools can observe is fixed here, so the scenario's numbers are facts that a
test can recompute through the tools instead of constants someone typed into a report: 12 repositories
in ``payment-services`` (``billing-worker`` refuses access), an official migration guide with exactly 8
breaking changes, release notes that corroborate it, a stale engineering blog post that contradicts the
guide about ``capture_sync`` (so a verification has a real conflict to flag), and source files whose
v1 call sites - found by each breaking change's ``search_pattern`` - total 37 across the 11 accessible
repositories. Names (repositories, modules) are the ones ``tests/verify/conftest.py`` already uses.

Source files are plain text; a line's number is its position in the text, so evidence ids such as
``ev:code:refund-service/src/refund_service/refund.py:12`` are derived, never hand-maintained.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

GROUP: Final = "payment-services"
NO_ACCESS_REPO: Final = "billing-worker"
NO_ACCESS_REASON: Final = "403 Forbidden: the research service account has no read grant on billing-worker"

# The order of tests/verify/conftest.py REPOS; billing-worker is the one the agent cannot read.
REPOSITORIES: Final[tuple[str, ...]] = (
    "checkout-api",
    "payments-core",
    "billing-worker",
    "refund-service",
    "merchant-portal",
    "invoice-api",
    "ledger",
    "subscription-service",
    "fraud-check",
    "payout-service",
    "mobile-bff",
    "admin-console",
)

# --------------------------------------------------------------------------- documents


@dataclass(frozen=True)
class Section:
    section_id: str
    heading: str
    text: str
    fields: MappingProxyType[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Document:
    doc_id: str
    space: str
    title: str
    authority: str  # "official" documents are authoritative; "informal" ones only corroborate
    version: str
    updated: str
    sections: tuple[Section, ...]


def _bc(n: int, old: str, new: str, behaviour: str, pattern: str, change_type: str) -> Section:
    fields = {
        "change_id": f"BC{n}",
        "old_api": old,
        "new_api": new,
        "behaviour": behaviour,
        "search_pattern": pattern,
        "change_type": change_type,
    }
    return Section(
        f"bc{n}", f"BC{n}: {old} -> {new}", f"{old} is replaced by {new}. {behaviour}", MappingProxyType(fields)
    )


GUIDE_ID: Final = "paysdk-v2-migration-guide"
RELEASE_NOTES_ID: Final = "paysdk-v2-release-notes"
BLOG_ID: Final = "blog-upgrading-to-paysdk-v2"

BREAKING_CHANGE_SECTIONS: Final[tuple[Section, ...]] = (
    _bc(
        1,
        "client.charge(amount, currency, source)",
        "client.payments.create(PaymentRequest(...))",
        "Amounts are integer minor units instead of Decimal, and a payment is only authorised, not captured.",
        ".charge(",
        "signature",
    ),
    _bc(
        2,
        "client.capture_sync(charge_id)",
        "client.payments.capture(payment_id)",
        "Synchronous capture is removed in v2: capture returns a pending operation confirmed by webhook.",
        ".capture_sync(",
        "removed",
    ),
    _bc(
        3,
        "client.refund(charge_id, amount)",
        "client.refunds.create(payment_id, amount_minor, idempotency_key)",
        "Every refund needs an idempotency key; partial refunds are in minor units.",
        ".refund(",
        "signature",
    ),
    _bc(
        4,
        "PaymentClient(credential_ref, timeout)",
        "PaymentClient.from_config(ClientConfig(...))",
        "The positional constructor is gone and a region must be configured.",
        "PaymentClient(",
        "signature",
    ),
    _bc(
        5,
        "paysdk.verify_webhook(payload, signature)",
        "client.webhooks.construct_event(payload, signature, tolerance_s=300)",
        "Events older than the tolerance are rejected, so replayed webhooks now fail.",
        "verify_webhook(",
        "behaviour",
    ),
    _bc(
        6,
        "client.get_invoice(invoice_id)",
        "client.invoices.retrieve(invoice_id)",
        "Totals are integer minor units and the status 'paid' is renamed 'settled'.",
        ".get_invoice(",
        "behaviour",
    ),
    _bc(
        7,
        "except CardError",
        "except paysdk.errors.PaymentDeclined",
        "CardError is renamed; the decline reason moves from .code to .decline_code.",
        "except CardError",
        "renamed",
    ),
    _bc(
        8,
        "client.list_transactions(page=n)",
        "client.transactions.list(cursor=...)",
        "Offset pagination is replaced by cursors; the page parameter is rejected.",
        ".list_transactions(",
        "signature",
    ),
)

DOCUMENTS: Final[tuple[Document, ...]] = (
    Document(
        GUIDE_ID,
        "payment-platform",
        "paysdk v1 -> v2 migration guide",
        "official",
        "2.0.3",
        "2026-05-12",
        (
            Section(
                "overview",
                "Overview",
                "This guide is the authoritative list of breaking changes between paysdk v1 and v2. "
                "It lists exactly eight breaking changes, BC1 to BC8; each names the v1 call to search for.",
            ),
            *BREAKING_CHANGE_SECTIONS,
            Section(
                "checklist",
                "Migration checklist",
                "Migrate shared wrappers first, then services that move money, then read-only consumers.",
            ),
        ),
    ),
    Document(
        RELEASE_NOTES_ID,
        "payment-platform",
        "paysdk 2.0.0 release notes",
        "official",
        "2.0.0",
        "2026-04-28",
        (
            Section("highlights", "Highlights", "Resource-style client (payments, refunds, invoices, transactions)."),
            Section(
                "removed",
                "Removed",
                "capture_sync has been removed; use payments.capture and wait for the capture webhook.",
                MappingProxyType({"api": "capture_sync", "change_type": "removed"}),
            ),
            Section(
                "changed",
                "Changed",
                "Amounts are integer minor units. CardError is renamed PaymentDeclined. "
                "Transactions are paginated by cursor. Webhook verification enforces a 300 s tolerance.",
            ),
        ),
    ),
    Document(
        BLOG_ID,
        "engineering",
        "Upgrading to paysdk v2 (engineering blog)",
        "informal",
        "n/a",
        "2025-09-02",
        (
            Section("intro", "Why we are upgrading", "paysdk v2 brings a resource-style client and cursor pagination."),
            Section(
                "capture",
                "What about capture_sync?",
                "capture_sync keeps working in v2 as a deprecated alias, so the migration can leave it for later.",
                MappingProxyType({"api": "capture_sync", "change_type": "deprecated"}),
            ),
        ),
    ),
    Document(
        "payments-oncall-runbook",
        "engineering",
        "Payments on-call runbook",
        "informal",
        "14",
        "2026-02-03",
        (
            Section("webhooks", "Webhook backlog", "If webhooks pile up, scale the consumer before replaying events."),
            Section("declines", "Decline spikes", "Check the fraud-check dashboard before paging the card team."),
        ),
    ),
)

SPACES: Final[tuple[str, ...]] = ("engineering", "payment-platform")

# --------------------------------------------------------------------------- source code


def _text(body: str) -> tuple[str, ...]:
    """A file body as lines; line n of the file is element n - 1."""
    return tuple(body.strip("\n").split("\n"))


_GATEWAY = '''
"""Thin wrapper over paysdk shared by the other payment services."""
from decimal import Decimal

import paysdk
from paysdk import CardError, PaymentClient

from payments_core.settings import settings


class GatewayDeclined(Exception):
    """A card decline, in our own terms."""


class PaymentGateway:
    def __init__(self) -> None:
        self._client = PaymentClient(settings.credential_ref, timeout=10)

    @classmethod
    def default(cls) -> "PaymentGateway":
        return cls()

    def authorize_and_capture(self, amount: Decimal, currency: str, source: str) -> str:
        try:
            charge = self._client.charge(amount, currency, source)
        except CardError as exc:
            raise GatewayDeclined(exc.code) from exc
        self._client.capture_sync(charge.id)
        return charge.id

    def issue_refund(self, charge_id: str, amount: Decimal) -> str:
        return self._client.refund(charge_id, amount).id

    def check_signature(self, payload: bytes, signature: str) -> bool:
        return paysdk.verify_webhook(payload, signature)

    def recent_transactions(self, page: int = 1) -> list[dict[str, str]]:
        return self._client.list_transactions(page=page)
'''

_CHECKOUT_CHARGE = '''
"""Checkout charges: authorise and capture the payment of an order."""
from decimal import Decimal

from paysdk import CardError, PaymentClient

from checkout_api.config import CREDENTIAL_REF

_client = PaymentClient(CREDENTIAL_REF)


def charge_order(order) -> str:
    try:
        charge = _client.charge(order.total, order.currency, order.source)
    except CardError as exc:
        order.mark_declined(exc.code)
        raise
    _client.capture_sync(charge.id)
    return charge.id


def charge_saved_card(customer, amount: Decimal, currency: str) -> str:
    try:
        charge = _client.charge(amount, currency, customer.default_source)
    except CardError:
        return ""
    _client.capture_sync(charge.id)
    return charge.id
'''

_REFUND = '''
"""Refunds: capture a still-pending authorisation, then refund it."""
from decimal import Decimal

from paysdk import PaymentClient

_client = PaymentClient("vault:refund-service/paysdk")


def refund_payment(charge_id: str, amount: Decimal) -> str:
    charge = _client.retrieve_charge(charge_id)
    if charge.status == "authorized":
        _client.capture_sync(charge_id)
    return _client.refund(charge_id, amount).id


def refund_in_full(charge_id: str) -> str:
    charge = _client.retrieve_charge(charge_id)
    return _client.refund(charge_id, charge.amount).id
'''

_INVOICE_CLIENT = '''
"""Invoice lookups for the billing pages."""
from paysdk import PaymentClient

_client = PaymentClient("vault:invoice-api/paysdk")


def invoice_summary(invoice_id: str) -> dict[str, str]:
    invoice = _client.get_invoice(invoice_id)
    return {"id": invoice.id, "total": str(invoice.total), "status": invoice.status}


def invoice_paid(invoice_id: str) -> bool:
    return _client.get_invoice(invoice_id).status == "paid"


def invoice_payments(customer_id: str, page: int = 1) -> list[dict[str, str]]:
    return _client.list_transactions(customer=customer_id, page=page)
'''

_POSTING = '''
"""Posts settled transactions and invoice totals to the general ledger."""
import paysdk

from ledger.journal import Journal

_client = paysdk.client_from_env()


def post_settlements(journal: Journal, page: int = 1) -> int:
    rows = _client.list_transactions(status="settled", page=page)
    for row in rows:
        journal.post(row.id, row.amount, row.currency)
    return len(rows)


def post_refunds(journal: Journal, page: int = 1) -> int:
    rows = _client.list_transactions(status="refunded", page=page)
    for row in rows:
        journal.post(row.id, -row.amount, row.currency)
    return len(rows)


def post_invoice(journal: Journal, invoice_id: str) -> None:
    invoice = _client.get_invoice(invoice_id)
    journal.post(invoice.id, invoice.total, invoice.currency)
'''

_RENEWAL = '''
"""Monthly renewals: charge the saved card, fall back to the backup card once."""
from paysdk import CardError, PaymentClient

_client = PaymentClient("vault:subscription-service/paysdk")


def renew_subscription(sub) -> str | None:
    try:
        return _client.charge(sub.price, sub.currency, sub.source).id
    except CardError:
        return _retry_with_backup(sub)


def _retry_with_backup(sub) -> str | None:
    if not sub.backup_source:
        return None
    return _client.charge(sub.price, sub.currency, sub.backup_source).id
'''

_BATCH = '''
"""Nightly payout batch: net settled transactions, reverse failed payouts."""
from paysdk import PaymentClient

_client = PaymentClient("vault:payout-service/paysdk")


def build_batch(merchant_id: str, page: int = 1) -> list[dict[str, str]]:
    return _client.list_transactions(merchant=merchant_id, status="settled", page=page)


def reverse_payout(charge_id: str, amount) -> str:
    return _client.refund(charge_id, amount).id
'''

_MOBILE_PAY = '''
"""Mobile checkout endpoint and the app's payment webhooks."""
import paysdk

_client = paysdk.client_from_env()


def pay_from_app(cart) -> str:
    return _client.charge(cart.total, cart.currency, cart.wallet_source).id


def on_webhook(payload: bytes, signature: str) -> bool:
    return paysdk.verify_webhook(payload, signature)
'''

_REPORTS = '''
"""Merchant statements and CSV exports."""
import paysdk

_client = paysdk.client_from_env()


def monthly_statement(merchant_id: str, page: int = 1) -> list[dict[str, str]]:
    return _client.list_transactions(merchant=merchant_id, page=page)


def export_csv(merchant_id: str) -> str:
    rows = _client.list_transactions(merchant=merchant_id, page=1)
    return "\\n".join(f"{r.id},{r.amount},{r.currency}" for r in rows)
'''

_SIGNALS = '''
"""Turns verified payment webhooks into fraud signals."""
import paysdk


def signal_from_event(payload: bytes, signature: str) -> dict[str, str] | None:
    if not paysdk.verify_webhook(payload, signature):
        return None
    return {"kind": "payment_event", "size": str(len(payload))}
'''


def _test(module: str, name: str) -> tuple[str, ...]:
    return _text(f"from {module} import {name}\n\n\ndef test_{name}_smoke(fake_sdk) -> None:\n    assert {name}\n")


# repository -> path -> lines. billing-worker has no entry: its code cannot be read.
SOURCES: Final[dict[str, dict[str, tuple[str, ...]]]] = {
    "checkout-api": {
        "requirements.txt": ("paysdk==1.8.2", "fastapi==0.110.0"),
        "src/checkout_api/config.py": _text('CREDENTIAL_REF = "vault:checkout-api/paysdk"'),
        "src/checkout_api/charge.py": _text(_CHECKOUT_CHARGE),
        "src/checkout_api/orders.py": _text(
            "from checkout_api.charge import charge_order\n\n\n"
            "def place_order(order) -> str:\n    order.validate()\n    return charge_order(order)\n"
        ),
        "tests/test_charge.py": _test("checkout_api.charge", "charge_order"),
    },
    "payments-core": {
        "requirements.txt": ("paysdk==1.9.0",),
        "src/payments_core/settings.py": _text(
            'class _Settings:\n    credential_ref = "vault:payments-core/paysdk"\n\n\nsettings = _Settings()'
        ),
        "src/payments_core/gateway.py": _text(_GATEWAY),
        "tests/test_gateway.py": _test("payments_core.gateway", "PaymentGateway"),
    },
    "refund-service": {
        "requirements.txt": ("paysdk==1.7.4",),
        "src/refund_service/refund.py": _text(_REFUND),
        "src/refund_service/api.py": _text(
            "from refund_service.refund import refund_payment\n\n\n"
            "def handle_refund_request(body: dict[str, str]) -> str:\n"
            '    return refund_payment(body["charge_id"], body["amount"])\n'
        ),
        "tests/test_api.py": _test("refund_service.api", "handle_refund_request"),
    },
    "merchant-portal": {
        "requirements.txt": ("paysdk==1.8.2", "payments-core==3.2.0"),
        "src/merchant_portal/reports.py": _text(_REPORTS),
        "src/merchant_portal/billing.py": _text(
            "from payments_core.gateway import PaymentGateway\n\n\n"
            "def refund_dispute(charge_id: str, amount) -> str:\n"
            "    return PaymentGateway.default().issue_refund(charge_id, amount)\n"
        ),
        "tests/test_reports.py": _test("merchant_portal.reports", "monthly_statement"),
    },
    "invoice-api": {
        "requirements.txt": ("paysdk==1.8.2",),
        "src/invoice_api/client.py": _text(_INVOICE_CLIENT),
        "tests/test_client.py": _test("invoice_api.client", "invoice_summary"),
    },
    "ledger": {
        "requirements.txt": ("paysdk==1.6.0",),
        "src/ledger/journal.py": _text(
            "class Journal:\n"
            "    def post(self, ref: str, amount, currency: str) -> None:\n"
            "        print(ref, amount, currency)\n"
        ),
        "src/ledger/posting.py": _text(_POSTING),
        "tests/test_posting.py": _test("ledger.posting", "post_settlements"),
    },
    "subscription-service": {
        "requirements.txt": ("paysdk==1.8.2",),
        "src/subscription_service/plans.py": _text('PLANS = {"basic": 900, "pro": 2900}'),
        "src/subscription_service/renewal.py": _text(_RENEWAL),
        "src/subscription_service/scheduler.py": _text(
            "from subscription_service.renewal import renew_subscription\n\n\n"
            "def run_due(subscriptions) -> int:\n"
            "    return sum(1 for sub in subscriptions if renew_subscription(sub))\n"
        ),
        "tests/test_plans.py": _test("subscription_service.plans", "PLANS"),
    },
    "fraud-check": {
        "requirements.txt": ("paysdk==1.8.2",),
        "src/fraud_check/rules.py": _text("def velocity_exceeded(count: int) -> bool:\n    return count > 5"),
        "src/fraud_check/signals.py": _text(_SIGNALS),
        "tests/test_rules.py": _test("fraud_check.rules", "velocity_exceeded"),
    },
    "payout-service": {
        "requirements.txt": ("paysdk==1.8.2",),
        "src/payout_service/batch.py": _text(_BATCH),
        "tests/test_batch.py": _test("payout_service.batch", "build_batch"),
    },
    "mobile-bff": {
        "requirements.txt": ("paysdk==1.9.0",),
        "src/mobile_bff/session.py": _text("def session_ttl_s() -> int:\n    return 1800"),
        "src/mobile_bff/pay.py": _text(_MOBILE_PAY),
        "tests/test_session.py": _test("mobile_bff.session", "session_ttl_s"),
    },
    "admin-console": {
        "requirements.txt": ("payments-core==3.2.0",),
        "src/admin_console/refunds_view.py": _text(
            "from payments_core.gateway import PaymentGateway\n\n\n"
            "def approve_refund(ticket) -> str:\n"
            "    gateway = PaymentGateway.default()\n"
            "    return gateway.issue_refund(ticket.charge_id, ticket.amount)\n"
        ),
        "tests/test_refunds_view.py": _test("admin_console.refunds_view", "approve_refund"),
    },
}

# Service catalogue: which modules move money. Everything not listed does not.
MONEY_MOVEMENT: Final[frozenset[str]] = frozenset(
    {
        "payments-core/gateway",
        "checkout-api/charge",
        "refund-service/refund",
        "subscription-service/renewal",
        "payout-service/batch",
        "mobile-bff/pay",
    }
)

# Indirect usages: code that reaches paysdk only through a wrapper, so no v1 search pattern finds it.
# (repository, path, the line's marker text, the wrapper it goes through)
INDIRECT_MARKERS: Final[tuple[tuple[str, str, str, str], ...]] = (
    ("checkout-api", "src/checkout_api/orders.py", "return charge_order(order)", "checkout-api/charge"),
    ("merchant-portal", "src/merchant_portal/billing.py", ".issue_refund(", "payments-core/gateway"),
    (
        "subscription-service",
        "src/subscription_service/scheduler.py",
        "renew_subscription(sub)",
        "subscription-service/renewal",
    ),
    ("admin-console", "src/admin_console/refunds_view.py", ".issue_refund(", "payments-core/gateway"),
)
