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
import calendar
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
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
ANN_NAME = "io.containerd.image.name"
ANN_REF = "org.opencontainers.image.ref.name"

DEFAULT_NAME = "ghcr.io/neiam/mutantops"

# arch key -> the platform, the Rust target and what its ELF header must say
PLATFORMS = {
    "amd64": {
        "platform": "linux/amd64",
        "os": "linux",
        "architecture": "amd64",
        "target": "x86_64-unknown-linux-musl",
        "elf_class": 64,
        "machine": 62,
        "qemu": None,
    },
    "arm64": {
        "platform": "linux/arm64",
        "os": "linux",
        "architecture": "arm64",
        "target": "aarch64-unknown-linux-musl",
        "elf_class": 64,
        "machine": 183,
        "qemu": "qemu-aarch64-static",
    },
    "armv7": {
        "platform": "linux/arm/v7",
        "os": "linux",
        "architecture": "arm",
        "variant": "v7",
        "target": "armv7-unknown-linux-musleabihf",
        "elf_class": 32,
        "machine": 40,
        "qemu": "qemu-arm-static",
    },
}
ARCH_ORDER = ["amd64", "arm64", "armv7"]
MACHINE_NAMES = {3: "i386", 8: "MIPS", 20: "PowerPC", 21: "PowerPC64", 22: "s390", 40: "ARM",
                 62: "x86-64", 183: "aarch64", 243: "RISC-V"}

# The operator image (the Containerfile says the same; `containerfile` compares them).
OPERATOR_USER = "65532:65532"
OPERATOR_ENTRYPOINT = ["/mutantops"]
OPERATOR_PORTS = ["8080/tcp", "9568/tcp"]
NONROOT = 65532
PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
)
GROUP = "root:x:0:\nnonroot:x:65532:\n"

PAUSE_NAME = "registry.k8s.io/pause:3.10"
STANDIN_NAME = "localhost/mutantops-standin:1"
STANDIN_PORT = 80
# GET /cgi-bin/env, and GET / (busybox httpd runs /cgi-bin/index.cgi for a directory without
# index.html), answer the environment of the process, sorted.
STANDIN_CGI = (
    "#!/bin/sh\n"
    "# The environment this container runs with (plus the CGI variables httpd adds), sorted.\n"
    "printf 'Content-Type: text/plain\\r\\n\\r\\n'\n"
    "env | sort\n"
)
STANDIN_SCRIPT = 'exec httpd -f -v -p "${PORT:-%d}" -h /www' % STANDIN_PORT


class Refused(Exception):
    """An input or output that must not make an image: the message says what and why."""


# --- bytes ------------------------------------------------------------------------------------


def cjson(obj):
    """Canonical JSON: sorted keys, no whitespace, ASCII."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def descriptor(media_type, data, **extra):
    d = {"mediaType": media_type, "digest": sha256(data), "size": len(data)}
    d.update(extra)
    return d


def gzip_bytes(data):
    """gzip (RFC 1952) of data: fixed header, zlib's raw deflate at level 9, CRC and size."""
    header = b"\x1f\x8b\x08\x00" + b"\x00\x00\x00\x00" + b"\x02\xff"
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15, 8, zlib.Z_DEFAULT_STRATEGY)
    body = deflate.compress(data) + deflate.flush()
    trailer = struct.pack("<II", zlib.crc32(data) & 0xFFFFFFFF, len(data) & 0xFFFFFFFF)
    return header + body + trailer


class Entry:
    """One file system entry of a layer or archive: kind is dir, file or symlink."""

    def __init__(self, name, kind, mode, uid=0, gid=0, data=b"", link=""):
        self.name, self.kind, self.mode = name.strip("/"), kind, mode
        self.uid, self.gid, self.data, self.link = uid, gid, data, link

    def key(self):
        return self.name.split("/")


def _octal(n, width):
    """A numeric tar header field: zero-padded octal and a NUL."""
    text = b"%0*o" % (width - 1, n)
    if len(text) != width - 1:
        raise Refused("%d does not fit a tar header field of %d bytes" % (n, width))
    return text + b"\0"


def _field(text, width):
    raw = text.encode()
    if len(raw) > width:
        raise Refused("%r is longer than %d bytes: too long for a tar header" % (text, width))
    return raw.ljust(width, b"\0")


def tar_header(e, name, mtime, size):
    """A USTAR header, written here field by field so that no library version changes it."""
    typeflag = {"file": b"0", "symlink": b"2", "dir": b"5"}[e.kind]
    head = (_field(name, 100) + _octal(e.mode & 0o7777, 8) + _octal(e.uid, 8) + _octal(e.gid, 8)
            + _octal(size, 12) + _octal(mtime, 12) + b" " * 8 + typeflag + _field(e.link, 100)
            + b"ustar\0" + b"00" + b"\0" * 32 + b"\0" * 32 + b"\0" * 8 + b"\0" * 8 + b"\0" * 155)
    head = head.ljust(512, b"\0")
    checksum = b"%06o\0 " % sum(head)
    return head[:148] + checksum + head[156:]


def tar_bytes(entries, mtime):
    """A tar of entries sorted by path: USTAR headers, numeric owners, no user or group
    names, one mtime; directories end in /. Two zero blocks end it, padded to 10240 bytes."""
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise Refused("duplicate tar entries: %s" % sorted(n for n in names if names.count(n) > 1))
    out = []
    for e in sorted(entries, key=Entry.key):
        if e.kind not in ("file", "symlink", "dir"):
            raise ValueError(e.kind)
        data = e.data if e.kind == "file" else b""
        out.append(tar_header(e, e.name + "/" if e.kind == "dir" else e.name, mtime, len(data)))
        out.append(data + b"\0" * (-len(data) % 512))
    out.append(b"\0" * 1024)
    raw = b"".join(out)
    return raw + b"\0" * (-len(raw) % 10240)


def rfc3339(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


# --- ELF --------------------------------------------------------------------------------------


def elf_info(data):
    """What the ELF header and program headers of a binary say (or Refused if not ELF)."""
    if len(data) < 52 or data[:4] != b"\x7fELF":
        raise Refused("not an ELF file")
    ei_class, ei_data = data[4], data[5]
    if ei_class not in (1, 2) or ei_data not in (1, 2):
        raise Refused("ELF header with class %d, data %d" % (ei_class, ei_data))
    e = "<" if ei_data == 1 else ">"
    if ei_class == 2:
        (e_type, e_machine, _v, _entry, e_phoff, _shoff, e_flags, _ehsize, e_phentsize,
         e_phnum) = struct.unpack_from(e + "HHIQQQIHHH", data, 16)
    else:
        (e_type, e_machine, _v, _entry, e_phoff, _shoff, e_flags, _ehsize, e_phentsize,
         e_phnum) = struct.unpack_from(e + "HHIIIIIHHH", data, 16)
    interp, needed, dynamic = None, 0, False
    for i in range(e_phnum):
        off = e_phoff + i * e_phentsize
        if ei_class == 2:
            p_type, _flags, p_offset, _va, _pa, p_filesz = struct.unpack_from(e + "IIQQQQ", data, off)
        else:
            p_type, p_offset, _va, _pa, p_filesz = struct.unpack_from(e + "IIIII", data, off)
        if p_type == 3:  # PT_INTERP
            interp = data[p_offset:p_offset + p_filesz].rstrip(b"\0").decode(errors="replace")
        elif p_type == 2:  # PT_DYNAMIC: count DT_NEEDED
            dynamic = True
            fmt, size = (e + "qQ", 16) if ei_class == 2 else (e + "iI", 8)
            for pos in range(p_offset, p_offset + p_filesz - size + 1, size):
                tag, _val = struct.unpack_from(fmt, data, pos)
                if tag == 0:
                    break
                if tag == 1:
                    needed += 1
    return {
        "class": 64 if ei_class == 2 else 32,
        "little_endian": ei_data == 1,
        "type": e_type,
        "machine": e_machine,
        "flags": e_flags,
        "interp": interp,
        "needed": needed,
        "dynamic": dynamic,
    }


def describe_elf(info):
    return "ELF%d %s-endian %s (e_machine %d)" % (
        info["class"], "little" if info["little_endian"] else "big",
        MACHINE_NAMES.get(info["machine"], "machine"), info["machine"])


def check_binary(arch, data, path):
    """Refused unless data is a static little-endian executable for arch's platform."""
    p = PLATFORMS[arch]
    where = "%s: %s" % (p["platform"], path)
    try:
        info = elf_info(data)
    except Refused as err:
        raise Refused("%s: %s" % (where, err)) from None
    want = "ELF%d little-endian %s (e_machine %d)" % (
        p["elf_class"], MACHINE_NAMES[p["machine"]], p["machine"])
    if info["machine"] != p["machine"] or info["class"] != p["elf_class"] or not info["little_endian"]:
        raise Refused("%s is %s, not %s: the wrong binary for %s"
                      % (where, describe_elf(info), want, p["platform"]))
    if info["type"] not in (2, 3):  # ET_EXEC, ET_DYN (static-pie)
        raise Refused("%s is not an executable (e_type %d)" % (where, info["type"]))
    if info["interp"] is not None:
        raise Refused("%s is dynamically linked: it asks for the loader %s (PT_INTERP)"
                      % (where, info["interp"]))
    if info["needed"]:
        raise Refused("%s needs %d shared libraries (DT_NEEDED)" % (where, info["needed"]))
    if arch == "armv7":
        # EABI version 5, hard float: what armv7-unknown-linux-musleabihf makes.
        if info["flags"] >> 24 != 5 or not info["flags"] & 0x400:
            raise Refused("%s is not an EABI5 hard-float ARM binary (e_flags 0x%08x)"
                          % (where, info["flags"]))
    return info


def arch_of(name):
    """amd64, arm64 or armv7 for any of the names this script accepts for a platform."""
    n = name.strip()
    for arch, p in PLATFORMS.items():
        if n in (arch, p["platform"], p["target"]):
            return arch
    aliases = {"linux/arm": "armv7", "linux/arm/v7": "armv7", "x86_64": "amd64",
               "aarch64": "arm64", "armv7l": "armv7", "arm": "armv7"}
    if n in aliases:
        return aliases[n]
    raise Refused("unknown platform %r (one of %s)" % (name, ", ".join(
        "%s (%s, %s)" % (a, PLATFORMS[a]["platform"], PLATFORMS[a]["target"]) for a in ARCH_ORDER)))


def host_arch():
    return arch_of(os.uname().machine)


# --- what the images hold ---------------------------------------------------------------------


def cargo_package():
    """version, description, license and repository of Cargo.toml's [package]."""
    path = os.path.join(REPO, "Cargo.toml")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        import tomllib
        pkg = tomllib.loads(raw.decode())["package"]
    except ImportError:  # Python < 3.11: the four plain strings of [package]
        section = raw.decode().split("[package]", 1)[1].split("\n[", 1)[0]
        pkg = dict(re.findall(r'^(\w+)\s*=\s*"([^"]*)"', section, re.M))
    for key in ("version", "description", "license", "repository"):
        if not pkg.get(key):
            raise Refused("Cargo.toml's [package] has no %s" % key)
    return pkg


def operator_labels(pkg, revision, source):
    return {
        "org.opencontainers.image.title": "mutantops",
        "org.opencontainers.image.description": pkg["description"],
        "org.opencontainers.image.source": source,
        "org.opencontainers.image.version": pkg["version"],
        "org.opencontainers.image.revision": revision,
        "org.opencontainers.image.licenses": pkg["license"],
    }


def operator_config(labels):
    return {
        "User": OPERATOR_USER,
        "Entrypoint": list(OPERATOR_ENTRYPOINT),
        "ExposedPorts": {p: {} for p in OPERATOR_PORTS},
        "Labels": labels,
    }


def operator_tree(binary):
    return [
        Entry("etc", "dir", 0o755),
        Entry("etc/group", "file", 0o644, data=GROUP.encode()),
        Entry("etc/passwd", "file", 0o644, data=PASSWD.encode()),
        Entry("home", "dir", 0o755),
        Entry("home/nonroot", "dir", 0o700, NONROOT, NONROOT),
        Entry("mutantops", "file", 0o755, data=binary),
        Entry("tmp", "dir", 0o1777),
    ]


def platform_fields(arch):
    p = PLATFORMS[arch]
    fields = {"architecture": p["architecture"], "os": p["os"]}
    if p.get("variant"):
        fields["variant"] = p["variant"]
    return fields


class Image:
    """One single-platform image: its blobs by digest, its manifest's descriptor."""

    def __init__(self, arch, entries, config_body, epoch, created_by):
        self.arch = arch
        self.layer_tar = tar_bytes(entries, epoch)
        self.layer_gz = gzip_bytes(self.layer_tar)
        self.diff_id = sha256(self.layer_tar)
        created = rfc3339(epoch)
        config = dict(platform_fields(arch))
        config.update({
            "created": created,
            "config": config_body,
            "rootfs": {"type": "layers", "diff_ids": [self.diff_id]},
            "history": [{"created": created, "created_by": created_by}],
        })
        self.config = cjson(config)
        self.manifest = cjson({
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": descriptor(MT_CONFIG, self.config),
            "layers": [descriptor(MT_LAYER, self.layer_gz)],
        })
        self.blobs = {sha256(b): b for b in (self.layer_gz, self.config, self.manifest)}

    def descriptor(self, **extra):
        return descriptor(MT_MANIFEST, self.manifest, platform=platform_fields(self.arch), **extra)


def name_annotations(name, tag):
    return {ANN_NAME: "%s:%s" % (name, tag), ANN_REF: tag}


def layout_files(index_entry, blobs):
    """The files of an OCI image layout: {path: bytes}."""
    files = {
        "oci-layout": cjson({"imageLayoutVersion": "1.0.0"}),
        "index.json": cjson({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": [index_entry]}),
    }
    for dgst, data in blobs.items():
        files["blobs/sha256/" + dgst.split(":", 1)[1]] = data
    return files


def archive_bytes(image, name, tag, epoch):
    """A single-image archive for `ctr images import` (OCI layout, preferred by containerd)
    and `docker load` (manifest.json with RepoTags, the docker-archive format)."""
    files = layout_files(image.descriptor(annotations=name_annotations(name, tag)), image.blobs)
    config_path = "blobs/sha256/" + sha256(image.config).split(":", 1)[1]
    layer_path = "blobs/sha256/" + sha256(image.layer_gz).split(":", 1)[1]
    files["manifest.json"] = cjson([{
        "Config": config_path,
        "RepoTags": ["%s:%s" % (name, tag)],
        "Layers": [layer_path],
    }])
    entries = [Entry("blobs", "dir", 0o755), Entry("blobs/sha256", "dir", 0o755)]
    entries += [Entry(path, "file", 0o644, data=data) for path, data in files.items()]
    return tar_bytes(entries, epoch)


def write_file(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def write_layout(directory, files):
    tmp = directory + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for path, data in sorted(files.items()):
        full = os.path.join(tmp, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        write_file(full, data)
    shutil.rmtree(directory, ignore_errors=True)
    os.rename(tmp, directory)


def mib(n):
    return "%.2f MiB" % (n / 1048576)


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
