"""Start-up: the release binary started `STARTS` times on the empty cluster, each timed from
spawn to /readyz answering 200 (connected, both listeners up, every cache listed), then
stopped with SIGTERM; the median is reported."""

import os
import signal
import statistics
import subprocess
import time

from common import BIN, LEASE_NS, die, http_status, log, num, step, write_json


def startup_times(runs, url, cmd, env):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while True:
                if p.poll() is not None:
                    die(f"the operator exited with status {p.returncode} before {url} answered 200")
                if http_status(url, timeout=0.5) == 200:
                    times.append(time.perf_counter() - start)
                    break
                if time.perf_counter() - start > 60:
                    die(f"{url} did not answer 200 within 60s")
                time.sleep(0.005)
        finally:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    return {"runs_ms": [round(t * 1000, 1) for t in times], "median_ms": round(statistics.median(times) * 1000, 1)}


def measure(b):
    step(f"start-up: process start to /readyz 200, {b.STARTS} runs on an empty cluster")
    env = dict(os.environ, POD_NAMESPACE=LEASE_NS, POD_NAME="bench-startup", RUST_LOG="info",
               MUTANT_API_ADDR=f"127.0.0.1:{b.api_port}", MUTANT_METRICS_ADDR=f"127.0.0.1:{b.metrics_port}")
    res = startup_times(b.STARTS, f"http://127.0.0.1:{b.metrics_port}/readyz", [str(BIN)], env)
    write_json(b.path("startup.json"), res)
    b.R["startup_ms"] = num(res["median_ms"])
    b.R["startup_runs"] = ", ".join(num(t) for t in res["runs_ms"])
    log(f"start-up median {b.R['startup_ms']} ms (runs: {b.R['startup_runs']})")
