#!/usr/bin/env python3
"""What scripts/image checks that buildah does not: that a binary is the static one of its
platform (before it goes into an image), and that the image buildah wrote from the
Containerfile is the one the operator needs, its binary run. Python's standard library only.

    check.py elf ARCH FILE             refuse FILE unless it is a static binary for ARCH
    check.py summary DIR               each platform's manifest digest and layer sizes of
                                       DIR/oci, and its index digest
    check.py check DIR --revision SHA --crds DIR [--no-run]
                                       DIR/oci and DIR/mutantops-<version>-linux-<arch>.tar
    check.py unpack ARCHIVE DEST       the layers of an archive's image into DEST; prints its
                                       Entrypoint and Cmd, one argument a line

ARCH is amd64, arm64 or armv7 (or linux/amd64, linux/arm64, linux/arm/v7, or the Rust target).
"""

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# arch -> platform, Rust target, ELF class and e_machine, qemu-user for running it elsewhere
PLATFORMS = {
    "amd64": ("linux/amd64", "x86_64-unknown-linux-musl", 64, 62, None),
    "arm64": ("linux/arm64", "aarch64-unknown-linux-musl", 64, 183, "qemu-aarch64-static"),
    "armv7": ("linux/arm/v7", "armv7-unknown-linux-musleabihf", 32, 40, "qemu-arm-static"),
}
MACHINES = {3: "i386", 40: "ARM", 62: "x86-64", 183: "aarch64", 243: "RISC-V"}
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
REF = "org.opencontainers.image.ref.name"


class Refused(Exception):
    """An input or an image that must not pass: the message says what and why."""


def arch_of(name):
    aliases = {"linux/arm": "armv7", "x86_64": "amd64", "aarch64": "arm64", "armv7l": "armv7"}
    for arch, p in PLATFORMS.items():
        if name in (arch, p[0], p[1]):
            return arch
    if name in aliases:
        return aliases[name]
    raise Refused("unknown platform %r" % name)


def platform_arch(p):
    return arch_of("/".join(filter(None, [p["os"], p["architecture"], p.get("variant")])))


# --- the binary -------------------------------------------------------------------------------


def check_elf(arch, data, path):
    """Refused unless data is a static little-endian executable for arch's platform."""
    platform, _target, want_class, want_machine, _qemu = PLATFORMS[arch]
    where = "%s: %s" % (platform, path)
    if len(data) < 52 or data[:4] != b"\x7fELF":
        raise Refused("%s: not an ELF file" % where)
    cls = {1: 32, 2: 64}.get(data[4])
    if cls is None or data[5] != 1:
        raise Refused("%s: not a little-endian ELF file (class %d, data %d)" % (where, data[4], data[5]))
    fmt = "<HHIQQQIHHH" if cls == 64 else "<HHIIIIIHHH"
    e_type, machine, _v, _entry, phoff, _shoff, flags, _eh, phentsize, phnum = struct.unpack_from(fmt, data, 16)
    have = "ELF%d %s (e_machine %d)" % (cls, MACHINES.get(machine, "machine"), machine)
    if machine != want_machine or cls != want_class:
        raise Refused("%s is %s, not ELF%d %s (e_machine %d): the wrong binary for %s"
                      % (where, have, want_class, MACHINES[want_machine], want_machine, platform))
    if e_type not in (2, 3):  # ET_EXEC, ET_DYN (static-pie)
        raise Refused("%s is not an executable (e_type %d)" % (where, e_type))
    for i in range(phnum):
        off = phoff + i * phentsize
        if cls == 64:
            p_type, _f, p_offset, _va, _pa, p_filesz = struct.unpack_from("<IIQQQQ", data, off)
        else:
            p_type, p_offset, _va, _pa, p_filesz = struct.unpack_from("<IIIII", data, off)
        if p_type == 3:  # PT_INTERP
            loader = data[p_offset:p_offset + p_filesz].rstrip(b"\0").decode(errors="replace")
            raise Refused("%s is dynamically linked: it asks for the loader %s (PT_INTERP)" % (where, loader))
        if p_type == 2:  # PT_DYNAMIC: any DT_NEEDED?
            fmt, size = ("<qQ", 16) if cls == 64 else ("<iI", 8)
            for pos in range(p_offset, p_offset + p_filesz - size + 1, size):
                tag = struct.unpack_from(fmt, data, pos)[0]
                if tag == 0:
                    break
                if tag == 1:
                    raise Refused("%s needs shared libraries (DT_NEEDED)" % where)
    if arch == "armv7" and (flags >> 24 != 5 or not flags & 0x400):
        raise Refused("%s is not an EABI5 hard-float ARM binary (e_flags 0x%08x)" % (where, flags))
    return have


# --- reading an OCI layout (a directory or an archive), every blob against its digest --------


class Layout:
    def __init__(self, path):
        self.path, self.files = path, {}
        if os.path.isdir(path):
            for root, _dirs, names in os.walk(path):
                for n in names:
                    full = os.path.join(root, n)
                    with open(full, "rb") as f:
                        self.files[os.path.relpath(full, path)] = f.read()
        else:
            with tarfile.open(path) as tf:
                for m in tf.getmembers():
                    if m.isfile():
                        self.files[m.name.lstrip("./")] = tf.extractfile(m).read()

    def json(self, name):
        if name not in self.files:
            raise Refused("%s: no %s" % (self.path, name))
        return json.loads(self.files[name])

    def blob(self, desc, parse=True):
        data = self.files.get("blobs/" + desc["digest"].replace(":", "/"))
        if data is None:
            raise Refused("%s: blob %s is missing" % (self.path, desc["digest"]))
        if "sha256:" + hashlib.sha256(data).hexdigest() != desc["digest"] or len(data) != desc["size"]:
            raise Refused("%s: blob %s does not match its descriptor" % (self.path, desc["digest"]))
        return json.loads(data) if parse else data

    def images(self):
        """[(arch, manifest descriptor, manifest, config, [layer tar])] of the layout's one
        entry, an image index or an image."""
        top = self.json("index.json")["manifests"]
        if len(top) != 1:
            raise Refused("%s: index.json has %d entries, want 1" % (self.path, len(top)))
        descs = self.blob(top[0])["manifests"] if top[0]["mediaType"] == MT_INDEX else [top[0]]
        out = []
        for d in descs:
            manifest = self.blob(d)
            config = self.blob(manifest["config"])
            layers = [zlib.decompress(self.blob(l, parse=False), 31) for l in manifest["layers"]]
            out.append((platform_arch(config), d, manifest, config, layers))
        return out


def members(layer):
    with tarfile.open(fileobj=io.BytesIO(layer)) as tf:
        return [(m, tf.extractfile(m).read() if m.isfile() else b"") for m in tf.getmembers()]


def extract(layer, dest):
    with tarfile.open(fileobj=io.BytesIO(layer)) as tf:
        if hasattr(tarfile, "data_filter"):
            tf.extractall(dest, filter="tar")
        else:
            tf.extractall(dest)


# --- commands ---------------------------------------------------------------------------------


def cmd_elf(args):
    with open(args.file, "rb") as f:
        print("%s: %s, static" % (args.file, check_elf(arch_of(args.arch), f.read(), args.file)))


def cmd_summary(args):
    lay = Layout(os.path.join(args.dir, "oci"))
    print("%-13s %-73s %10s %10s" % ("platform", "manifest", "layer gz", "unpacked"))
    for arch, d, manifest, _config, layers in lay.images():
        gz = sum(l["size"] for l in manifest["layers"])
        raw = sum(len(l) for l in layers)
        print("%-13s %-73s %10d %10d  (%.2f MiB, %.2f MiB)"
              % (PLATFORMS[arch][0], d["digest"], gz, raw, gz / 1048576, raw / 1048576))
    print("%-13s %s" % ("index", lay.json("index.json")["manifests"][0]["digest"]))


def cargo_package():
    with open(os.path.join(REPO, "Cargo.toml")) as f:
        section = f.read().split("[package]", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^(\w+)\s*=\s*"([^"]*)"', section, re.M))


def expect(cond, message):
    if not cond:
        raise Refused(message)


def check_config(arch, config, pkg, revision):
    c = config["config"]
    expect(platform_arch(config) == arch, "the config says %s" % platform_arch(config))
    expect(c.get("User") == "65532:65532", "User %r" % c.get("User"))
    expect(c.get("Entrypoint") == ["/mutantops"] and not c.get("Cmd"),
           "Entrypoint %r, Cmd %r" % (c.get("Entrypoint"), c.get("Cmd")))
    expect(sorted(c.get("ExposedPorts", {})) == ["8080/tcp", "9568/tcp"], "ExposedPorts %r" % c.get("ExposedPorts"))
    labels = c.get("Labels") or {}
    want = {"title": "mutantops", "description": pkg["description"], "version": pkg["version"],
            "revision": revision, "licenses": pkg["license"]}
    for key, value in want.items():
        got = labels.get("org.opencontainers.image." + key)
        expect(got == value, "label %s is %r, want %r (Cargo.toml, the commit)" % (key, got, value))
    expect(re.fullmatch(r"https://\S+", labels.get("org.opencontainers.image.source", "")), "source label")
    return "User %s, Entrypoint %s, ports %s, version %s, revision %s" % (
        c["User"], json.dumps(c["Entrypoint"]), " ".join(sorted(c["ExposedPorts"])),
        pkg["version"], revision[:12])


def check_tree(arch, layers):
    expect(len(layers) == 1, "%d layers, want 1" % len(layers))
    etc = os.path.join(REPO, "image", "operator", "etc")
    want = {  # name: (type, mode, uid, gid, content or None)
        "etc": (tarfile.DIRTYPE, 0o755, 0, 0, None),
        "etc/group": (tarfile.REGTYPE, 0o644, 0, 0, open(os.path.join(etc, "group"), "rb").read()),
        "etc/passwd": (tarfile.REGTYPE, 0o644, 0, 0, open(os.path.join(etc, "passwd"), "rb").read()),
        "home": (tarfile.DIRTYPE, 0o755, 0, 0, None),
        "home/nonroot": (tarfile.DIRTYPE, 0o700, 65532, 65532, None),
        "mutantops": (tarfile.REGTYPE, 0o755, 0, 0, None),
        "tmp": (tarfile.DIRTYPE, 0o1777, 0, 0, None),
    }
    got = {m.name.rstrip("/"): (m, data) for m, data in members(layers[0])}
    expect(sorted(got) == sorted(want), "entries %s, want %s" % (sorted(got), sorted(want)))
    for name, (kind, mode, uid, gid, content) in want.items():
        m, data = got[name]
        expect((m.type, m.mode & 0o7777, m.uid, m.gid) == (kind, mode, uid, gid),
               "/%s is (type %r, mode %o, %d:%d), want (type %r, mode %o, %d:%d)"
               % (name, m.type, m.mode & 0o7777, m.uid, m.gid, kind, mode, uid, gid))
        expect(content is None or data == content, "/%s is not image/operator/%s" % (name, name))
    binary = got["mutantops"][1]
    return "%d entries as the Containerfile says; /mutantops %d bytes, %s, static" % (
        len(got), len(binary), check_elf(arch, binary, "/mutantops"))


def run_binary(arch, root, argv):
    qemu = PLATFORMS[arch][4]
    cmd = ([shutil.which(qemu) or qemu] if qemu else []) + [os.path.join(root, "mutantops")] + argv
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "HOME": root})
    expect(res.returncode == 0, "mutantops %s exited %d: %s" % (" ".join(argv), res.returncode, res.stderr.strip()[-400:]))
    return res.stdout


def crd_docs(text):
    return sorted(d.strip() for d in text.split("\n---") if d.strip() and d.strip() != "---")


def cmd_check(args):
    pkg = cargo_package()
    version = pkg["version"]
    crds = "".join(open(os.path.join(args.crds, n)).read()
                   for n in sorted(os.listdir(args.crds)) if n.endswith(".yaml"))
    counts = {"passed": 0, "failed": 0}

    def run(what, fn, *fnargs):
        try:
            detail = fn(*fnargs)
        except (Refused, OSError, subprocess.SubprocessError, ValueError, KeyError, tarfile.TarError) as err:
            counts["failed"] += 1
            print("  FAIL  %s: %s" % (what, err), flush=True)
            return False
        counts["passed"] += 1
        print("  ok    %s%s" % (what, ": " + detail if detail else ""), flush=True)
        return True

    state = {}

    def layout():
        lay = Layout(os.path.join(args.dir, "oci"))
        top = lay.json("index.json")["manifests"][0]
        expect(top["mediaType"] == MT_INDEX, "index.json points to a %s" % top["mediaType"])
        expect(top.get("annotations", {}).get(REF) == version, "ref %r, want %r" % (top.get("annotations"), version))
        state["images"] = lay.images()
        return "%s:%s = %s, %s" % (args.dir + "/oci", version, top["digest"],
                                   ", ".join(PLATFORMS[i[0]][0] for i in state["images"]))

    if not run("the OCI layout and its blobs", layout):
        print("%d passed, %d failed" % (counts["passed"], counts["failed"]))
        return 1
    for arch, desc, _manifest, config, layers in state["images"]:
        plat = PLATFORMS[arch][0]
        run("%s: config" % plat, check_config, arch, config, pkg, args.revision)
        if run("%s: layer" % plat, check_tree, arch, layers) and not args.no_run:
            work = tempfile.mkdtemp(prefix="mutantops-check-")
            try:
                extract(layers[0], work)
                how = PLATFORMS[arch][4] or "natively"

                def version_check():
                    out = run_binary(arch, work, ["--version"]).strip()
                    expect(out == "mutantops " + version, "prints %r, want %r" % (out, "mutantops " + version))
                    return "%r (%s)" % (out, how)

                def crd_check():
                    out = crd_docs(run_binary(arch, work, ["crd"]))
                    expect(out == crd_docs(crds), "differs from deploy/crds/")
                    return "equal to deploy/crds/ (%d documents, %s)" % (len(out), how)

                run("%s: mutantops --version" % plat, version_check)
                run("%s: mutantops crd" % plat, crd_check)
            finally:
                shutil.rmtree(work, ignore_errors=True)

        def archive():
            path = os.path.join(args.dir, "mutantops-%s-linux-%s.tar" % (version, arch))
            a = Layout(path)
            (got, got_desc, _m, _c, _l), = a.images()
            ref = a.json("index.json")["manifests"][0].get("annotations", {}).get(REF, "")
            expect(got == arch and got_desc["digest"] == desc["digest"],
                   "holds %s %s, the OCI layout has %s" % (got, got_desc["digest"], desc["digest"]))
            expect(ref.endswith(":" + version) and "/" in ref, "ref %r is not REPO:%s" % (ref, version))
            tags = [t for e in a.json("manifest.json") for t in e["RepoTags"]]
            expect(tags == [ref], "manifest.json's RepoTags %r, want [%r]" % (tags, ref))
            return "%s: %s, %s" % (os.path.basename(path), desc["digest"], ref)

        run("%s: archive" % plat, archive)
    print("%d passed, %d failed" % (counts["passed"], counts["failed"]))
    return 1 if counts["failed"] else 0


def cmd_unpack(args):
    (_arch, _d, _m, config, layers), = Layout(args.file).images()
    for layer in layers:
        extract(layer, args.dest)
    for arg in (config["config"].get("Entrypoint") or []) + (config["config"].get("Cmd") or []):
        print(arg)


def main(argv):
    ap = argparse.ArgumentParser(prog="check.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("elf")
    p.add_argument("arch")
    p.add_argument("file")
    sub.add_parser("summary").add_argument("dir")
    p = sub.add_parser("check")
    p.add_argument("dir")
    p.add_argument("--revision", required=True)
    p.add_argument("--crds", required=True)
    p.add_argument("--no-run", action="store_true")
    p = sub.add_parser("unpack")
    p.add_argument("file")
    p.add_argument("dest")
    args = ap.parse_args(argv)
    fn = {"elf": cmd_elf, "summary": cmd_summary, "check": cmd_check, "unpack": cmd_unpack}[args.cmd]
    return fn(args) or 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Refused as err:
        print("error: %s" % err, file=sys.stderr)
        sys.exit(1)
