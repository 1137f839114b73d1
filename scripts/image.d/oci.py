#!/usr/bin/env python3
"""The image writer behind scripts/image: OCI images written from scratch, byte for byte
reproducible, with the Python standard library only.

    oci.py build   --out DIR --revision SHA --epoch SECONDS --binary ARCH=FILE... [--name REPO] [--source URL]
    oci.py rootfs  --out DIR --revision SHA --epoch SECONDS --binary ARCH=FILE...
    oci.py check   DIR --revision SHA --crds DIR
    oci.py pause   --out DIR --epoch SECONDS --binary FILE
    oci.py standin --out DIR --epoch SECONDS --busybox FILE
    oci.py elf     ARCH FILE                 refuse FILE unless it is a static binary for ARCH
    oci.py platforms DIR                     the platforms of DIR/oci, one a line
    oci.py archive-digest FILE               the manifest digest an archive's index.json names
    oci.py unpack  FILE DEST                 unpack an archive's layer; print its Entrypoint, Cmd
    oci.py containerfile FILE DIR [--rootfs D]  the Containerfile's USER, ENTRYPOINT, EXPOSE
                                             and LABEL against the config of DIR/oci; D's
                                             rootfs-linux-<arch>.tar against its layers

ARCH is amd64, arm64 or armv7 (also linux/amd64, linux/arm64, linux/arm/v7 or the Rust
target). The version, description, licence and source come from Cargo.toml.

What makes the bytes reproducible: tar entries sorted by path, one fixed mtime (the epoch),
numeric owners and no user or group names, USTAR headers written here field by field (not by
tarfile, whose headers differ between Python versions); gzip written here too (header with
mtime 0, no file name, XFL 2, OS 255) around zlib's raw deflate at level 9, so the bytes
depend on the binaries, the commit and the deflate of the zlib in use (zlib-ng, for one,
compresses differently), not on the Python version (3.8 to 3.13 give the same digests); JSON
with sorted keys, no spaces and ASCII only. Nothing of the build machine (time, user, umask,
file modes or mtimes of the inputs) reaches the output.
"""

import argparse
import os
import re
import subprocess
import sys

from ocimodel import (
    ARCH_ORDER,
    DEFAULT_NAME,
    Entry,
    Image,
    MT_INDEX,
    PAUSE_NAME,
    PLATFORMS,
    Refused,
    STANDIN_CGI,
    STANDIN_NAME,
    STANDIN_PORT,
    STANDIN_SCRIPT,
    arch_of,
    archive_bytes,
    cargo_package,
    check_binary,
    cjson,
    describe_elf,
    descriptor,
    host_arch,
    layout_files,
    mib,
    name_annotations,
    operator_config,
    operator_labels,
    operator_tree,
    rfc3339,
    sha256,
    write_file,
    write_layout,
)
from ocicheck import (
    cmd_archive_digest,
    cmd_check,
    cmd_containerfile,
    cmd_platforms,
    cmd_unpack,
)


# --- commands ---------------------------------------------------------------------------------


def read_binaries(specs):
    """[(arch, path, bytes)] in platform order from ARCH=FILE arguments, each checked."""
    chosen = {}
    for spec in specs:
        if "=" not in spec:
            raise Refused("--binary wants PLATFORM=FILE, got %r" % spec)
        name, path = spec.split("=", 1)
        arch = arch_of(name)
        if arch in chosen:
            raise Refused("two binaries for %s" % PLATFORMS[arch]["platform"])
        chosen[arch] = path
    if not chosen:
        raise Refused("no binaries given")
    out = []
    for arch in ARCH_ORDER:
        if arch in chosen:
            path = chosen[arch]
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError as err:
                raise Refused("%s: %s" % (PLATFORMS[arch]["platform"], err)) from None
            check_binary(arch, data, path)
            out.append((arch, path, data))
    return out


def operator_images(args):
    pkg = cargo_package()
    source = args.source or pkg["repository"]
    labels = operator_labels(pkg, args.revision, source)
    images = []
    for arch, _path, data in read_binaries(args.binary):
        images.append(Image(arch, operator_tree(data), operator_config(labels), args.epoch,
                            "scripts/image: /mutantops for %s" % PLATFORMS[arch]["platform"]))
    return pkg, labels, images


def cmd_build(args):
    pkg, labels, images = operator_images(args)
    version = pkg["version"]
    name = args.name
    os.makedirs(args.out, exist_ok=True)

    index_annotations = dict(labels)
    index_annotations["org.opencontainers.image.created"] = rfc3339(args.epoch)
    index = cjson({
        "schemaVersion": 2,
        "mediaType": MT_INDEX,
        "manifests": [img.descriptor() for img in images],
        "annotations": index_annotations,
    })
    blobs = {sha256(index): index}
    for img in images:
        blobs.update(img.blobs)
    entry = descriptor(MT_INDEX, index, annotations=name_annotations(name, version))
    write_layout(os.path.join(args.out, "oci"), layout_files(entry, blobs))

    archives = []
    made = set()
    for img in images:
        file_name = "mutantops-%s-linux-%s.tar" % (version, img.arch)
        write_file(os.path.join(args.out, file_name), archive_bytes(img, name, version, args.epoch))
        archives.append(file_name)
        made.add(file_name)
    # An archive of a platform not built this time would be stale: remove it.
    for old in os.listdir(args.out):
        if re.fullmatch(r"mutantops-.+-linux-(amd64|arm64|armv7)\.tar", old) and old not in made:
            os.remove(os.path.join(args.out, old))

    print("image %s:%s (revision %s, created %s)" % (name, version, args.revision, rfc3339(args.epoch)))
    print("%-13s %-73s %10s %10s" % ("platform", "manifest", "layer gz", "unpacked"))
    for img in images:
        print("%-13s %-73s %10d %10d  (%s, %s)" % (
            PLATFORMS[img.arch]["platform"], sha256(img.manifest), len(img.layer_gz),
            len(img.layer_tar), mib(len(img.layer_gz)), mib(len(img.layer_tar))))
    print("%-13s %s" % ("index", sha256(index)))
    print("wrote %s/oci (ref %s) and %s" % (args.out, version, ", ".join(archives)))
    return 0


def cmd_rootfs(args):
    _pkg, _labels, images = operator_images(args)
    os.makedirs(args.out, exist_ok=True)
    for img in images:
        path = os.path.join(args.out, "rootfs-linux-%s.tar" % img.arch)
        write_file(path, img.layer_tar)
        print("%s  %s (%d bytes; the layer of %s)" % (img.diff_id, path, len(img.layer_tar),
                                                      PLATFORMS[img.arch]["platform"]))
    return 0


def helper_image(args, arch, entries, config_body, name, file_name):
    tag = name.rsplit(":", 1)[1]
    img = Image(arch, entries, config_body, args.epoch, "scripts/image: %s" % name)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, file_name)
    write_file(path, archive_bytes(img, name.rsplit(":", 1)[0], tag, args.epoch))
    print("%-32s %-13s %s  layer %d gz, %d unpacked  -> %s" % (
        name, PLATFORMS[arch]["platform"], sha256(img.manifest), len(img.layer_gz),
        len(img.layer_tar), path))
    return 0


def cmd_pause(args):
    arch = host_arch()
    with open(args.binary, "rb") as f:
        data = f.read()
    check_binary(arch, data, args.binary)
    entries = [Entry("pause", "file", 0o755, data=data)]
    config = {"User": "65535:65535", "Entrypoint": ["/pause"]}
    return helper_image(args, arch, entries, config, PAUSE_NAME, "pause.tar")


def cmd_standin(args):
    arch = host_arch()
    with open(args.busybox, "rb") as f:
        data = f.read()
    check_binary(arch, data, args.busybox)
    applets = subprocess.run([args.busybox, "--list"], check=True, capture_output=True,
                             text=True).stdout.split()
    if "httpd" not in applets or "sh" not in applets or "env" not in applets:
        raise Refused("%s lacks httpd, sh or env" % args.busybox)
    entries = [
        Entry("bin", "dir", 0o755),
        Entry("bin/busybox", "file", 0o755, data=data),
        Entry("etc", "dir", 0o755),
        Entry("etc/group", "file", 0o644, data=b"root:x:0:\nnogroup:x:65534:\n"),
        Entry("etc/passwd", "file", 0o644,
              data=b"root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"),
        Entry("tmp", "dir", 0o1777),
        Entry("www", "dir", 0o755),
        Entry("www/cgi-bin", "dir", 0o755),
        Entry("www/cgi-bin/env", "file", 0o755, data=STANDIN_CGI.encode()),
        Entry("www/cgi-bin/index.cgi", "symlink", 0o777, link="env"),
    ]
    entries += [Entry("bin/" + a, "symlink", 0o777, link="busybox")
                for a in sorted(set(applets)) if a != "busybox" and "/" not in a]
    config = {
        "Entrypoint": ["/bin/sh", "-c", STANDIN_SCRIPT],
        "Env": ["PATH=/bin"],
        "ExposedPorts": {"%d/tcp" % STANDIN_PORT: {}},
        "WorkingDir": "/",
        "Labels": {
            "org.opencontainers.image.title": "mutantops-standin",
            "org.opencontainers.image.description":
                "busybox httpd answering GET / and /cgi-bin/env with its environment, sorted",
        },
    }
    return helper_image(args, arch, entries, config, STANDIN_NAME, "standin.tar")


def cmd_elf(args):
    arch = arch_of(args.arch)
    with open(args.file, "rb") as f:
        info = check_binary(arch, f.read(), args.file)
    print("%s: %s, static" % (args.file, describe_elf(info)))
    return 0


# --- main -------------------------------------------------------------------------------------


def main(argv):
    ap = argparse.ArgumentParser(prog="oci.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, out=True):
        if out:
            p.add_argument("--out", required=True)
        p.add_argument("--epoch", type=int, required=True)

    for name in ("build", "rootfs"):
        p = sub.add_parser(name)
        common(p)
        p.add_argument("--revision", required=True)
        p.add_argument("--binary", action="append", default=[])
        p.add_argument("--name", default=DEFAULT_NAME)
        p.add_argument("--source", default="")
    p = sub.add_parser("check")
    p.add_argument("dir")
    p.add_argument("--revision", required=True)
    p.add_argument("--crds", required=True)
    p = sub.add_parser("pause")
    common(p)
    p.add_argument("--binary", required=True)
    p = sub.add_parser("standin")
    common(p)
    p.add_argument("--busybox", required=True)
    p = sub.add_parser("elf")
    p.add_argument("arch")
    p.add_argument("file")
    p = sub.add_parser("platforms")
    p.add_argument("dir")
    p = sub.add_parser("unpack")
    p.add_argument("file")
    p.add_argument("dest")
    p = sub.add_parser("archive-digest")
    p.add_argument("file")
    p = sub.add_parser("containerfile")
    p.add_argument("containerfile")
    p.add_argument("dir")
    p.add_argument("--rootfs", default="")

    args = ap.parse_args(argv)
    if getattr(args, "revision", None) is not None and not re.fullmatch(r"[0-9a-f]{40}", args.revision):
        raise Refused("--revision wants a full commit hash, got %r" % args.revision)
    if getattr(args, "name", None) is not None and not re.fullmatch(r"[a-z0-9][a-z0-9._/:-]*[a-z0-9]", args.name):
        raise Refused("--name %r is not a lower-case image repository" % args.name)
    fn = {
        "build": cmd_build, "rootfs": cmd_rootfs, "check": cmd_check, "pause": cmd_pause,
        "standin": cmd_standin, "elf": cmd_elf, "platforms": cmd_platforms,
        "archive-digest": cmd_archive_digest, "unpack": cmd_unpack, "containerfile": cmd_containerfile,
    }[args.cmd]
    return fn(args)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Refused as err:
        print("error: %s" % err, file=sys.stderr)
        sys.exit(1)
