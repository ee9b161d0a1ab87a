"""Helpers for tests: waiting with a deadline, publishing to a real server, logging in."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any, Callable

import nats


def wait_for(condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02, message: str = ""):
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {message or condition} (last: {last!r})")


def run(coro):
    """Run a coroutine on a fresh event loop (tests are synchronous).

    Playwright's sync API keeps an event loop running in the main thread while a browser is
    open; then the coroutine runs on a loop of its own in a worker thread.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def publish_many(url: str, messages: list[tuple[str, bytes, dict | None]], *, msg_ids: bool = False) -> list:
    """Publish (subject, payload, headers) messages through JetStream; returns the PubAcks."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        acks = []
        for i, (subject, payload, headers) in enumerate(messages):
            acks.append(await js.publish(subject, payload, headers=headers))
        return acks
    finally:
        await nc.close()


async def publish_fast(url: str, subject: str, count: int, make: Callable[[int], tuple[bytes, dict]]) -> None:
    """Publish ``count`` messages with publish_async in windows (for large backlogs)."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(publish_async_max_pending=512)
        for i in range(count):
            payload, headers = make(i)
            await js.publish_async(subject, payload, headers=headers)
            if i % 256 == 255:
                await js.publish_async_completed()
        await js.publish_async_completed()
    finally:
        await nc.close()


def dlq_headers(subject: str = "orders.created", **extra: str) -> dict[str, str]:
    """Contract headers for a dead letter of ``subject``."""
    headers = {"Dlq-Original-Subject": subject}
    headers.update({k.replace("_", "-"): v for k, v in extra.items()})
    return headers


def csrf_token(client, path: str = "/login") -> str:
    """The CSRF token from a page's form."""
    html = client.get(path).get_data(as_text=True)
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, f"no csrf_token on {path}"
    return match.group(1)


def login(client, name: str, password: str):
    """Log a test client in through the login form."""
    return client.post("/login", data={"username": name, "password": password,
                                       "csrf_token": csrf_token(client)})
