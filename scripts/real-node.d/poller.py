"""A client of the operator's API through the whole of an upgrade (scripts/real-node's upgrade
step, R45), and the check of what it saw.

  poller.py OUT INTERVAL URL TOKEN [URL TOKEN ...]
  poller.py check OUT AUDIT_LOG OFFSET NAMESPACE OUTGOING TOLERATE

Every INTERVAL seconds, until SIGTERM or SIGINT, GET the next URL of the list (round robin)
with its bearer token, on a new connection each time (as a display that wakes up opens one),
with a 2 s timeout. One line per request is appended to OUT, flushed at once:

  <unix time> <status or ERR> <Retry-After or -> <the URL's last two parts> <what went wrong>

`check` reads OUT: a call counts as served when it answered 2xx, or 429/503 with a Retry-After
header (the API's documented "come back later"). With TOLERATE seconds above 0 (the outgoing
replicas, pod names comma-separated in OUTGOING, have no preStop hook: a release before the
hook, whose replicas stop accepting the moment they are told to stop), a failed connection
within TOLERATE seconds after one of them was deleted (the audit log from byte OFFSET) is
counted apart instead. Prints one summary line; exits 1 naming the calls that failed otherwise.
"""

import datetime
import http.client
import json
import signal
import sys
import time
import urllib.parse

running = True


def stop(_signum, _frame):
    global running
    running = False


def get(url, token):
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=2)
    try:
        path = u.path + (f"?{u.query}" if u.query else "")
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        resp = conn.getresponse()
        resp.read()
        return str(resp.status), resp.getheader("Retry-After") or "-", ""
    except (OSError, http.client.HTTPException) as e:
        return "ERR", "-", f"{type(e).__name__}: {e}".replace("\n", " ")
    finally:
        conn.close()


def deletions(audit_log, offset, namespace, pods):
    """When each of `pods` in `namespace` was deleted, from the audit log after `offset`."""
    times = []
    with open(audit_log, "rb") as f:
        f.seek(offset)
        for raw in f:
            try:
                e = json.loads(raw)
            except ValueError:
                continue
            ref = e.get("objectRef", {})
            if (e.get("verb") == "delete" and ref.get("resource") == "pods" and not ref.get("subresource")
                    and ref.get("namespace") == namespace and ref.get("name") in pods
                    and e.get("stage") == "ResponseComplete"):
                at = e["requestReceivedTimestamp"].replace("Z", "+00:00")
                times.append(datetime.datetime.fromisoformat(at).timestamp())
    return times


def check(out, audit_log, offset, namespace, outgoing, tolerate):
    deleted = deletions(audit_log, int(offset), namespace, set(outgoing.split(",")))
    calls, served, retried, tolerated, bad, last, gap = 0, 0, 0, 0, [], None, 0.0
    with open(out, encoding="utf-8") as f:
        for line in f:
            t, status, retry = line.split(" ", 3)[:3]
            t, calls = float(t), calls + 1
            if status.startswith("2"):
                served += 1
                gap, last = max(gap, t - last) if last else gap, t
            elif status in ("429", "503") and retry != "-":
                retried += 1
            elif status == "ERR" and any(d <= t <= d + float(tolerate) for d in deleted):
                tolerated += 1
            else:
                bad.append(line.strip())
    summary = (f"{calls} calls, {served} answered 2xx, {retried} told to retry (Retry-After), "
               f"{tolerated} refused while a replica without a preStop hook stopped, "
               f"{len(bad)} failed; longest between two 2xx {gap:.1f}s")
    print(summary)
    for b in bad[:10]:
        print(f"FAILED {b}")
    sys.exit(1 if bad or calls == 0 else 0)


def main():
    if len(sys.argv) == 8 and sys.argv[1] == "check":
        check(*sys.argv[2:])
    if len(sys.argv) < 5 or len(sys.argv) % 2 != 1:
        sys.exit(__doc__)
    out, interval = sys.argv[1], float(sys.argv[2])
    targets = list(zip(sys.argv[3::2], sys.argv[4::2]))
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    i = 0
    with open(out, "a", encoding="utf-8") as f:
        while running:
            started = time.time()
            url, token = targets[i % len(targets)]
            status, retry, err = get(url, token)
            tail = "/".join(url.rsplit("/", 2)[-2:])
            f.write(f"{started:.3f} {status} {retry} {tail} {err}\n")
            f.flush()
            i += 1
            time.sleep(max(0.0, interval - (time.time() - started)))


if __name__ == "__main__":
    main()
