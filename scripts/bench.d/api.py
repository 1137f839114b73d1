"""The HTTP API: the operator pinned to CPU 0 (taskset -c 0; tokio then starts one worker), the
load generators on CPU 1, and every thread of the control plane pinned to CPU 1 too, so
nothing else runs on the operator's core. On Mutation `w` with variant `a`, created through the
API with the admin token: the GET load (wrk, 50 connections, after a 3 s warm-up) with the
Mutation's own token, over plain HTTP and over HTTPS, the same for the musl binary, the
instructions one GET costs (callgrind), the write latency (latency.py) and, when a GET target
is missed, where the CPU goes (perf, profiles.py)."""

import base64
import http.client
import json
import math
import os
import shutil
import ssl
import time
import subprocess
import urllib.parse

import latency
import profiles
from common import BIN, MUSL_BIN, REPO, SYM_BIN, die, log, need, num, run, step, suffix, tail, write_json

RPS_TARGET = 50000
P99_TARGET_MS = 2
GET_COUNT = 2000  # GETs counted by callgrind per binary
WARM_UP = 15  # seconds of GETs before callgrind counts


def pin_control_plane(b, cpus):
    """Every thread of every process of the bench cluster (etcd, kube-apiserver,
    kube-controller-manager, kube-scheduler, kwok) onto `cpus` (a taskset list)."""
    for f in sorted((b.cluster_dir / "pids").glob("*.pid")):
        try:
            pid = f.read_text().split("\n", 1)[0].strip()
        except OSError:
            continue
        if not pid.isdigit():
            continue
        if run(["taskset", "-a", "-pc", cpus, pid], check=False, stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL).returncode:
            log(f"warning: could not pin pid {pid} to CPU {cpus}")


def request(method, url, token, body=None, cafile=None, out=None):
    """One request; its status (None when it could not be sent). `out`, a path, gets the
    answer's body."""
    u = urllib.parse.urlsplit(url)
    if u.scheme == "https":
        c = http.client.HTTPSConnection(u.hostname, u.port, timeout=10, context=ssl.create_default_context(cafile=cafile))
    else:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    try:
        c.request(method, u.path, body=body, headers=headers)
        r = c.getresponse()
        answer = r.read()
        if out is not None:
            out.write_bytes(answer)
        return r.status
    except (OSError, ssl.SSLError):
        return None
    finally:
        c.close()


def parse_wrk(path):
    """`wrk --latency` output: req/s, p50 ... p99 (ms), requests, non-2xx, socket errors."""
    def ms(text):
        for unit, f in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
            if text.endswith(unit):
                return float(text[: -len(unit)]) * f
        return float(text)

    res = {}
    with open(path) as f:
        for line in f:
            w = line.split()
            if line.startswith("Requests/sec:"):
                res["rps"] = float(w[1])
            elif len(w) == 2 and w[0] in ("50%", "75%", "90%", "99%"):
                res[f"p{w[0][:-1]}_ms"] = round(ms(w[1]), 3)
            elif "requests in" in line:
                res["requests"] = int(w[0])
            elif line.strip().startswith("Non-2xx or 3xx responses:"):
                res["non_2xx"] = int(w[-1])
            elif line.strip().startswith("Socket errors:"):
                res["socket_errors"] = line.strip()
    if "rps" not in res:
        die(f"no Requests/sec in {path}")
    return res


def wrk(url, token, seconds, out=None, latency_dist=True):
    cmd = ["taskset", "-c", "1", "wrk", "-t1", "-c50", f"-d{seconds}s", *(["--latency"] if latency_dist else []),
           "-H", f"Authorization: Bearer {token}", url]
    if out is None:
        run(cmd, stdout=subprocess.DEVNULL)
    else:
        with open(out, "w") as f:
            run(cmd, stdout=f)


def get_load(b, name, prefix, at, token):
    """The GET load against the running operator (at `at`); results in R[<prefix>rps], ..."""
    url = f"{at}/mutations/w/variants/a"
    log(f"wrk ({name}): GET {url}, 50 connections, 3 s warm-up + {b.WRK_SECONDS}s")
    wrk(url, token, 3)
    wrk(url, token, b.WRK_SECONDS, b.path(f"wrk-{name}.txt"))
    tail(b.path(f"wrk-{name}.txt"), 10**6)
    res = parse_wrk(b.path(f"wrk-{name}.txt"))
    write_json(b.path(f"wrk-{name}.json"), res)
    if res.get("non_2xx", 0) != 0:
        die(f"wrk got non-2xx answers: see {b.path(f'wrk-{name}.txt')}")
    b.R[f"{prefix}rps"] = str(math.floor(res["rps"]))
    b.R[f"{prefix}p50"], b.R[f"{prefix}p99"] = num(res["p50_ms"]), num(res["p99_ms"])
    b.R[f"{prefix}wrk_errors"] = res.get("socket_errors", "none")


def get_instructions(b, name, binary, prefix, url, token, env=None, cafile=None):
    """The instructions (user space) one GET costs on a kept-alive connection, counted by
    callgrind: unlike req/s, the same whatever else the machine does. After 200 warm-up GETs,
    a client connects and sends one GET (callgrind's first dump), then another connects and
    sends GET_COUNT + 1 (the second); the difference over GET_COUNT leaves out the connection
    (and over HTTPS, where `env` names the certificate and `cafile` checks it, the handshake).
    Result in R[<prefix>instr]."""
    out = b.path(f"callgrind-{name}.out")
    b.start_operator(f"callgrind-{name}", ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                           f"--callgrind-out-file={out}"], binary, env=env)
    pid = str(b.operator.pid)
    # Warm up for WARM_UP seconds, not only a count: the window counts a request in a steady
    # state, after the leader's first reconciles (slow under callgrind) and, for a device's
    # poll, after its first polls taught the operator its interval (each a status write).
    warm_until = time.time() + WARM_UP
    while True:
        latency.client(200, "GET", url, token, "", cafile=cafile)
        if time.time() >= warm_until:
            break
    run(["callgrind_control", "-i", "on", pid], stdout=subprocess.DEVNULL)
    for n in (1, GET_COUNT + 1):
        latency.client(n, "GET", url, token, "", cafile=cafile)
        run(["callgrind_control", "-d", pid], stdout=subprocess.DEVNULL)
    run(["callgrind_control", "-i", "off", pid], stdout=subprocess.DEVNULL)
    b.stop_operator()
    one, many = (dumped(f"{out}.{i}") for i in (1, 2))
    if one <= 0 or many <= one:
        die(f"callgrind counted no instructions for {name} (see {out}*)")
    b.R[f"{prefix}instr"] = str((many - one) // GET_COUNT)
    log(f"{name}: {b.R[prefix + 'instr']} instructions per GET")


def poll_target(b, api, base):
    """A Mutation `p` whose variant sleeps (spec.devices.sleep, defaults) and one device
    enrolled into it by the admin: the URL of that device's poll, and its token."""
    body = {"name": "p", "deployment": {**base, "metadata": {**base["metadata"], "name": "p"}},
            "variants": [{"label": "a", "instances": 0}], "devices": {"sleep": {}}}
    if request("POST", f"{api}/mutations", b.admin_token, json.dumps(body)) not in (200, 201):
        die(f"POST {api}/mutations (p, with devices) failed (see the operator's log)")
    enrolled = b.path("api-enroll.json")
    enroll = json.dumps({"id": "bench", "label": "a"})
    code = request("POST", f"{api}/mutations/p/devices", b.admin_token, enroll, out=enrolled)
    if code not in (200, 201):
        die(f"enrolling device bench into mutation p failed ({code}; see {enrolled})")
    token = json.loads(enrolled.read_text())["token"]
    poll = f"{api}/mutations/p/devices/bench/poll"
    if request("GET", poll, token) != 200:
        die(f"GET {poll} with the device's token failed")
    return poll, token


def dumped(path):
    """The instructions of one callgrind dump (its summary lines), 0 without it."""
    total = 0
    try:
        for line in open(path):
            if line.startswith("summary:"):
                total += int(line.split()[1])
    except OSError:
        pass
    return total


def measure(b):
    ns = f"bench-api-{suffix()}"
    step("HTTP API: operator pinned to CPU 0 (taskset -c 0); load generators and the control plane on CPU 1")
    # Nothing else on the operator's core: the GET tail measures the operator, not the API
    # server's or etcd's work landing on its core. Undone when this part ends.
    pin_control_plane(b, "1")
    try:
        measure_pinned(b, ns)
    finally:
        pin_control_plane(b, f"0-{os.cpu_count() - 1}")
    # Its pods and Deployments must not load the control plane during the scale run.
    log(f"deleting namespace {ns} (and waiting for it to go)")
    b.delete_namespace(ns, 180)


def measure_pinned(b, ns):
    R, pinned = b.R, ["taskset", "-c", "0"]
    b.create_namespace(ns)
    b.start_operator("api", pinned)
    api = f"http://127.0.0.1:{b.api_port}/api/v1/namespaces/{ns}"
    base = json.loads((REPO / "deploy/examples/deployment.json").read_text())
    base["metadata"]["name"] = "w"
    # The writes below add WRITES variants (with the admin token, below); a Mutation holds
    # at most 500, and its own token may make 20 by default (R32): this one allows one more
    # than the writes, should a run use its token.
    create = {"name": "w", "deployment": base, "variants": [{"label": "a", "env": {"BENCH": "a"}, "instances": 0}],
              "deviceAccess": {"maxVariants": min(500, b.WRITES + 1)}}
    write_json(b.path("api-create.json"), create)
    if request("POST", f"{api}/mutations", b.admin_token, json.dumps(create)) not in (200, 201):
        die(f"POST {api}/mutations failed (see {b.path(f'operator-{b.op_count}-api.log')})")
    secret = b.kubectl("-n", ns, "get", "secret", "w-secret", "-o", "jsonpath={.data.token}",
                       stdout=subprocess.PIPE, text=True).stdout
    token = base64.b64decode(secret).decode(errors="replace")
    if len(token) != 64:
        die("the Mutation's Secret w-secret holds no 64-character token")
    get = f"{api}/mutations/w/variants/a"
    if request("GET", get, token) != 200:
        die(f"GET {get} with the Mutation's token failed")
    get_load(b, "glibc", "", api, token)
    # The same load over HTTPS (MUTANT_API_TLS_*; a self-signed P-256 certificate, keep-alive
    # connections as above), the glibc binary pinned the same way; then plain HTTP again.
    tls, https = b.path("tls"), "https:" + api[len("http:"):]
    b.stop_operator()
    tls.mkdir(exist_ok=True)
    with open(tls / "openssl.log", "w") as err:
        if run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                "-keyout", tls / "tls.key", "-out", tls / "tls.crt"], check=False, stdout=err, stderr=err).returncode:
            die(f"openssl could not make the bench's certificate (see {tls / 'openssl.log'})")
    tls_env = {"MUTANT_API_TLS_CERT_FILE": str(tls / "tls.crt"), "MUTANT_API_TLS_KEY_FILE": str(tls / "tls.key")}
    b.start_operator("api-tls", pinned, env=tls_env)
    if request("GET", f"{https}/mutations/w/variants/a", token, cafile=str(tls / "tls.crt")) != 200:
        die(f"GET over HTTPS failed (see {b.path(f'operator-{b.op_count}-api-tls.log')})")
    get_load(b, "tls", "tls_", https, token)
    b.stop_operator()
    # The musl binary right after, pinned the same way, on the same Mutation; then the
    # instructions per GET of each (and over HTTPS); then the glibc one again for the writes.
    if R["musl"] == "measured":
        b.start_operator("api-musl", pinned, MUSL_BIN)
        get_load(b, "musl", "musl_", api, token)
        b.stop_operator()
    if need("valgrind", "valgrind", optional=True):
        get_instructions(b, "glibc", BIN, "", get, token)
        get_instructions(b, "tls", BIN, "tls_", f"{https}/mutations/w/variants/a", token, tls_env, tls / "tls.crt")
        if R["musl"] == "measured":
            get_instructions(b, "musl", MUSL_BIN, "musl_", get, token)
        b.start_operator("api-poll", pinned)
        poll, device_token = poll_target(b, api, base)
        b.stop_operator()
        get_instructions(b, "poll", BIN, "poll_", poll, device_token)
    b.start_operator("api-writes", pinned)

    # Writes: sequential, one at a time over one keep-alive connection, timed by the client;
    # the API server's histogram of the same period beside them. With the admin token: a
    # Mutation's token may make 2 changes a second (R34), which would time the
    # budget's 429s, not the writes.
    latency.measure(b, api, b.admin_token)
    b.stop_operator()

    # Where the GET path's CPU goes, when a target is missed: the same wrk run against the
    # unstripped build (same source and profile) under `perf record` (999 Hz, call graphs); for
    # plain HTTP and for HTTPS, each when its own target is missed.
    R["cpu_profile"] = R["tls_cpu_profile"] = "skipped"
    if not (b.DO_SIZE and SYM_BIN.is_file() and shutil.which("perf")):
        return
    if float(R["rps"]) < RPS_TARGET or float(R["p99"]) > P99_TARGET_MS:
        cpu_profile(b, "", pinned, get, token, {})
    if R.get("tls_p99") not in (None, "") and float(R["tls_p99"]) > P99_TARGET_MS:
        cpu_profile(b, "tls-", pinned, f"{https}/mutations/w/variants/a", token, tls_env)


def cpu_profile(b, prefix, pinned, url, token, env):
    """The wrk run of `url` again, under `perf record` of the unstripped build: perf{-tls}.json."""
    log(f"a GET target is missed: CPU profile of the same wrk run on {url} (perf record, unstripped build)")
    b.start_operator(f"api-{prefix}perf", pinned, SYM_BIN, env=env)
    wrk(url, token, 3, latency_dist=False)
    with open(b.path(f"perf-{prefix}record.log"), "w") as out:
        perf = subprocess.Popen(["perf", "record", "-F", "999", "-g", "-o", str(b.path(f"perf-{prefix}.data")),
                                 "-p", str(b.operator_pid()), "--", "sleep", str(b.WRK_SECONDS)],
                                stdout=out, stderr=subprocess.STDOUT)
    wrk(url, token, b.WRK_SECONDS, b.path(f"wrk-{prefix}perf.txt"), latency_dist=False)
    if perf.wait():
        die(f"perf record failed: see {b.path(f'perf-{prefix}record.log')}")
    b.stop_operator()
    write_json(b.path(f"perf{'-tls' if prefix else ''}.json"), profiles.perf(b.path(f"perf-{prefix}.data")))
    b.R[f"{prefix.replace('-', '_')}cpu_profile"] = "measured"
