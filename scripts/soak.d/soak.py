"""scripts/soak's driver (its header says what a run does and judges): the cluster, two
replicas of the operator, the churn, the faults, the samples, the verdict, the table and the
plot (plot.py)."""

import http.client
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import plot

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "scripts/cluster"
LEASE_SECONDS = 6
RESTART_EVERY, LEADER_EVERY = 20, 15
REST_SECONDS = int(os.environ.get("MUTANTOPS_SOAK_REST_SECONDS", "95"))
REST_WATCH = 35  # the last seconds of a rest, sampled every second


def log(msg):
    print(f"[soak] {msg}", file=sys.stderr, flush=True)


def die(msg):
    log(f"FAILED: {msg}")
    sys.exit(1)


def run(cmd, input=None, check=True, tries=1):
    """A command's stdout; tried again for up to `tries` attempts a second apart (the API
    server may be away on purpose)."""
    for attempt in range(tries):
        p = subprocess.run([str(c) for c in cmd], input=input, capture_output=True, text=True)
        if p.returncode == 0 or attempt == tries - 1:
            break
        time.sleep(1)
    if check and p.returncode != 0:
        die(f"{shlex.join(str(c) for c in cmd)}: {p.stderr.strip()[-400:]}")
    return p.stdout


class Replica:
    """One operator process: its ports, log and /proc."""

    def __init__(self, name, binary, ns, token, out):
        self.name, self.binary, self.ns, self.token, self.out = name, binary, ns, token, out
        self.api_port, self.metrics_port = free_port(), free_port()
        self.proc, self.starts = None, 0

    def start(self):
        self.starts += 1
        env = dict(os.environ, POD_NAME=f"soak-{self.name}", POD_NAMESPACE=self.ns, RUST_LOG="info",
                   MUTANT_API_ADDR=f"127.0.0.1:{self.api_port}",
                   MUTANT_METRICS_ADDR=f"127.0.0.1:{self.metrics_port}", MUTANT_API_TOKEN=self.token,
                   MUTANT_WATCH_NAMESPACE=self.ns, MUTANT_LEASE_DURATION_SECONDS=str(LEASE_SECONDS))
        with open(self.out / f"operator-{self.name}.log", "a") as f:
            self.proc = subprocess.Popen([str(self.binary)], env=env, stdout=f, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if http_status(self.metrics_port, "/readyz") == 200:
                return
            if self.proc.poll() is not None:
                die(f"replica {self.name} exited ({self.proc.returncode}); see {self.out}/operator-{self.name}.log")
            time.sleep(0.1)
        die(f"replica {self.name} not ready within 60 s")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def sample(self):
        """VmRSS (KiB), open descriptors and tasks of the process."""
        pid = self.proc.pid
        rss = next(int(line.split()[1]) for line in open(f"/proc/{pid}/status") if line.startswith("VmRSS:"))
        return rss, len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task"))


TCP_STATES = {"01": "established", "06": "time-wait", "08": "close-wait", "0A": "listening"}


def open_files(pid, replica):
    """What a process holds open, counted by kind: sockets by TCP state and peer (its own
    listeners, the API server, clients of its API), other files by what they are."""
    sockets = {}
    for table in ("tcp", "tcp6"):
        try:
            lines = open(f"/proc/{pid}/net/{table}").read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            local_port, remote_port = int(f[1].split(":")[1], 16), int(f[2].split(":")[1], 16)
            state = TCP_STATES.get(f[3], f[3])
            if state == "listening":
                peer = "listener"
            elif local_port in (replica.api_port, replica.metrics_port):
                peer = "a client of its API"
            else:
                peer = f"port {remote_port}"
            sockets[f[9]] = f"socket {state} {peer}"
    kinds = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            what = sockets.get(target[8:-1], "socket (not TCP)")
        else:
            what = "log" if target.endswith(".log") else target.split(":")[0]
        kinds[what] = kinds.get(what, 0) + 1
    return dict(sorted(kinds.items()))


def connections(pid, replica):
    """Replica's TCP connections other than to its own listeners, from `ss -tnpi`: per
    connection the peer, the seconds since it last sent and last received, and the bytes
    received. A watch receives now and then and sends nothing; a connection idle in the pool
    does neither; the Lease's renewals send every few seconds."""
    try:
        p = subprocess.run(["ss", "-H", "-tnpi", "state", "established"], capture_output=True, text=True)
    except OSError as e:
        log(f"no listing of connections: ss: {e}")
        return []
    found, lines = [], p.stdout.splitlines()
    for head, info in zip(lines, lines[1:]):
        if f"pid={pid}," not in head:
            continue
        f = head.split()
        local, peer = f[2], f[3]
        if int(local.rsplit(":", 1)[1]) in (replica.api_port, replica.metrics_port):
            continue
        fields = dict(w.split(":", 1) for w in info.split() if ":" in w and not w.startswith("("))

        def secs(key):
            v = fields.get(key, "")
            return round(int(v) / 1000) if v.isdigit() else None
        found.append({"local": local, "peer": peer, "last_sent_s": secs("lastsnd"),
                      "last_received_s": secs("lastrcv"), "bytes_received": fields.get("bytes_received", "0")})
    return sorted(found, key=lambda c: c["local"])


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(port, path):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", path)
        return c.getresponse().status
    except OSError:
        return 0


class Soak:
    def __init__(self, seconds, out):
        self.seconds, self.out = seconds, out
        self.token = os.urandom(32).hex()
        self.ns = f"mutantops-soak-{random.randrange(16**6):06x}"
        self.kubectl = None
        self.replicas = []
        self.samples = []
        self.faults = {"apiserver restarts": 0, "b restarted while leading": 0, "a stepped down": 0}
        self.calls, self.rests = 0, 0

    # --- the API, through the replicas in turn -------------------------------------------------

    def api(self, method, path, token=None, body=None, want=(200,), tries=60):
        """An API call through one of the running replicas (in turn), tried again on a refused
        connection, 429 and 5xx (the API server or a replica may be away on purpose) for up to
        `tries` seconds; any other answer than `want` fails the run."""
        self.calls += 1
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {token or self.token}", "Content-Type": "application/json"}
        last = None
        for _ in range(tries * 4):
            live = [r for r in self.replicas if r.alive()]
            r = live[self.calls % len(live)]
            try:
                c = http.client.HTTPConnection("127.0.0.1", r.api_port, timeout=10)
                c.request(method, f"/api/v1/namespaces/{self.ns}{path}", body=data, headers=headers)
                resp = c.getresponse()
                text = resp.read().decode()
                if resp.status in want:
                    return json.loads(text) if text else None
                last = f"{resp.status} {text[:300]}"
                if resp.status != 429 and resp.status < 500:
                    break
            except OSError as e:
                last = str(e)
            time.sleep(0.25)
        die(f"{method} {path}: {last}")

    def kc(self, *args, input=None):
        return run([self.kubectl, "-n", self.ns, *args], input=input, tries=60)

    def secret_token(self, name):
        for _ in range(240):
            got = run([self.kubectl, "-n", self.ns, "get", "secret", f"{name}-secret", "-o",
                       "jsonpath={.data.token}"], check=False)
            if got:
                import base64
                return base64.b64decode(got).decode()
            time.sleep(0.25)
        die(f"no Secret {name}-secret")

    # --- the churn -----------------------------------------------------------------------------

    def base(self, name):
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                "spec": {"selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}},
                                      "spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                                                               "env": [{"name": "MODE", "value": "base"}]}]}}}}

    def mutant(self, k, mode):
        name = f"md-{k:05d}"
        return json.dumps({"apiVersion": "neiam.org/v1", "kind": "MutantDeployment", "metadata": {"name": name},
                           "spec": {"deployment": self.base(name),
                                    "mutations": [{"label": "one", "env": {"MODE": mode}, "instances": 1},
                                                  {"label": "two", "env": {"MODE": mode}, "instances": 0}]}})

    def setup(self):
        self.api("POST", "/mutations", body={"name": "keep", "deployment": self.base("keep"),
                                             "variants": [{"label": "screen", "instances": 1}]}, want=(201,))
        self.kc("patch", "mutation", "keep", "--type", "merge", "-p",
                json.dumps({"spec": {"devices": {"enrollment": "Open"}}}))

    def cycle(self, k):
        # Names of one width (c-00012, d-00012, t-00012), so that keep's status does not grow
        # by the digits of the cycle's number.
        name, d, t = f"c-{k:05d}", f"d-{k:05d}", f"t-{k:05d}"
        old_c, old_md, old_d, prev_t = f"c-{k - 2:05d}", f"md-{k - 2:05d}", f"d-{k - 2:05d}", f"t-{k - 1:05d}"
        # "a" is handed to the Mutation's token (byToken), which removes it below: the token
        # removes only the token's variants (R32).
        self.api("POST", "/mutations", body={"name": name, "deployment": self.base(name),
                                             "variants": [{"label": "a", "instances": 0, "byToken": True},
                                                          {"label": "b", "instances": 1}]}, want=(201,))
        own = self.secret_token(name)
        self.api("POST", f"/mutations/{name}/variants", own, {"label": "x", "env": {"SCREEN": "x"}, "instances": 1},
                 want=(201,))
        self.api("PATCH", f"/mutations/{name}/variants/x", own, {"instances": 2})
        self.api("DELETE", f"/mutations/{name}/variants/a", own, want=(200, 204))
        if k >= 2:
            self.api("DELETE", f"/mutations/{old_c}", want=(200, 204, 404))

        self.kc("apply", "-f", "-", input=self.mutant(k, "first"))
        self.kc("apply", "-f", "-", input=self.mutant(k, "second"))
        if k >= 2:
            self.kc("delete", "mutantdeployment", old_md, "--ignore-not-found", "--wait=false")

        dev = self.api("POST", "/mutations/keep/devices", body={"id": d, "label": "screen"}, want=(201,))
        self.api("GET", f"/mutations/keep/devices/{d}/poll", dev["token"])
        self.api("GET", f"/mutations/keep/devices/{d}", dev["token"])
        if k >= 2:
            self.api("DELETE", f"/mutations/keep/devices/{old_d}", want=(200, 204, 404))
        self.api("POST", "/mutations/keep/variants", body={"label": t, "instances": 0}, want=(201,))
        if k >= 1:
            self.api("DELETE", f"/mutations/keep/variants/{prev_t}", want=(200, 204, 404))

    # --- the faults ----------------------------------------------------------------------------

    def holder(self):
        return run([self.kubectl, "-n", self.ns, "get", "lease", "mutantops-leader", "-o",
                    "jsonpath={.spec.holderIdentity}"], check=False, tries=30).strip()

    def restart_apiserver(self, away):
        run([CLUSTER, "restart-apiserver", str(away)])
        self.faults["apiserver restarts"] += 1

    def leader_change(self):
        a, b = self.replicas
        if self.holder() == "soak-b":
            b.stop()
            # a takes the Lease b released before b is back, or b would often take it again
            deadline = time.time() + 3 * LEASE_SECONDS
            while self.holder() != "soak-a" and time.time() < deadline:
                time.sleep(0.2)
            b.start()
            self.faults["b restarted while leading"] += 1
        else:
            self.restart_apiserver(LEASE_SECONDS)
            self.faults["a stepped down"] += 1

    # --- samples -------------------------------------------------------------------------------

    def rest(self, t0):
        """Replica a's descriptors and tasks after REST_SECONDS without churn: by then its
        client has closed the connections it kept idle (30 s, connect::POOL_IDLE) and tokio its
        idle blocking threads (10 s), so what is left is what it holds for good."""
        log(f"resting {REST_SECONDS} s (idle connections and threads time out)")
        time.sleep(max(0, REST_SECONDS - REST_WATCH))
        # The lowest count of the last REST_WATCH seconds (the pool's idle timeout and more): a
        # watch that the API server ends every minute or so leaves its connection idle in the
        # pool for up to 30 s, so a single reading may count one connection more.
        seen = []
        for _ in range(REST_WATCH):
            rss, fds, tasks = self.replicas[0].sample()
            seen.append((fds, tasks, rss, open_files(self.replicas[0].proc.pid, self.replicas[0])))
            time.sleep(1)
        fds, tasks, rss = min(x[0] for x in seen), min(x[1] for x in seen), min(x[2] for x in seen)
        kinds = next(x[3] for x in seen if x[0] == fds)
        log(f"at rest: {fds} descriptors ({kinds}), {tasks} tasks, VmRSS {rss} KiB")
        # Which connections replica a holds, and how long each has been quiet: kept in the
        # run's directory, so that a descriptor more at the end can be told apart (a watch, a
        # connection idle in the pool, a request that never ended).
        conns = connections(self.replicas[0].proc.pid, self.replicas[0])
        self.rests += 1
        with open(self.out / f"rest-{self.rests}-connections.json", "w") as f:
            json.dump(conns, f, indent=1)
        for c in conns:
            log(f"  {c['local']} -> {c['peer']}: sent {c['last_sent_s']} s ago, received "
                f"{c['last_received_s']} s ago, {c['bytes_received']} bytes in")
        return {"t": round(time.time() - t0, 1), "rss_kib": rss, "fds": fds, "tasks": tasks, "kinds": kinds}

    def watch_longer(self, want, seconds=180):
        """Diagnosis only (the verdict stands on the rest): whether replica a comes back to
        `want` descriptors given more time, and which connections it holds meanwhile."""
        log(f"more descriptors than after warm-up: watching {seconds} s more")
        a, start, last = self.replicas[0], time.time(), None
        while time.time() - start < seconds:
            fds = a.sample()[1]
            if fds != last:
                conns = connections(a.proc.pid, a)
                log(f"  +{time.time() - start:.0f} s: {fds} descriptors, connections "
                    + ", ".join(f"{c['local'].rsplit(':', 1)[1]} (sent {c['last_sent_s']} s, "
                                f"received {c['last_received_s']} s ago)" for c in conns))
                last = fds
            if fds <= want:
                break
            time.sleep(1)

    def sample(self, k, t0):
        time.sleep(1)
        a, b = self.replicas
        rss, fds, tasks = a.sample()
        status = json.loads(self.kc("get", "mutation", "keep", "-o", "json")).get("status", {})
        events = json.loads(self.kc("get", "events", "-o", "json")).get("items", [])
        s = {"t": round(time.time() - t0, 1), "cycle": k, "rss_kib": rss, "fds": fds, "tasks": tasks,
             "b_rss_kib": b.sample()[0] if b.alive() else 0, "leader": self.holder(),
             "keep_status_bytes": len(json.dumps(status, separators=(",", ":"))),
             "events": len(events), "event_bytes": len(json.dumps(events, separators=(",", ":")))}
        self.samples.append(s)
        return s


def cluster_env():
    for line in run([CLUSTER, "env"]).splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            k, v = words[1].split("=", 1)
            os.environ[k] = v


def binary():
    given = os.environ.get("MUTANTOPS_SOAK_BINARY")
    if given:
        return Path(given).resolve()
    log("cargo build --release")
    subprocess.run(["cargo", "build", "--release", "--locked", "-q"], cwd=REPO, check=True)
    return REPO / "target/release/mutantops"


def main():
    args = sys.argv[1:]
    if any(a not in ("--write",) for a in args):
        die("usage: scripts/soak [--write]")
    seconds = int(os.environ.get("MUTANTOPS_SOAK_SECONDS", "3600"))
    if seconds < 40:
        die("MUTANTOPS_SOAK_SECONDS must be at least 40 (the verdict needs a warm-up and two windows)")
    out = REPO / "target/soak" / time.strftime("run-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    exe = binary()
    started = subprocess.run([CLUSTER, "status"], capture_output=True).returncode != 0
    if started:
        log("scripts/cluster up")
        run([CLUSTER, "up"])
    cluster_env()
    soak = Soak(seconds, out)
    soak.kubectl = os.environ["KUBECTL"]
    try:
        rc = soak_run(soak, exe)
    finally:
        for r in soak.replicas:
            r.stop()
        run([soak.kubectl, "delete", "namespace", soak.ns, "--ignore-not-found", "--wait=false"], check=False)
        if started:
            log("scripts/cluster down")
            run([CLUSTER, "down"], check=False)
    if rc == 0 and "--write" in args:
        plot.write_docs(out, REPO)
    sys.exit(rc)


def soak_run(soak, exe):
    crd = run([exe, "crd"])
    run([soak.kubectl, "apply", "--server-side", "--field-manager=mutantops-soak", "-f", "-"], input=crd)
    # A CRD created a moment ago may have no conditions yet, which `kubectl wait` takes for an
    # error rather than for "not yet": asked again, a second apart, for up to a minute.
    run([soak.kubectl, "wait", "--for=condition=Established", "--timeout=10s",
         "crd/mutations.neiam.org", "crd/mutantdeployments.neiam.org"], tries=60)
    run([soak.kubectl, "create", "namespace", soak.ns])
    run([soak.kubectl, "label", "namespace", soak.ns, "mutantops.neiam.org/api=enabled",
         "mutantops.neiam.org/test=true"])
    soak.replicas = [Replica(n, exe, soak.ns, soak.token, soak.out) for n in ("a", "b")]
    for r in soak.replicas:
        r.start()
    log(f"replicas a and b ({exe}) in namespace {soak.ns}; churn for {soak.seconds} s; logs in {soak.out}")
    soak.setup()
    t0 = time.time()
    k, last_print, rested = 0, 0.0, {}
    while time.time() - t0 < soak.seconds:
        if "after warm-up" not in rested and time.time() - t0 >= soak.seconds * 0.25:
            rested["after warm-up"] = soak.rest(t0)
            t0 += REST_SECONDS + 1  # the rest is not churn: the windows count churn time only
        soak.cycle(k)
        if k and k % RESTART_EVERY == 0:
            soak.restart_apiserver(2)
        if k and k % LEADER_EVERY == 0:
            soak.leader_change()
        s = soak.sample(k, t0)
        if time.time() - last_print >= max(10, soak.seconds / 40):
            last_print = time.time()
            log(f"{s['t']:7.0f} s  cycle {k:5d}  a: {s['rss_kib'] / 1024:.1f} MiB, {s['fds']} fds, "
                f"{s['tasks']} tasks; leader {s['leader']}; keep's status {s['keep_status_bytes']} B; "
                f"{s['events']} Events")
        k += 1
    rested["at the end"] = soak.rest(t0)
    if rested["at the end"]["fds"] > rested["after warm-up"]["fds"]:
        soak.watch_longer(rested["after warm-up"]["fds"])
    if not soak.replicas[0].alive():
        die("replica a exited")
    summary, ok = plot.report(soak.samples, rested, {**soak.faults, "cycles": k, "API calls": soak.calls,
                                                     "b started": soak.replicas[1].starts}, soak.seconds)
    (soak.out / "summary.md").write_text(summary)
    plot.csv(soak.samples, soak.out / "samples.csv")
    plot.svg(soak.samples, soak.out / "soak.svg")
    print(summary)
    log(f"table, samples and plot in {soak.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    main()
