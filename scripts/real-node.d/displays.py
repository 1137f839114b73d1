"""Displays of scripts/real-node's screens step (R53): boards that poll the API and take their
screen from it on a compressed clock, and the count of what they saw.

  displays.py run OUT SECONDS INTERVAL BASE [--no-screen] ID TOKEN [ID TOKEN ...]
  displays.py count OUT [FROM TO]

`run`: every display wakes every INTERVAL seconds (10 % jitter; the first wake at a random
point of the first interval) for SECONDS, on a new connection per request as a board that
wakes from deep sleep opens one, and polls BASE/devices/ID/poll with its token and
`Refresh-Rate: <INTERVAL, rounded up>`. Then, without --no-screen, it takes its screen as
docs/devices.md says: the displays of even index read the poll's `screen` and ask
BASE/devices/ID/screen only when its etag is not the one they hold (the recipe: an unchanged
screen costs a poll and nothing more); those of odd index ask on every wake, with
`If-None-Match` naming the etag they hold (firmware that does not read the poll). A 200's body
must hash to its ETag. One JSON line per request is appended to OUT.

`count`: one JSON object of OUT's requests (those between unix times FROM and TO when given):
polls and screen requests by status, 304s, screen answers served stale (with `Age`), polls
that said `stale: true`, errors, the etags seen in 200s, and bodies that did not match their
ETag, and how many displays hold each etag at the end (that of their last 200).
"""

import hashlib
import http.client
import json
import math
import random
import sys
import threading
import time
import urllib.parse

lock = threading.Lock()


def request(base, path, token, headers):
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=10)
    started = time.time()
    try:
        conn.request("GET", u.path + path, headers={"Authorization": f"Bearer {token}", **headers})
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, dict((k.lower(), v) for k, v in resp.getheaders()), body, started, ""
    except (OSError, http.client.HTTPException) as e:
        return 0, {}, b"", started, f"{type(e).__name__}: {e}"
    finally:
        conn.close()


def display(out, index, ident, token, base, seconds, interval, screens):
    rng = random.Random(ident)
    rate = str(math.ceil(interval))
    held = None
    end = time.time() + seconds
    wake = time.time() + rng.uniform(0, interval)
    while True:
        time.sleep(max(0.0, wake - time.time()))
        if time.time() >= end:
            return
        status, headers, body, t, err = request(base, f"/devices/{ident}/poll", token, {"Refresh-Rate": rate})
        line = {"t": t, "id": ident, "route": "poll", "status": status, "error": err}
        screen = None
        if status == 200:
            try:
                screen = json.loads(body).get("screen")
            except ValueError:
                line["error"] = "not JSON"
            line["stale"] = bool(screen and screen.get("stale"))
        lines = [line]
        if screens and status == 200 and (index % 2 == 1 or (screen and screen.get("etag") != held)):
            extra = {"If-None-Match": held} if held else {}
            status, headers, body, t, err = request(base, f"/devices/{ident}/screen", token, extra)
            got = {"t": t, "id": ident, "route": "screen", "status": status, "error": err,
                   "etag": headers.get("etag"), "age": headers.get("age"), "bytes": len(body)}
            if status == 200:
                got["sha"] = '"' + hashlib.sha256(body).hexdigest() + '"'
                held = headers.get("etag")
            lines.append(got)
        with lock, open(out, "a", encoding="utf-8") as f:
            for entry in lines:
                f.write(json.dumps(entry) + "\n")
        wake += interval * rng.uniform(0.9, 1.1)


def run(out, seconds, interval, base, rest):
    screens = True
    if rest and rest[0] == "--no-screen":
        screens, rest = False, rest[1:]
    pairs = list(zip(rest[0::2], rest[1::2]))
    threads = [threading.Thread(target=display, args=(out, i, ident, token, base, float(seconds),
                                                      float(interval), screens))
               for i, (ident, token) in enumerate(pairs)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def count(out, start=None, stop=None):
    c = {"polls": 0, "poll_status": {}, "polls_stale": 0, "screens": 0, "screen_status": {},
         "not_modified": 0, "served_stale": 0, "errors": 0, "etags": [], "mismatched": 0, "held": {}}
    held = {}
    with open(out, encoding="utf-8") as f:
        for raw in f:
            e = json.loads(raw)
            if start is not None and not float(start) <= e["t"] <= float(stop):
                continue
            code = str(e["status"])
            if e["error"] or e["status"] == 0:
                c["errors"] += 1
            if e["route"] == "poll":
                c["polls"] += 1
                c["poll_status"][code] = c["poll_status"].get(code, 0) + 1
                c["polls_stale"] += 1 if e.get("stale") else 0
                continue
            c["screens"] += 1
            c["screen_status"][code] = c["screen_status"].get(code, 0) + 1
            c["not_modified"] += 1 if e["status"] == 304 else 0
            c["served_stale"] += 1 if e["status"] in (200, 304) and e.get("age") else 0
            if e["status"] == 200:
                if e["etag"] not in c["etags"]:
                    c["etags"].append(e["etag"])
                c["mismatched"] += 1 if e.get("sha") != e["etag"] else 0
                held[e["id"]] = e["etag"]
    for etag in held.values():
        c["held"][etag] = c["held"].get(etag, 0) + 1
    print(json.dumps(c))


def main():
    args = sys.argv[1:]
    if len(args) >= 7 and args[0] == "run":
        run(args[1], args[2], args[3], args[4], args[5:])
    elif len(args) in (2, 4) and args[0] == "count":
        count(*args[1:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
