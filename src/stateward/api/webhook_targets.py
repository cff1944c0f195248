"""Where a webhook may be sent: the URL normalised, its host resolved and every address checked.

A tenant names the URL, the service makes the request: without these checks a subscription is a way
to make the service POST to its own loopback, the cloud's metadata address (169.254.169.254) or the
operator's private network. So a URL is refused unless it is ``https`` (``http`` only where the
operator allows it), without userinfo, control characters or odd host spellings (``0x7f.1``,
``2130706433`` and the like are read as the addresses they spell), and every address its host
resolves to is a public unicast address: not loopback, link-local, private, shared (CGNAT),
multicast, unspecified, reserved or documentation space, in IPv4 or IPv6, and not an IPv6 form
embedding IPv4 (mapped, compatible, 6to4, NAT64, Teredo). An operator opens networks of its own
with :attr:`TargetPolicy.allow_networks` (``STATEWARD_WEBHOOK_ALLOW_NETWORKS``).

The check runs at subscription and again at every delivery, and the delivery connects to the address
that was checked (:class:`Target` carries it), so a name cannot resolve to a public address for the
check and a private one for the connection.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

from stateward.core.errors import ErrorCode, UserError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Sequence[str]]

MAX_URL_CHARS = 2048
MAX_ADDRESSES = 32
ALLOW_HTTP_ENV = "STATEWARD_WEBHOOK_ALLOW_HTTP"
ALLOW_NETWORKS_ENV = "STATEWARD_WEBHOOK_ALLOW_NETWORKS"

_V4_FORBIDDEN = tuple(
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8",  # "this network", unspecified
        "10.0.0.0/8",  # private
        "100.64.0.0/10",  # shared address space (CGNAT)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local (cloud metadata services)
        "172.16.0.0/12",  # private
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation (TEST-NET-1)
        "192.88.99.0/24",  # 6to4 relay anycast
        "192.168.0.0/16",  # private
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation (TEST-NET-2)
        "203.0.113.0/24",  # documentation (TEST-NET-3)
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the limited broadcast address
    )
)
# IPv6 is allowed only inside global unicast (2000::/3), and not in these parts of it.
_V6_GLOBAL = ipaddress.IPv6Network("2000::/3")
_V6_FORBIDDEN = tuple(
    ipaddress.IPv6Network(n)
    for n in (
        "2001::/23",  # IETF protocol assignments (Teredo 2001::/32 among them)
        "2001:db8::/32",  # documentation
        "2002::/16",  # 6to4: embeds an IPv4 address
        "3fff::/20",  # documentation
    )
)
_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"


class WebhookTargetError(UserError):
    """A webhook URL or the addresses it resolves to are refused (WEBHOOK_URL_INVALID,
    WEBHOOK_TARGET_FORBIDDEN, WEBHOOK_DNS_FAILED); the message names no address or port."""

    default_code = ErrorCode.WEBHOOK_URL_INVALID


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to for a TCP connection (the operating system's resolver)."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def _parse_networks(raw: str) -> tuple[IPNetwork, ...]:
    try:
        return tuple(ipaddress.ip_network(part.strip(), strict=False) for part in raw.split(",") if part.strip())
    except ValueError:
        raise UserError(
            f"{ALLOW_NETWORKS_ENV} must be a comma-separated list of networks (CIDR), e.g. 10.1.0.0/16,fd00::/8",
            code=ErrorCode.CONFIGURATION_ERROR,
        ) from None


@dataclass(frozen=True)
class TargetPolicy:
    """What the operator allows: ``http`` besides ``https``, networks opened despite the checks, and the
    resolver (injected: tests give a stub, the service the operating system's)."""

    allow_http: bool = False
    allow_networks: tuple[IPNetwork, ...] = ()
    resolver: Resolver = field(default=system_resolver, compare=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TargetPolicy:
        """``STATEWARD_WEBHOOK_ALLOW_HTTP=1`` and ``STATEWARD_WEBHOOK_ALLOW_NETWORKS=<cidr>,...`` over the
        defaults (https only, no network opened)."""
        env = os.environ if env is None else env
        flag = env.get(ALLOW_HTTP_ENV, "").strip().lower()
        if flag not in ("", "0", "1", "true", "false", "yes", "no"):
            raise UserError(f"{ALLOW_HTTP_ENV} must be 1 or 0", code=ErrorCode.CONFIGURATION_ERROR)
        return cls(
            allow_http=flag in ("1", "true", "yes"), allow_networks=_parse_networks(env.get(ALLOW_NETWORKS_ENV, ""))
        )


@dataclass(frozen=True)
class Target:
    """A checked webhook URL and the address a delivery connects to."""

    url: str  # normalised, as stored and shown
    scheme: str
    host: str  # the name (or the address literal) the URL names, for Host and TLS
    port: int
    address: IPAddress  # the checked address to connect to

    @property
    def host_header(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return shown if self.port == default else f"{shown}:{self.port}"

    @property
    def is_name(self) -> bool:
        """The URL names a host (TLS sends it as SNI and checks the certificate for it)."""
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return True
        return False


@dataclass(frozen=True)
class _Parsed:
    url: str
    scheme: str
    host: str
    port: int
    literal: IPAddress | None


def _invalid(why: str) -> WebhookTargetError:
    return WebhookTargetError(f"the webhook URL is refused: {why}", code=ErrorCode.WEBHOOK_URL_INVALID)


def _forbidden() -> WebhookTargetError:
    return WebhookTargetError(
        "the webhook URL's host is or resolves to an address webhooks may not reach"
        " (loopback, private, link-local, multicast, reserved or the like)",
        code=ErrorCode.WEBHOOK_TARGET_FORBIDDEN,
    )


def _no_odd_characters(raw: str) -> None:
    for ch in raw:
        if ch.isascii():
            if not ch.isprintable() or ch == " ":
                raise _invalid("it holds a control character or a space")
        elif unicodedata.category(ch)[0] in "CZ":  # control, format, surrogate, private use, separators
            raise _invalid("it holds a control, format or separator character")


def _numeric_ipv4(host: str) -> ipaddress.IPv4Address:
    """An IPv4 address spelled as inet_aton reads it (``0x7f.1``, ``2130706433``, ``0177.0.0.1``)."""
    parts = host.split(".")
    if len(parts) > 4 or not all(_NUMERIC_LABEL.match(p) for p in parts):
        raise _invalid("its host is neither a name nor an IP address")
    values = []
    for p in parts:
        if p.startswith("0x"):
            values.append(int(p[2:] or "0", 16))
        elif len(p) > 1 and p.startswith("0"):
            if not set(p) <= set("01234567"):
                raise _invalid("its host is neither a name nor an IP address")
            values.append(int(p, 8))
        else:
            values.append(int(p))
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(values)):
        raise _invalid("its host is neither a name nor an IP address")
    number = sum(v << (8 * (3 - i)) for i, v in enumerate(head)) + last
    return ipaddress.IPv4Address(number)


def _host(netloc_host: str, bracketed: bool) -> tuple[str, IPAddress | None]:
    """The host as it goes in the URL (lower case, IDNA) and its address when it is a literal."""
    if bracketed:
        if "%" in netloc_host:
            raise _invalid("an IPv6 zone is not allowed")
        try:
            v6 = ipaddress.IPv6Address(netloc_host)
        except ValueError:
            raise _invalid("its IPv6 address is malformed") from None
        return str(v6), v6
    name = netloc_host.rstrip(".")
    if not name:
        raise _invalid("it names no host")
    labels = name.split(".")
    if _NUMERIC_LABEL.match(labels[-1]):
        v4 = _numeric_ipv4(name)
        return str(v4), v4
    try:
        ascii_name = name.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise _invalid("its host is not a valid name") from None
    if len(ascii_name) > 253 or not all(_LABEL.match(label) for label in ascii_name.split(".")):
        raise _invalid("its host is not a valid name")
    return ascii_name, None


def normalise(raw: str, policy: TargetPolicy) -> _Parsed:
    """The URL checked for form and rewritten canonically; no DNS yet."""
    if len(raw) > MAX_URL_CHARS:
        raise _invalid(f"it is longer than {MAX_URL_CHARS} characters")
    _no_odd_characters(raw)
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError:
        raise _invalid("it is malformed or its port is out of range") from None
    scheme = parts.scheme.lower()
    allowed = ("https", "http") if policy.allow_http else ("https",)
    if scheme == "http" and not policy.allow_http:  # well-formed, but the operator's to allow
        raise WebhookTargetError(
            f"http webhooks are off on this service (the operator allows them with {ALLOW_HTTP_ENV}=1)",
            code=ErrorCode.WEBHOOK_TARGET_FORBIDDEN,
        )
    if scheme not in allowed:
        raise _invalid(f"the scheme must be {' or '.join(allowed)}")
    if "@" in parts.netloc:
        raise _invalid("it must not carry a user name or password")
    if "\\" in raw:
        raise _invalid("it holds a backslash")
    bracketed = parts.netloc.startswith("[")
    host, literal = _host(parts.hostname or "", bracketed)
    port = port if port is not None else (443 if scheme == "https" else 80)
    if port == 0:
        raise _invalid("its port is out of range")
    shown = f"[{host}]" if ":" in host else host
    default = 443 if scheme == "https" else 80
    netloc = shown if port == default else f"{shown}:{port}"
    path = quote(parts.path or "/", safe=_PATH_SAFE)
    query = f"?{quote(parts.query, safe=_PATH_SAFE + '?')}" if parts.query else ""
    return _Parsed(url=f"{scheme}://{netloc}{path}{query}", scheme=scheme, host=host, port=port, literal=literal)


def _embedded_ipv4(v6: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form carries (mapped, compatible, 6to4, NAT64, Teredo), if any."""
    if v6.ipv4_mapped is not None:
        return v6.ipv4_mapped
    if v6.sixtofour is not None:
        return v6.sixtofour
    if v6.teredo is not None:
        return v6.teredo[1]
    if any(v6 in n for n in _NAT64) or int(v6) >> 32 == 0:
        return ipaddress.IPv4Address(int(v6) & 0xFFFFFFFF)
    return None


def is_forbidden(address: IPAddress, allow_networks: Sequence[IPNetwork] = ()) -> bool:
    """True unless ``address`` is public unicast or inside a network the operator opened."""
    candidates: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            candidates.append(embedded)
    if any(c in n for c in candidates for n in allow_networks if c.version == n.version):
        return False
    if isinstance(address, ipaddress.IPv4Address):
        return any(address in n for n in _V4_FORBIDDEN)
    return address not in _V6_GLOBAL or any(address in n for n in _V6_FORBIDDEN)


def _resolve(parsed: _Parsed, policy: TargetPolicy) -> list[IPAddress]:
    if parsed.literal is not None:
        return [parsed.literal]
    try:
        found = list(policy.resolver(parsed.host, parsed.port))[:MAX_ADDRESSES]
        addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in found]
    except (OSError, UnicodeError, ValueError):
        addresses = []
    if not addresses:
        raise WebhookTargetError("the webhook URL's host does not resolve", code=ErrorCode.WEBHOOK_DNS_FAILED)
    return addresses


def check_target(raw: str, policy: TargetPolicy) -> Target:
    """The URL normalised, resolved and every address checked; the first address is the one to connect to.
    A name with one forbidden address among public ones is refused whole."""
    parsed = normalise(raw, policy)
    addresses = _resolve(parsed, policy)
    if any(is_forbidden(a, policy.allow_networks) for a in addresses):
        raise _forbidden()
    return Target(url=parsed.url, scheme=parsed.scheme, host=parsed.host, port=parsed.port, address=addresses[0])


__all__ = ["Target", "TargetPolicy", "WebhookTargetError", "check_target", "is_forbidden", "normalise"]
