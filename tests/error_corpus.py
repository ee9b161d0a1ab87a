"""A labelled corpus of dead-letter errors: realistic causes from many kinds of services, each
said many ways (the ids, tenants, addresses, times and values of each message differ), and pairs
of different causes that differ in one meaningful word only (a quoted field name, a constraint,
an HTTP status, an exception type, a host).

Grouping is right when every cause is one group and no group holds two causes
(tests/test_grouping_corpus.py; bench/bench_grouping.py measures it). ``samples(seed)`` gives the
same corpus for the same seed.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Callable

B62 = string.ascii_letters + string.digits
# What Kubernetes names pods with (no vowels).
POD_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
SLUG_TENANTS = ["acme-corp", "globex-inc", "initech-42", "umbrella_co", "wayne-enterprises", "stark-ind-7"]
WORDS = ["abc", "twelve", "N/A", "12,50", "null", "none", "-", "1e", "seven", "12.5.0", "ten euros", "TBD", "x"]
NAMES = ["Jane Doe", "O'Brien, Pat", "Li Wei", "Zoë Müller", "bob", "Ana María"]
SERVICES = ["payments", "ledger"]


def b62(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(B62) for _ in range(n))


def hexs(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def pod_part(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(POD_ALPHABET) for _ in range(n))


def uuid(rng: random.Random) -> str:
    h = hexs(rng, 32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


def tenant(rng: random.Random) -> str:
    return f"t{rng.randrange(100)}" if rng.random() < 0.7 else rng.choice(SLUG_TENANTS)


def ipv4(rng: random.Random) -> str:
    return f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"


def ipv6(rng: random.Random) -> str:
    return rng.choice([f"2001:db8::{rng.randrange(1, 0xffff):x}", "::1",
                       f"fe80::{hexs(rng, 3)}:{hexs(rng, 4)}:{hexs(rng, 2)}ff:fe{hexs(rng, 2)}"])


def address(rng: random.Random) -> str:
    """An IPv4 or IPv6 address with a port, as Node and Go print them."""
    port = rng.choice([5432, 6379, 443, 8080, rng.randrange(1024, 65535)])
    return f"{ipv4(rng)}:{port}" if rng.random() < 0.6 else f"[{ipv6(rng)}]:{port}"


def email(rng: random.Random) -> str:
    user = rng.choice(["jane.doe", "bob", "ana+shop", "li_wei", "m.mueller"]) + str(rng.randrange(100))
    return f"{user}@{rng.choice(['example.com', 'mail.example.org', 'acme.co.uk'])}"


def iso_time(rng: random.Random) -> str:
    t = f"2026-{rng.randrange(1, 13):02}-{rng.randrange(1, 29):02}T{rng.randrange(24):02}:{rng.randrange(60):02}:" \
        f"{rng.randrange(60):02}"
    return t + rng.choice(["Z", f".{rng.randrange(1000):03}Z", "+02:00", ""])


def millis(rng: random.Random) -> str:
    return rng.choice([f"{rng.randrange(1, 60000)}ms", f"{rng.randrange(1, 60000)} ms"])


def seconds(rng: random.Random) -> str:
    return rng.choice([f"{rng.uniform(0.1, 90):.2f}s", f"{rng.randrange(1, 90)}s",
                       f"{rng.randrange(1, 5)}m{rng.uniform(0, 59):.1f}s"])


def value(rng: random.Random) -> str:
    """What a user typed where a number belonged."""
    return rng.choice([rng.choice(WORDS), str(rng.uniform(-100, 100)), b62(rng, rng.randrange(1, 6)).lower()])


def stripe(rng: random.Random, prefix: str) -> str:
    return f"{prefix}_{b62(rng, rng.choice([14, 16, 24]))}"


def order_ref(rng: random.Random) -> str:
    return rng.choice([f"ord-{rng.randrange(1, 99999)}", f"ord_{b62(rng, 10)}", str(rng.randrange(1, 10**7))])


def bad_email(rng: random.Random) -> str:
    """What a customer typed where an email belonged (most of them an address without its domain's dot)."""
    n = rng.randrange(100)
    return rng.choice([f"user{n}@example"] * 4 + [
        "jane.doe", f"{rng.choice(['bob', 'ana', 'li_wei'])}{n}@", "@example.com", "ana maria@example.com", "",
        "li_wei@@mail.example.org", "o'brien@", "bob at example dot com", f"{email(rng)} "])


def bad_url(rng: random.Random) -> str:
    return rng.choice(["www.example.com", f"shop{rng.randrange(100)}.example", "example dot com", "http//x",
                       "htp:/bad", "", "ftp:/x y", b62(rng, 8)])


def bad_time(rng: random.Random) -> str:
    return rng.choice([f"2026-13-{rng.randrange(1, 29):02}T10:00:00Z", "tomorrow", "31/12/2026 10:00",
                       iso_time(rng)[:16], "", f"{rng.randrange(1, 28)}.{rng.randrange(1, 13)}.2026"])


def format_failure(path: str, fmt: str, bad: Callable[[random.Random], str]) -> Callable:
    """A JSON Schema format failure as a service words it in Dlq-Error without Dlq-Schema-Errors:
    the path, then jsonschema's message (the value as Python's repr gives it)."""
    return text(lambda r: f"{path}: {bad(r)!r} is not a {fmt!r}")


def coupon_code(rng: random.Random) -> str:
    """A promotion's code: a word and a number, or letters and digits at random (one of each at least)."""
    word = rng.choice([f"SAVE{rng.randrange(5, 90)}", f"WINTER20{rng.randrange(20, 30)}", f"XMAS{rng.randrange(20, 30)}",
                       f"WELCOME{rng.randrange(5, 25)}", f"SPRING{rng.randrange(1, 10)}", f"BF{rng.randrange(2020, 2030)}"])
    chars = [rng.choice(string.ascii_uppercase), rng.choice(string.digits)] + [
        rng.choice(string.ascii_uppercase + string.digits) for _ in range(rng.randrange(3, 7))]
    rng.shuffle(chars)
    return word if rng.random() < 0.7 else "".join(chars)


def sku(rng: random.Random) -> str:
    return rng.choice([f"AB{rng.randrange(1000, 9999)}", f"TSHIRT{rng.randrange(30, 50)}XL",
                       f"{rng.randrange(10, 99)}K{rng.randrange(100, 999)}", f"SKU{rng.randrange(10**5)}"])


@dataclass(frozen=True)
class Cause:
    """One cause of failure: its name and a way to say it with fresh values."""

    name: str
    make: Callable[[random.Random], tuple[str | None, list | None]]


def text(fn: Callable[[random.Random], str]) -> Callable[[random.Random], tuple[str, None]]:
    return lambda rng: (fn(rng), None)


def keyerror(field: str) -> Callable:
    return text(lambda r: f"KeyError: '{field}' for tenant {tenant(r)}")


def unsupported_operand(other: str) -> Callable:
    return text(lambda r: f"TypeError: unsupported operand type(s) for +: 'decimal.Decimal' and '{other}' "
                          f"(order {order_ref(r)})")


def transition(exception: str) -> Callable:
    return text(lambda r: f"java.lang.{exception}: Order {order_ref(r)} cannot transition from SHIPPED to CANCELLED "
                          f"(requested by {email(r)} at {iso_time(r)})")


def charges(status: str) -> Callable:
    return text(lambda r: f"POST https://api.x.com/v1/customers/{stripe(r, 'cus')}/charges returned {status} "
                          f"after {millis(r)}")


def upstream(status: int) -> Callable:
    return text(lambda r: f"upstream status {status} for request {uuid(r)} (tenant={tenant(r)}, "
                          f"{rng_int(r)} bytes)")


def rng_int(rng: random.Random) -> int:
    return rng.randrange(0, 10**6)


def no_such_host(service: str) -> Callable:
    return text(lambda r: f"dial tcp: lookup {service}.internal.svc.cluster.local on {ipv4(r)}:53: no such host "
                          f"(attempt {r.randrange(1, 6)}/5)")


def schema(*items: tuple[str, str]) -> list:
    return [{"path": p, "message": m} for p, m in items]


def price_not_number(r: random.Random) -> tuple[None, list]:
    indexes = sorted(r.sample(range(12), r.randrange(1, 4)))
    return None, schema(*[(f"/items/{i}/price", f"'{value(r)}' is not of type 'number'") for i in indexes])


def missing(name: str) -> Callable:
    return lambda r: (r.choice([None, "payload failed validation"]),
                      schema(("/customer", f"'{name}' is a required property")))


CAUSES = [
    Cause("python KeyError 'vat_rate'", keyerror("vat_rate")),
    Cause("python KeyError 'currency'", keyerror("currency")),
    Cause("python ValueError int literal",
          text(lambda r: f"ValueError: invalid literal for int() with base 10: '{value(r)}'")),
    Cause("python TypeError Decimal + float", unsupported_operand("float")),
    Cause("python TypeError Decimal + NoneType", unsupported_operand("NoneType")),
    Cause("java IllegalStateException transition", transition("IllegalStateException")),
    Cause("java IllegalArgumentException transition", transition("IllegalArgumentException")),
    Cause("java NullPointerException", text(
        lambda r: f"java.lang.NullPointerException: Cannot invoke \"String.length()\" because \"name\" is null "
                  f"[trace={hexs(r, 32)} span={hexs(r, 16)}]")),
    Cause("http 502 from charges", charges("502 Bad Gateway")),
    Cause("http 503 from charges", charges("503 Service Unavailable")),
    Cause("upstream status 502", upstream(502)),
    Cause("upstream status 504", upstream(504)),
    Cause("http 404 order item", text(
        lambda r: f"GET https://api.shop.io/v2/orders/{r.randrange(1, 10**6)}/items/{uuid(r)}?expand=product&"
                  f"t={r.randrange(10**9)} returned 404 Not Found")),
    Cause("postgres unique orders_pkey", text(
        lambda r: f"ERROR: duplicate key value violates unique constraint \"orders_pkey\" (SQLSTATE 23505) "
                  f"DETAIL: Key (id)=({r.randrange(1, 10**7)}) already exists.")),
    Cause("postgres unique customers_email_key", text(
        lambda r: f"ERROR: duplicate key value violates unique constraint \"customers_email_key\" (SQLSTATE 23505) "
                  f"DETAIL: Key (email)=({email(r)}) already exists.")),
    Cause("postgres not-null email", text(
        lambda r: f"null value in column \"email\" of relation \"customers\" violates not-null constraint "
                  f"DETAIL: Failing row contains ({r.randrange(1, 10**6)}, {r.choice(NAMES)}, null, "
                  f"{iso_time(r)}, {tenant(r)}).")),
    Cause("go postgres dial timeout", text(
        lambda r: f"context deadline exceeded after {seconds(r)} dialing {ipv4(r)}:5432")),
    Cause("dns payments", no_such_host("payments")),
    Cause("dns ledger", no_such_host("ledger")),
    Cause("grpc unavailable", text(
        lambda r: f"rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing "
                  f"dial tcp {address(r)}: connect: connection refused\"")),
    Cause("grpc resource exhausted", text(
        lambda r: f"rpc error: code = ResourceExhausted desc = quota exceeded for tenant {tenant(r)}: "
                  f"{r.randrange(100, 5000)} requests in {seconds(r)}")),
    Cause("node redis refused", text(lambda r: f"Error: connect ECONNREFUSED {address(r)}")),
    Cause("stripe card declined", text(
        lambda r: f"stripe: card_declined: Your card was declined. (charge {stripe(r, 'ch')}, payment_intent "
                  f"{stripe(r, 'pi')}, customer {stripe(r, 'cus')}; request-id: {stripe(r, 'req')})")),
    Cause("stripe no such customer", text(
        lambda r: f"No such customer: '{stripe(r, 'cus')}'; request-id: {stripe(r, 'req')}")),
    Cause("python requests connection refused", text(
        lambda r: f"HTTPSConnectionPool(host='api.x.com', port=443): Max retries exceeded with url: "
                  f"/v1/customers/{stripe(r, 'cus')}/charges?idempotency_key={uuid(r)} (Caused by "
                  f"NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7f{hexs(r, 10)}>: "
                  f"Failed to establish a new connection: [Errno 111] Connection refused'))")),
    Cause("order not found by uuid", text(lambda r: f"order {uuid(r)} not found for tenant {tenant(r)}")),
    Cause("invoice not found by uuid", text(lambda r: f"invoice {uuid(r)} not found for tenant {tenant(r)}")),
    Cause("checksum mismatch", text(
        lambda r: f"checksum mismatch for blob sha256:{hexs(r, 64)}: expected {hexs(r, 64)}, got {hexs(r, 64)}")),
    Cause("smtp recipient rejected", text(
        lambda r: f"SMTP 550 5.1.1 <{email(r)}>: Recipient address rejected: User unknown in virtual mailbox table")),
    Cause("token expired", text(
        lambda r: f"jwt: token expired at {iso_time(r)} (now {iso_time(r)}, skew {millis(r)}) for user {email(r)}")),
    Cause("kubernetes pod evicted", text(
        lambda r: f"pod orders-worker-{pod_part(r, r.choice([9, 10]))}-{pod_part(r, 5)} evicted: the node was low on resource: "
                  f"memory. Container worker was using {r.randrange(100, 4000)}Mi, request is 512Mi")),
    Cause("python enum value", text(lambda r: f"ValueError: '{value(r)}' is not a valid Currency")),
    Cause("schema price not a number", price_not_number),
    Cause("schema customer email missing", missing("email")),
    Cause("schema customer id missing", missing("customer_id")),
    Cause("schema currency enum", lambda r: (None, schema(
        ("/currency", f"'{r.choice(['eur', 'JPY', 'usd ', 'EURO', '', 'CHF'])}' is not one of ['EUR', 'USD', 'GBP']")))),
    # Format failures in an error text: the quoted value is dropped, the path and the format kept.
    Cause("format email customer", format_failure("/customer/email", "email", bad_email)),
    Cause("format email billing", format_failure("/billing/email", "email", bad_email)),
    Cause("format uri customer website", format_failure("/customer/website", "uri", bad_url)),
    Cause("format date-time delivery", format_failure("/delivery/at", "date-time", bad_time)),
    # A code of letters and digits after a noun is a value; after a name whose value is the cause
    # ("error code", "encoding") it names the cause.
    Cause("coupon expired", text(lambda r: f"coupon {coupon_code(r)} expired")),
    Cause("coupon already redeemed", text(
        lambda r: f"coupon {coupon_code(r)} already redeemed by customer {stripe(r, 'cus')}")),
    Cause("voucher expired", text(lambda r: f"voucher {coupon_code(r)} expired")),
    Cause("promo code unknown", text(lambda r: f"promo code {coupon_code(r)} not found for tenant {tenant(r)}")),
    Cause("sku out of stock", text(
        lambda r: f"sku {sku(r)} out of stock in warehouse {r.choice(['WH3', 'BER1', 'AMS2', 'FRA12'])} "
                  f"(order {order_ref(r)})")),
    Cause("postgres error code 42P01", text(lambda r: f"insert of order {order_ref(r)} failed: error code 42P01")),
    Cause("postgres error code 23P01", text(lambda r: f"insert of order {order_ref(r)} failed: error code 23P01")),
    Cause("encoding UTF16", text(
        lambda r: f"unmappable character for encoding UTF16 in field 'name' of order {order_ref(r)}")),
    Cause("encoding UTF32", text(
        lambda r: f"unmappable character for encoding UTF32 in field 'name' of order {order_ref(r)}")),
    Cause("schema quantity minimum", lambda r: (None, schema(*[
        (f"/items/{i}/quantity", f"{-r.randrange(0, 50)} is less than the minimum of 1")
        for i in sorted(r.sample(range(20), r.randrange(1, 3)))]))),
]


def samples(seed: int = 14, per_cause: tuple[int, int] = (50, 200)) -> list[tuple[str, str | None, list | None]]:
    """(cause, error text, schema errors) for every cause said many ways, shuffled."""
    rng = random.Random(seed)
    found = [(cause.name, *cause.make(rng)) for cause in CAUSES for _ in range(rng.randint(*per_cause))]
    rng.shuffle(found)
    return found
