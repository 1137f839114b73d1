"""The virtual boards of scripts/fleet (standard library only): one asyncio task per board, each
wake on a connection of its own (raw HTTP/1.1 over `asyncio.open_connection`), as a board out of
deep sleep opens one: its poll, and with screens its screen after it on the same connection
(`Connection: close` on the last); an enrollment on one of its own; every request recorded as
an `Event`.

A board (R39, R40, R53): enrolls with its Mutation's key into its variant, keeps its token and
the etag of the screen it shows, polls with the device headers, asks for its screen at every
wake whose poll names one, with `If-None-Match` of the one it shows (a conditional GET, as a
firmware that keeps its picture by its etag makes; a 304 costs no picture), and on a 401 enrolls again,
keeping the token it has while that enrollment is refused (docs/devices.md). Its schedule: a first wake at a random point of the first interval, then
every interval times its own drift (a board's deep-sleep clock is off by up to 2 %) and a
jitter of 5 %. A board of the Wi-Fi share skips its polls for 2 to 4 wakes; one of the power
share is dark for 1 to 3 wakes, during which its owner removes its record (`on_dark`, the admin
token), so that its kept token answers 401 when it is back. An enrollment answered 429 or 503
is tried again after Retry-After, as docs/devices.md says; one answered 409 (its id enrolled
already: after a 503 whose change was made, say) is tried again at the next wake, and nothing
removes the record in its way: such a board stays without a token, and the run counts it.
"""

import asyncio
import json
import math
import random
import time
from dataclasses import dataclass

TIMEOUT = 10.0       # seconds a request may take, connection included
ENROLL_TRIES = 120   # tries of one enrollment answered 429 or 503 (each after Retry-After)


@dataclass
class Event:
    """One request: when it started (time.time()), its kind (enroll, poll, screen, remove), the
    status (0: none came) and the milliseconds from connect to the last byte; the error when
    no status came."""
    t: float
    kind: str
    status: int
    ms: float
    error: str = ""


class Connection:
    """A board's connection for one wake: opened by its first request, kept open for the next
    (the poll's screen) when the request says so, closed after a request that does not."""

    def __init__(self, host, port):
        self.host, self.port = host, port
        self.reader = self.writer = None

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def call(self, method, path, headers, body=b"", keep=False):
        """One request: (status, headers with lower-case names, body, ms, error); status 0 when
        no answer came. `keep`: the connection stays open for another request."""
        started = time.perf_counter()
        try:
            if self.writer is None:
                self.reader, self.writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port), TIMEOUT)
            lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}",
                     "Connection: keep-alive" if keep else "Connection: close"]
            lines += [f"{k}: {v}" for k, v in headers.items()]
            if body or method in ("POST", "PUT", "PATCH"):
                lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
            self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
            head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), TIMEOUT)
            lines = head[:-4].decode("latin-1").split("\r\n")
            got = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                got[k.strip().lower()] = v.strip()
            if "content-length" in got:
                rest = await asyncio.wait_for(self.reader.readexactly(int(got["content-length"])), TIMEOUT)
            else:
                rest = await asyncio.wait_for(self.reader.read(), TIMEOUT)
        except (OSError, ValueError, asyncio.TimeoutError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError) as e:
            self.close()
            return 0, {}, b"", (time.perf_counter() - started) * 1000, f"{type(e).__name__}: {e}"[:120]
        ms = (time.perf_counter() - started) * 1000
        if not keep or got.get("connection", "").lower() == "close":
            self.close()
        try:
            status = int(lines[0].split()[1])
        except (IndexError, ValueError):
            return 0, {}, b"", ms, f"no status line: {head[:60]!r}"
        return status, got, rest, ms, ""


class Fleet:
    """The boards' shared setting and what they saw."""

    def __init__(self, host, port, ns, interval, wifi_share, power_share, seed=1):
        self.host, self.port, self.ns = host, port, ns
        self.interval = interval          # seconds of real time between wakes
        self.wifi_share, self.power_share = wifi_share, power_share
        self.events = []
        self.rng = random.Random(seed)
        self.on_dark = None               # async f(board): the owner removes a dark board's record
        self.renderer = None              # renderer.Renderer with --screens
        self.stopping = False
        self.boards = []

    def record(self, kind, status, ms, error, t):
        self.events.append(Event(t, kind, status, ms, error))

    async def request(self, kind, method, path, headers, body=b"", on=None, keep=False):
        """A request on connection `on` (kept open after it when `keep`), or on one of its own."""
        t = time.time()
        on = on or Connection(self.host, self.port)
        status, got, answer, ms, error = await on.call(method, path, headers, body, keep)
        if status >= 400 and status not in (401, 429):
            # What the operator said, for the report: 5xx and refusals are not papered over.
            error = answer[:200].decode(errors="replace")
        self.record(kind, status, ms, error, t)
        return status, got, answer


class Board:
    """One board: its id, Mutation, variant, key, and its own schedule and troubles."""

    def __init__(self, fleet, index, mutation, variant, key, wakes):
        self.fleet, self.index = fleet, index
        self.id = f"board-{index:05d}"
        self.mutation, self.variant, self.key = mutation, variant, key
        rng = self.rng = random.Random(f"{fleet.rng.random()}-{index}")
        self.drift = 1 + rng.uniform(-0.02, 0.02)
        self.token = None
        self.etag = None
        self.booted = False               # enrolled and polled once
        self.millivolts = rng.randint(3900, 4200)
        self.rssi = rng.randint(-85, -45)
        # Its address on the LAN, as the proxy in front of the API tells it (X-Forwarded-For).
        self.address = f"10.{200 + (index >> 16)}.{(index >> 8) & 255}.{index & 255}"
        self.wifi_out = self.dark = range(0)
        # Troubles, as wake numbers: past the first wakes, before the last ones of the run.
        latest = max(3, wakes - 2)
        if rng.random() < fleet.wifi_share:
            start = rng.randint(2, latest)
            self.wifi_out = range(start, start + rng.randint(2, 4))
        elif rng.random() < fleet.power_share:
            start = rng.randint(2, latest)
            self.dark = range(start, start + rng.randint(1, 3))

    @property
    def base(self):
        return f"/api/v1/namespaces/{self.fleet.ns}/mutations/{self.mutation}"

    def headers(self, token):
        return {"Authorization": f"Bearer {token}", "X-Forwarded-For": self.address,
                "Refresh-Rate": str(math.ceil(self.fleet.interval)),
                "Battery-Voltage": f"{self.millivolts / 1000:.2f}", "RSSI": str(self.rssi),
                "FW-Version": "1.4.0", "Width": "800", "Height": "480"}

    async def enroll(self):
        """Enrolls with the key; retries after Retry-After while answered 429 or 503."""
        body = json.dumps({"id": self.id, "label": self.variant}).encode()
        for _ in range(ENROLL_TRIES):
            if self.fleet.stopping:
                return False
            status, got, answer = await self.fleet.request("enroll", "POST", f"{self.base}/devices",
                                                           self.headers(self.key), body)
            if status == 201:
                self.token = json.loads(answer)["token"]
                return True
            if status not in (0, 429, 503):
                return False
            wait = float(got.get("retry-after", "1") or 1)
            await asyncio.sleep(wait + self.rng.uniform(0, 1))
        return False

    async def wake(self):
        if self.token is None and not await self.enroll():
            return
        # One connection for the wake: the poll, and the screen on it when the fleet has screens.
        on = Connection(self.fleet.host, self.fleet.port)
        try:
            await self.poll_and_show(on)
        finally:
            on.close()
        self.millivolts = max(3300, self.millivolts - self.rng.randint(0, 2))

    async def poll_and_show(self, on):
        screens = self.fleet.renderer is not None
        poll = f"{self.base}/devices/{self.id}/poll"
        status, _, answer = await self.fleet.request("poll", "GET", poll, self.headers(self.token), on=on,
                                                     keep=screens)
        if status == 401:
            # Removed, or its token rotated: it enrolls again and keeps the token it is given;
            # while its enrollment is refused (409: its id is enrolled, as moments after it
            # enrolled, when its token can be newer than the operator's copy), the one it has.
            on.close()
            kept, self.token = self.token, None
            if not await self.enroll():
                self.token = kept
                return
            status, _, answer = await self.fleet.request("poll", "GET", poll, self.headers(self.token), on=on,
                                                         keep=screens)
        if status != 200:
            return
        self.booted = True
        try:
            screen = json.loads(answer).get("screen") or {}
        except ValueError:
            screen = {}
        if screen.get("etag"):
            extra = {"If-None-Match": self.etag} if self.etag else {}
            status, got, _ = await self.fleet.request("screen", "GET", f"{self.base}/devices/{self.id}/screen",
                                                      {**self.headers(self.token), **extra}, on=on)
            if status == 200:
                self.etag = got.get("etag")

    async def life(self):
        interval = self.fleet.interval
        wake_at = time.monotonic() + self.rng.uniform(0, interval)
        n = 0
        while not self.fleet.stopping:
            await asyncio.sleep(max(0.0, wake_at - time.monotonic()))
            if self.fleet.stopping:
                return
            if n in self.dark:
                if n == self.dark.start and self.fleet.on_dark and self.token:
                    await self.fleet.on_dark(self)
            elif n not in self.wifi_out:
                await self.wake()
            n += 1
            wake_at += interval * self.drift * self.rng.uniform(0.95, 1.05)
