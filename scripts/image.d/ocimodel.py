#!/usr/bin/env python3
"""What scripts/image writes, in bytes: canonical JSON, reproducible tar and gzip, the ELF
check of a binary, and the trees, configs, manifests and archives of the images (oci.py
runs the commands)."""

import hashlib
import json
import os
import re
import shutil
import struct
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
