#!/usr/bin/env python3
"""scripts/image reading its images back: the layout, each platform's config and layer tree,
its binary run (ARM under qemu), the archives, and the Containerfile against the config."""

import calendar
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import zlib

from ocimodel import (
    ANN_NAME,
    ANN_REF,
    ARCH_ORDER,
    MT_CONFIG,
    MT_INDEX,
    MT_LAYER,
    MT_MANIFEST,
    OPERATOR_ENTRYPOINT,
    OPERATOR_PORTS,
    OPERATOR_USER,
    PLATFORMS,
    Refused,
    arch_of,
    cargo_package,
    check_binary,
    operator_labels,
    operator_tree,
    platform_fields,
    sha256,
)


# --- reading back -----------------------------------------------------------------------------


class Layout:
    """An OCI image layout on disk or in an archive, every blob read checked against its
    descriptor."""

    def __init__(self, files, where):
        self.files, self.where = files, where

    @classmethod
    def from_dir(cls, directory):
        files = {}
        for root, _dirs, names in os.walk(directory):
            for n in names:
                full = os.path.join(root, n)
                with open(full, "rb") as f:
                    files[os.path.relpath(full, directory)] = f.read()
        return cls(files, directory)

    @classmethod
    def from_tar(cls, path):
        files = {}
        with tarfile.open(path) as tf:
            for m in tf.getmembers():
                if m.isfile():
                    files[m.name] = tf.extractfile(m).read()
        return cls(files, path)

    def json(self, path):
        if path not in self.files:
            raise Refused("%s: no %s" % (self.where, path))
        return json.loads(self.files[path])

    def blob(self, desc):
        algo, hexd = desc["digest"].split(":", 1)
        path = "blobs/%s/%s" % (algo, hexd)
        if path not in self.files:
            raise Refused("%s: blob %s is missing" % (self.where, desc["digest"]))
        data = self.files[path]
        if sha256(data) != desc["digest"] or len(data) != desc["size"]:
            raise Refused("%s: blob %s does not match its descriptor (sha256 %s, %d bytes, not %d)"
                          % (self.where, desc["digest"], sha256(data), len(data), desc["size"]))
        return data


def gunzip(data):
    return zlib.decompress(data, 31)


def layer_entries(layer_tar):
    out = []
    with tarfile.open(fileobj=io.BytesIO(layer_tar)) as tf:
        for m in tf.getmembers():
            data = tf.extractfile(m).read() if m.isfile() else b""
            out.append((m, data))
    return out


def cmd_platforms(args):
    lay = Layout.from_dir(os.path.join(args.dir, "oci"))
    outer = lay.json("index.json")
    for d in outer["manifests"]:
        for m in json.loads(lay.blob(d))["manifests"]:
            print(arch_of("/".join(filter(None, [m["platform"]["os"], m["platform"]["architecture"],
                                                   m["platform"].get("variant")]))))
    return 0


def cmd_unpack(args):
    """Unpacks the layer of an archive's one image into DEST; prints its Entrypoint and Cmd,
    one argument a line."""
    lay = Layout.from_tar(args.file)
    manifest = json.loads(lay.blob(lay.json("index.json")["manifests"][0]))
    config = json.loads(lay.blob(manifest["config"]))
    for layer in manifest["layers"]:
        extract(gunzip(lay.blob(layer)), args.dest)
    for arg in (config["config"].get("Entrypoint") or []) + (config["config"].get("Cmd") or []):
        print(arg)
    return 0


def cmd_archive_digest(args):
    lay = Layout.from_tar(args.file)
    print(lay.json("index.json")["manifests"][0]["digest"])
    return 0


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def run(self, what, fn, *fnargs):
        """Runs fn; it returns a detail string (pass) or raises Refused/AssertionError (fail)."""
        try:
            detail = fn(*fnargs)
        except (Refused, AssertionError, OSError, subprocess.SubprocessError, ValueError,
                KeyError) as err:
            self.failed += 1
            print("  FAIL  %s: %s" % (what, err or type(err).__name__), flush=True)
            return False
        self.passed += 1
        print("  ok    %s%s" % (what, ": " + detail if detail else ""), flush=True)
        return True


def expect(cond, message):
    if not cond:
        raise AssertionError(message)


def crd_docs(text):
    """The YAML documents of a stream, stripped and sorted (as scripts/edge compares them)."""
    return sorted(d.strip() for d in text.split("\n---") if d.strip() and d.strip() != "---")


def check_tree(arch, layer_tar, config_created):
    members = layer_entries(layer_tar)
    names = [m.name for m, _ in members]
    expect(names == sorted(names, key=lambda n: n.split("/")), "entries not sorted: %s" % names)
    binary = dict((m.name, d) for m, d in members).get("mutantops", b"")
    want = {e.name: e for e in operator_tree(binary)}
    expect(sorted(names) == sorted(want), "entries %s, want %s" % (names, sorted(want)))
    epoch = calendar.timegm(time.strptime(config_created, "%Y-%m-%dT%H:%M:%SZ"))
    types = {"dir": tarfile.DIRTYPE, "file": tarfile.REGTYPE}
    for m, data in members:
        e = want[m.name]
        got = (m.type, m.mode, m.uid, m.gid, m.uname, m.gname)
        exp = (types[e.kind], e.mode, e.uid, e.gid, "", "")
        expect(got == exp, "/%s is (type %r, mode %o, %d:%d, %r:%r), want (type %r, mode %o, %d:%d, no names)"
               % ((m.name, got[0], got[1], got[2], got[3], got[4], got[5]) + exp[:4]))
        expect(m.mtime == epoch, "/%s has mtime %d, not the config's created (%d)" % (m.name, m.mtime, epoch))
        if e.kind == "file" and m.name != "mutantops":
            expect(data == e.data, "/%s holds %r, want %r" % (m.name, data, e.data))
    check_binary(arch, binary, "/mutantops")
    return "%d entries; /mutantops %d bytes, 0755 0:0; /home/nonroot 0700 65532:65532; /tmp 1777" % (
        len(names), len(binary))


def check_config(arch, cfg, diff_id, pkg, revision):
    for key, value in platform_fields(arch).items():
        expect(cfg.get(key) == value, "%s is %r, want %r" % (key, cfg.get(key), value))
    expect("variant" in cfg or not PLATFORMS[arch].get("variant"), "no variant")
    expect(cfg["rootfs"] == {"type": "layers", "diff_ids": [diff_id]},
           "rootfs %r, want the layer's sha256 %s" % (cfg["rootfs"], diff_id))
    c = cfg["config"]
    expect(c.get("User") == OPERATOR_USER, "User %r" % c.get("User"))
    expect(c.get("Entrypoint") == OPERATOR_ENTRYPOINT, "Entrypoint %r" % c.get("Entrypoint"))
    expect(c.get("Cmd") in (None, []), "Cmd %r" % c.get("Cmd"))
    expect(sorted(c.get("ExposedPorts", {})) == OPERATOR_PORTS, "ExposedPorts %r" % c.get("ExposedPorts"))
    expect(c.get("WorkingDir") in (None, "", "/"), "WorkingDir %r" % c.get("WorkingDir"))
    expect(not c.get("Env"), "Env %r (the binary needs none)" % c.get("Env"))
    labels = c.get("Labels", {})
    source = labels.get("org.opencontainers.image.source", "")
    want = operator_labels(pkg, revision, source)
    expect(labels == want, "labels %r, want %r" % (labels, want))
    expect(re.fullmatch(r"https://\S+", source), "source label %r" % source)
    expect(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", cfg.get("created", "")),
           "created %r" % cfg.get("created"))
    return "%s, User %s, Entrypoint %s, ports %s, version %s, revision %s" % (
        PLATFORMS[arch]["platform"], c["User"], json.dumps(c["Entrypoint"]),
        " ".join(sorted(c["ExposedPorts"])), labels["org.opencontainers.image.version"],
        labels["org.opencontainers.image.revision"][:12])


def run_binary(arch, root, argv):
    qemu = PLATFORMS[arch]["qemu"]
    binary = os.path.join(root, "mutantops")
    cmd = ([shutil.which(qemu) or qemu] if qemu else []) + [binary] + argv
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "HOME": root})
    if res.returncode != 0:
        raise Refused("%s exited %d: %s" % (" ".join(["mutantops"] + argv), res.returncode,
                                            res.stderr.strip()[-400:]))
    return res.stdout


def extract(layer_tar, dest):
    with tarfile.open(fileobj=io.BytesIO(layer_tar)) as tf:
        if hasattr(tarfile, "data_filter"):
            tf.extractall(dest, filter="tar")
        else:
            tf.extractall(dest)


def cmd_check(args):
    pkg = cargo_package()
    version = pkg["version"]
    crds = "".join(open(os.path.join(args.crds, n)).read()
                   for n in sorted(os.listdir(args.crds)) if n.endswith(".yaml"))
    checks = Checks()
    lay = Layout.from_dir(os.path.join(args.dir, "oci"))
    state = {}

    def outer():
        expect(lay.json("oci-layout") == {"imageLayoutVersion": "1.0.0"}, "oci-layout")
        idx = lay.json("index.json")
        expect(len(idx["manifests"]) == 1, "index.json has %d entries, want 1" % len(idx["manifests"]))
        d = idx["manifests"][0]
        expect(d["mediaType"] == MT_INDEX, "index.json points to a %s" % d["mediaType"])
        ann = d.get("annotations", {})
        expect(ann.get(ANN_REF) == version, "ref.name %r, want %r" % (ann.get(ANN_REF), version))
        expect(ann.get(ANN_NAME, "").endswith(":" + version), "image name %r" % ann.get(ANN_NAME))
        image_index = json.loads(lay.blob(d))
        expect(image_index.get("mediaType") == MT_INDEX, "the image index's mediaType")
        archs = [arch_of("/".join(filter(None, [m["platform"]["os"], m["platform"]["architecture"],
                                               m["platform"].get("variant")])))
                 for m in image_index["manifests"]]
        expect(archs == [a for a in ARCH_ORDER if a in archs], "platforms out of order: %s" % archs)
        state.update(index=image_index, name=ann[ANN_NAME], digest=d["digest"], archs=archs)
        return "%s = %s, %s" % (ann[ANN_NAME], d["digest"],
                                ", ".join(PLATFORMS[a]["platform"] for a in archs))

    if not checks.run("%s/oci: index" % args.dir, outer):
        print("%d passed, %d failed" % (checks.passed, checks.failed))
        return 1

    for m in state["index"]["manifests"]:
        arch = arch_of("/".join(filter(None, [m["platform"]["os"], m["platform"]["architecture"],
                                             m["platform"].get("variant")])))
        plat = PLATFORMS[arch]["platform"]
        got = {}

        def blobs():
            manifest = json.loads(lay.blob(m))
            expect(manifest["mediaType"] == MT_MANIFEST and manifest["config"]["mediaType"] == MT_CONFIG,
                   "media types")
            expect(len(manifest["layers"]) == 1, "%d layers, want 1" % len(manifest["layers"]))
            expect(manifest["layers"][0]["mediaType"] == MT_LAYER, "layer media type")
            got["config"] = json.loads(lay.blob(manifest["config"]))
            gz = lay.blob(manifest["layers"][0])
            got["layer"] = gunzip(gz)
            return "manifest %s, layer %d bytes gzip, %d unpacked" % (m["digest"], len(gz), len(got["layer"]))

        if not checks.run("%s: blobs match their digests" % plat, blobs):
            continue
        checks.run("%s: config" % plat, check_config, arch, got["config"], sha256(got["layer"]), pkg,
                   args.revision)
        checks.run("%s: layer tree" % plat, check_tree, arch, got["layer"], got["config"].get("created", ""))

        work = tempfile.mkdtemp(prefix="mutantops-check-")
        try:
            extract(got["layer"], work)
            runner = PLATFORMS[arch]["qemu"] or "natively"

            def version_check():
                out = run_binary(arch, work, ["--version"]).strip()
                expect(out == "mutantops %s" % version, "prints %r, want %r" % (out, "mutantops " + version))
                return "%r (%s)" % (out, runner)

            def crd_check():
                out = run_binary(arch, work, ["crd"])
                expect(crd_docs(out) == crd_docs(crds),
                       "differs from deploy/crds/ (%d documents, deploy/crds/ has %d)"
                       % (len(crd_docs(out)), len(crd_docs(crds))))
                n = sum("\nkind: CustomResourceDefinition\n" in d for d in crd_docs(out))
                return "equal to deploy/crds/ (%d CRDs, %s)" % (n, runner)

            checks.run("%s: mutantops --version" % plat, version_check)
            checks.run("%s: mutantops crd" % plat, crd_check)
        finally:
            shutil.rmtree(work, ignore_errors=True)

        archive = os.path.join(args.dir, "mutantops-%s-linux-%s.tar" % (version, arch))

        def archive_check():
            a = Layout.from_tar(archive)
            expect(a.json("oci-layout") == {"imageLayoutVersion": "1.0.0"}, "oci-layout")
            idx = a.json("index.json")["manifests"]
            expect(len(idx) == 1, "index.json has %d manifests, want 1" % len(idx))
            d = idx[0]
            expect(d["digest"] == m["digest"], "holds manifest %s, the OCI layout has %s" % (d["digest"], m["digest"]))
            ann = d.get("annotations", {})
            expect(ann == {ANN_NAME: state["name"], ANN_REF: version}, "annotations %r" % ann)
            manifest = json.loads(a.blob(d))
            a.blob(manifest["config"])
            a.blob(manifest["layers"][0])
            mj = a.json("manifest.json")
            cfg_path = "blobs/sha256/" + manifest["config"]["digest"].split(":")[1]
            layer_path = "blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1]
            expect(mj == [{"Config": cfg_path, "RepoTags": [state["name"]], "Layers": [layer_path]}],
                   "manifest.json %r" % mj)
            return "%s: %s, RepoTags %s" % (os.path.basename(archive), d["digest"], state["name"])

        checks.run("%s: archive" % plat, archive_check)

    print("%d passed, %d failed" % (checks.passed, checks.failed))
    return 1 if checks.failed else 0


# --- the Containerfile ------------------------------------------------------------------------


def containerfile_instructions(text):
    """(INSTRUCTION, arguments) of a Containerfile: comments dropped, continuations joined."""
    out, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        if current:
            word, _, rest = current.partition(" ")
            out.append((word.upper(), rest.strip()))
        current = ""
    return out


def cmd_containerfile(args):
    import shlex

    pkg = cargo_package()
    with open(args.containerfile) as f:
        instrs = containerfile_instructions(f.read())
    lay = Layout.from_dir(os.path.join(args.dir, "oci"))
    image_index = json.loads(lay.blob(lay.json("index.json")["manifests"][0]))
    m = image_index["manifests"][0]
    cfg = json.loads(lay.blob(json.loads(lay.blob(m))["config"]))
    c = cfg["config"]
    labels = c["Labels"]
    # The build arguments scripts/image's values stand for (see the Containerfile's header).
    build_args = {
        "VERSION": labels["org.opencontainers.image.version"],
        "REVISION": labels["org.opencontainers.image.revision"],
        "SOURCE": labels["org.opencontainers.image.source"],
    }

    def subst(value):
        return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda mo: build_args.get(mo.group(1) or mo.group(2), mo.group(0)), value)

    problems, seen = [], {}
    froms = [a for i, a in instrs if i == "FROM"]
    if froms != ["scratch"]:
        problems.append("FROM is %r, want one FROM scratch" % froms)
    user = [a for i, a in instrs if i == "USER"]
    seen["USER"] = user
    if user != [c["User"]]:
        problems.append("USER %r, the image has %r" % (user, c["User"]))
    ep = [json.loads(a) for i, a in instrs if i == "ENTRYPOINT"]
    seen["ENTRYPOINT"] = ep
    if ep != [c["Entrypoint"]]:
        problems.append("ENTRYPOINT %r, the image has %r" % (ep, c["Entrypoint"]))
    ports = []
    for i, a in instrs:
        if i == "EXPOSE":
            ports += [p if "/" in p else p + "/tcp" for p in a.split()]
    seen["EXPOSE"] = ports
    if sorted(ports) != sorted(c["ExposedPorts"]):
        problems.append("EXPOSE %r, the image has %r" % (ports, sorted(c["ExposedPorts"])))
    cf_labels = {}
    for i, a in instrs:
        if i == "LABEL":
            for word in shlex.split(a):
                k, _, v = word.partition("=")
                cf_labels[k] = subst(v)
    seen["LABEL"] = sorted(cf_labels)
    if cf_labels != labels:
        for k in sorted(set(cf_labels) | set(labels)):
            if cf_labels.get(k) != labels.get(k):
                problems.append("LABEL %s=%r, the image has %r" % (k, cf_labels.get(k), labels.get(k)))
    for key in ("Env", "Cmd", "WorkingDir", "Volumes", "StopSignal"):
        if c.get(key):
            problems.append("the image has %s, the Containerfile does not set it" % key)
    for i in ("ENV", "CMD", "WORKDIR", "VOLUME", "STOPSIGNAL", "RUN", "COPY", "HEALTHCHECK", "SHELL"):
        if any(j == i for j, _ in instrs):
            problems.append("the Containerfile has %s, the image nothing of the kind" % i)
    # Its one filesystem step adds scripts/image's layer tar (rootfs-linux-<arch>.tar).
    adds = [a for i, a in instrs if i == "ADD"]
    if len(adds) != 1 or not re.fullmatch(
            r"dist/rootfs-linux-\$\{TARGETARCH\}\$\{TARGETVARIANT\}\.tar /", adds[0]):
        problems.append("ADD %r, want one `ADD dist/rootfs-linux-${TARGETARCH}${TARGETVARIANT}.tar /`" % adds)
    if args.rootfs:
        for arch in ARCH_ORDER:
            path = os.path.join(args.rootfs, "rootfs-linux-%s.tar" % arch)
            if not os.path.exists(path):
                continue
            with open(path, "rb") as f:
                got = sha256(f.read())
            for mm in image_index["manifests"]:
                if mm["platform"] == platform_fields(arch):
                    want = json.loads(lay.blob(json.loads(lay.blob(mm))["config"]))["rootfs"]["diff_ids"][0]
                    if got != want:
                        problems.append("%s is %s, the layer of %s is %s" % (path, got, PLATFORMS[arch]["platform"], want))
    if pkg["version"] != build_args["VERSION"]:
        problems.append("the image's version label is not Cargo.toml's %s" % pkg["version"])
    for p in problems:
        print("  %s" % p)
    if problems:
        return 1
    print("  USER %s; ENTRYPOINT %s; EXPOSE %s; LABEL %s; ADD of the layer tar"
          % (user[0], json.dumps(ep[0]), " ".join(ports), " ".join(k.rsplit(".", 1)[1] for k in sorted(cf_labels))))
    return 0
