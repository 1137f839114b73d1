"""Binary size: the release build stripped, the static glibc build (scripts/static-build), and
what takes the space by crate (cargo-bloat's `.text` table, from an unstripped build in
target/bloat, which the memory and CPU profiles use for its symbols). The musl builds are
musl.py's."""

import os
import re
import shutil
import subprocess

import musl
from common import BIN, BLOAT_DIR, REPO, STATIC_BIN, die, log, run, step, tail


def stripped(b, binary, name):
    """The size of a stripped copy of `binary` (the profile already strips; the copy makes sure)."""
    out = b.path(name)
    run(["strip", "-o", out, binary])
    return out.stat().st_size


def opt_level():
    """opt-level of [profile.release] in Cargo.toml."""
    section = None
    for line in (REPO / "Cargo.toml").read_text().splitlines():
        if line.startswith("["):
            section = line.strip()
        elif section == "[profile.release]" and line.startswith("opt-level"):
            return re.sub(r'"', "", line.split()[2]) if len(line.split()) > 2 else ""
    return ""


def measure(b):
    R = b.R
    step("release build (cargo build --release --locked) and its stripped size")
    run(["cargo", "build", "--release", "--locked"], cwd=REPO)
    if not BIN.is_file():
        die(f"{BIN} is missing after the build")
    R["size_dyn"] = str(stripped(b, BIN, "mutantops.stripped"))
    R["opt_level"] = opt_level()
    log(f"dynamic: {R['size_dyn']} bytes")
    R["musl"] = "skipped"
    if b.DO_MUSL:
        musl.build(b)
    if not b.DO_SIZE:
        R["size_static"] = "skipped"
        return
    step("static glibc build (scripts/static-build)")
    with open(b.path("static-build.log"), "w") as out:
        if subprocess.run([str(REPO / "scripts/static-build")], stdout=out, stderr=subprocess.STDOUT).returncode:
            tail(b.path("static-build.log"), 30)
            die("scripts/static-build failed")
    R["size_static"] = str(stripped(b, STATIC_BIN, "mutantops-static.stripped"))
    log(f"static: {R['size_static']} bytes")
    step(f"cargo bloat --crates (unstripped build in {BLOAT_DIR})")
    if shutil.which("cargo-bloat"):
        with open(b.path("bloat.txt"), "w") as out, open(b.path("bloat.err"), "w") as err:
            p = subprocess.run(["cargo", "bloat", "--release", "--locked", "--crates", "-n", "15"], cwd=REPO,
                               stdout=out, stderr=err, env=dict(os.environ, CARGO_PROFILE_RELEASE_STRIP="false",
                                                               CARGO_TARGET_DIR=str(BLOAT_DIR)))
        if p.returncode:
            tail(b.path("bloat.err"), 20)
            die("cargo bloat failed")
        tail(b.path("bloat.txt"), 10**6)
    else:
        b.path("bloat.txt").write_text("(cargo-bloat is not installed: cargo install cargo-bloat --locked)\n")
