#!/usr/bin/env python3
"""Build and push the container images that bosun's tests pull.

bosun's integration tests need real images, but CI has no access to Docker
Hub.  This tool builds every test image OFFLINE from Debian's binaries on this
machine (the dynamic /bin/busybox and the shared libraries it links against)
and writes them deterministically: fixed mtimes, uid/gid 0 unless stated,
sorted tar entries and gzip headers with mtime 0, so digests are stable across
runs on the same machine (they change when Debian's busybox or libc change).

    hack/testimages.py build --out test-images
    hack/testimages.py push --dir test-images --registry 127.0.0.1:5055 \\
        [--user U --password P] [--prefix bosun] [--only busybox,layered]
    hack/testimages.py build-critest --out test-images/critest   (hack/critest_images.py)
    hack/testimages.py push --by-ref --dir test-images/critest --registry 127.0.0.1:5000

`build` writes, for each image NAME:
    DIR/NAME/            an OCI image layout (ref name "latest")
    DIR/NAME.oci.tar     the same layout as a tar (what `skopeo copy ... oci-archive:` writes)
    DIR/NAME.docker.tar  a `docker save` archive tagged bosun.test/NAME:latest
                         (single-manifest images only)
and DIR/manifest.json, a summary of every image (digests, diff_ids, media
types, configs, index children, expected results) for the tests to read.

`push` uploads every OCI layout under DIR to a Docker distribution v2 registry
over plain HTTP as <prefix>/<NAME>:latest (monolithic blob uploads, child
manifests of an index pushed by digest first, optional Basic auth); with
`--by-ref`, each layout's ref names are full references and each is pushed as
REPOSITORY:TAG with its registry host dropped (critest's images).  HTTP
proxies from the environment are ignored: the registry is a local test one.

Only the Python standard library is used; `build` also needs the `zstd` CLI
and, to verify the busybox layer with chroot, root.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import gzip
import hashlib
import inspect
import io
import json
import ssl
import os
import platform
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Iterable

# hack/critest_images.py imports this file as `testimages`: one module, one ToolError.
sys.modules.setdefault("testimages", sys.modules[__name__])

# --------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------

MTIME = 1700000000
CREATED = "2023-11-14T22:13:20Z"  # == MTIME
TAG = "latest"
DOCKER_TAG_PREFIX = "bosun.test"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REF_NAME = "org.opencontainers.image.ref.name"
LABEL = "bosun.test.image"
HOST_BUSYBOX = "/bin/busybox"
# The grpc.health.v1 test server (hack/grpc-health, `cargo build --release --example grpc-health`).
GRPC_HEALTH_BIN = os.environ.get("BOSUN_GRPC_HEALTH") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "target", "release", "examples", "grpc-health")
BIG_FILE_SIZE = 48 * 1024 * 1024
BIG_FILE_PATH = "big/random.bin"
MERGED_USR_DIRS = ("bin", "sbin", "lib", "lib64")
EXTRA_MERGED_DIRS = ("lib32", "libx32")

MT_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MT_OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
MT_OCI_LAYER_GZIP = MT_OCI_LAYER + "+gzip"
MT_OCI_LAYER_ZSTD = MT_OCI_LAYER + "+zstd"
MT_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MT_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MT_DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
MT_DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
INDEX_MEDIA_TYPES = (MT_OCI_INDEX, MT_DOCKER_LIST)
MANIFEST_MEDIA_TYPES = (MT_OCI_MANIFEST, MT_DOCKER_MANIFEST)

# uname -m -> (GOARCH, variant)
GOARCH = {
    "x86_64": ("amd64", None),
    "amd64": ("amd64", None),
    "aarch64": ("arm64", "v8"),
    "arm64": ("arm64", "v8"),
    "armv7l": ("arm", "v7"),
    "armv6l": ("arm", "v6"),
    "i386": ("386", None),
    "i686": ("386", None),
    "ppc64le": ("ppc64le", None),
    "s390x": ("s390x", None),
    "riscv64": ("riscv64", None),
}

PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\n"
    "app:x:1000:1000:app:/home/app:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
)
GROUP = (
    "root:x:0:\n"
    "audio:x:29:app\n"
    "app:x:1000:\n"
    "nogroup:x:65534:\n"
)
NSSWITCH = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"

# The merged view of /data in the `layered` image (all three layers applied).
LAYERED_EXPECTED_PATHS = [
    "/data/a", "/data/c", "/data/d", "/data/hl", "/data/link",
    "/data/owned", "/data/sub", "/data/sub/y", "/data/suid",
]
LAYERED_EXPECTED_ABSENT = ["/data/b", "/data/sub/x"]


class ToolError(Exception):
    """A failure with a message meant for the user."""


# --------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------

def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_hex(digest: str) -> str:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64:
        raise ToolError(f"unsupported digest {digest!r}")
    return hexpart


def to_json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def descriptor(media_type: str, data: bytes, **extra: Any) -> dict:
    desc = {"mediaType": media_type, "digest": sha256_digest(data), "size": len(data)}
    desc.update(extra)
    return desc


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def write_file_atomic(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def remove_path(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


# --------------------------------------------------------------------------
# Platforms
# --------------------------------------------------------------------------

def make_platform(arch: str, variant: str | None) -> dict:
    plat = {"architecture": arch, "os": "linux"}
    if variant:
        plat["variant"] = variant
    return plat


def native_platform() -> dict:
    machine = platform.machine()
    if machine not in GOARCH:
        raise ToolError(f"unknown machine architecture {machine!r}")
    return make_platform(*GOARCH[machine])


def decoy_platform(native: dict) -> dict:
    if native["architecture"] == "arm64":
        return make_platform("amd64", None)
    return make_platform("arm64", "v8")


# --------------------------------------------------------------------------
# Deterministic tars and compression
# --------------------------------------------------------------------------

@dataclasses.dataclass
class Entry:
    """One tar entry; path is relative to the root, without a leading '/'."""
    path: str
    kind: str  # "dir" | "file" | "symlink" | "hardlink"
    mode: int = 0o644
    data: bytes = b""
    link: str = ""
    uid: int = 0
    gid: int = 0
    xattrs: dict = dataclasses.field(default_factory=dict)


def d(path: str, mode: int = 0o755, uid: int = 0, gid: int = 0) -> Entry:
    return Entry(path, "dir", mode, uid=uid, gid=gid)


def f(path: str, data: bytes | str, mode: int = 0o644, **kw: Any) -> Entry:
    if isinstance(data, str):
        data = data.encode()
    return Entry(path, "file", mode, data=data, **kw)


def symlink(path: str, target: str) -> Entry:
    return Entry(path, "symlink", 0o777, link=target)


def hardlink(path: str, target: str) -> Entry:
    return Entry(path, "hardlink", 0o644, link=target)


TAR_TYPES = {
    "dir": tarfile.DIRTYPE,
    "file": tarfile.REGTYPE,
    "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE,
}


def entry_tarinfo(entry: Entry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry.path)
    info.type = TAR_TYPES[entry.kind]
    info.mode = entry.mode
    info.uid, info.gid = entry.uid, entry.gid
    info.uname = info.gname = ""
    info.mtime = MTIME
    info.linkname = entry.link
    info.size = len(entry.data) if entry.kind == "file" else 0
    if entry.xattrs:
        info.pax_headers = {f"SCHILY.xattr.{k}": v for k, v in entry.xattrs.items()}
    return info


def sort_key(path: str) -> list[str]:
    return path.strip("/").split("/")


def make_tar(entries: Iterable[Entry]) -> bytes:
    """A deterministic (PAX) tar of entries, sorted by path components."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(entries, key=lambda e: sort_key(e.path)):
            data = io.BytesIO(entry.data) if entry.kind == "file" else None
            tar.addfile(entry_tarinfo(entry), data)
    return buf.getvalue()


def add_parent_dirs(entries: list[Entry]) -> list[Entry]:
    """Adds a 0755 root-owned directory entry for every missing parent."""
    present = {e.path for e in entries}
    extra = []
    for entry in entries:
        parts = entry.path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            parent = "/".join(parts[:i])
            if parent not in present:
                present.add(parent)
                extra.append(d(parent))
    return entries + extra


def gzip_bytes(data: bytes, level: int = 9) -> bytes:
    return gzip.compress(data, compresslevel=level, mtime=0)


def zstd_bytes(data: bytes) -> bytes:
    if shutil.which("zstd") is None:
        raise ToolError("the zstd CLI is missing (apt-get install zstd)")
    proc = subprocess.run(["zstd", "-q", "-c", "-3", "--no-progress"],
                          input=data, capture_output=True, check=False)
    if proc.returncode != 0:
        raise ToolError(f"zstd failed: {proc.stderr.decode(errors='replace')}")
    return proc.stdout


# --------------------------------------------------------------------------
# Layers, manifests, images
# --------------------------------------------------------------------------

@dataclasses.dataclass
class Layer:
    tar: bytes        # uncompressed tar (its sha256 is the diff_id)
    blob: bytes       # bytes as stored in the registry
    media_type: str   # OCI media type of blob

    @property
    def diff_id(self) -> str:
        return self._cached("_diff_id", self.tar)

    @property
    def digest(self) -> str:
        return self._cached("_digest", self.blob)

    def _cached(self, attr: str, data: bytes) -> str:
        if attr not in self.__dict__:
            self.__dict__[attr] = sha256_digest(data)
        return self.__dict__[attr]


def gzip_layer(entries: list[Entry], level: int = 9) -> Layer:
    tar = make_tar(entries)
    return Layer(tar, gzip_bytes(tar, level), MT_OCI_LAYER_GZIP)


@dataclasses.dataclass
class Manifest:
    """A single-platform image manifest and everything it references."""
    media_type: str
    data: bytes
    config: bytes
    config_media_type: str
    layers: list[Layer]
    layer_media_types: list[str]
    platform: dict

    @property
    def digest(self) -> str:
        return sha256_digest(self.data)

    @property
    def config_digest(self) -> str:
        return sha256_digest(self.config)

    def blobs(self) -> dict[str, bytes]:
        out = {self.digest: self.data, self.config_digest: self.config}
        out.update({layer.digest: layer.blob for layer in self.layers})
        return out


@dataclasses.dataclass
class Image:
    """A named test image: one manifest, or an index over several."""
    name: str
    top: Manifest | None = None                 # single-manifest image
    index_media_type: str | None = None         # index/list image
    index_data: bytes = b""
    children: list[Manifest] = dataclasses.field(default_factory=list)
    native_child: int = -1
    extra: dict = dataclasses.field(default_factory=dict)

    @property
    def is_index(self) -> bool:
        return self.top is None

    @property
    def media_type(self) -> str:
        return self.index_media_type if self.is_index else self.top.media_type

    @property
    def data(self) -> bytes:
        return self.index_data if self.is_index else self.top.data

    @property
    def digest(self) -> str:
        return sha256_digest(self.data)

    def blobs(self) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for manifest in self.children if self.is_index else [self.top]:
            out.update(manifest.blobs())
        out[self.digest] = self.data
        return out


@dataclasses.dataclass
class ConfigSpec:
    """The runtime part of an image config (config.config)."""
    cmd: list[str]
    user: str | None = None
    entrypoint: list[str] | None = None
    workdir: str | None = None
    env: list[str] = dataclasses.field(default_factory=list)
    stop_signal: str | None = None

    def to_dict(self, label: str) -> dict:
        cfg: dict[str, Any] = {}
        if self.user:
            cfg["User"] = self.user
        cfg["Env"] = [PATH_ENV, *self.env]
        if self.entrypoint:
            cfg["Entrypoint"] = self.entrypoint
        cfg["Cmd"] = self.cmd
        if self.workdir:
            cfg["WorkingDir"] = self.workdir
        cfg["Labels"] = {LABEL: label}
        if self.stop_signal:
            cfg["StopSignal"] = self.stop_signal
        return cfg


def image_config(plat: dict, spec: ConfigSpec, layers: list[Layer],
                 layer_history: list[str], label: str) -> bytes:
    doc: dict[str, Any] = {"created": CREATED, "author": "bosun hack/testimages.py"}
    doc.update(plat)
    doc["config"] = spec.to_dict(label)
    doc["rootfs"] = {"type": "layers", "diff_ids": [l.diff_id for l in layers]}
    history = [{"created": CREATED, "created_by": step} for step in layer_history]
    history.append({"created": CREATED,
                    "created_by": f"bosun testimages: config of {label}",
                    "empty_layer": True})
    doc["history"] = history
    return to_json(doc)


def make_manifest(plat: dict, spec: ConfigSpec, layers: list[Layer],
                  layer_history: list[str], label: str, docker: bool = False) -> Manifest:
    config = image_config(plat, spec, layers, layer_history, label)
    if docker:
        media_type, config_mt = MT_DOCKER_MANIFEST, MT_DOCKER_CONFIG
        layer_mts = [docker_layer_media_type(l.media_type) for l in layers]
    else:
        media_type, config_mt = MT_OCI_MANIFEST, MT_OCI_CONFIG
        layer_mts = [l.media_type for l in layers]
    doc = {
        "schemaVersion": 2,
        "mediaType": media_type,
        "config": descriptor(config_mt, config),
        "layers": [{"mediaType": mt, "digest": l.digest, "size": len(l.blob)}
                   for l, mt in zip(layers, layer_mts)],
    }
    return Manifest(media_type, to_json(doc), config, config_mt, layers, layer_mts, plat)


def docker_layer_media_type(oci_media_type: str) -> str:
    if oci_media_type != MT_OCI_LAYER_GZIP:
        raise ToolError(f"no Docker media type for {oci_media_type}")
    return MT_DOCKER_LAYER_GZIP


def make_index(name: str, media_type: str, children: list[Manifest], native_child: int,
               extra: dict | None = None) -> Image:
    doc = {
        "schemaVersion": 2,
        "mediaType": media_type,
        "manifests": [descriptor(m.media_type, m.data, platform=m.platform) for m in children],
    }
    return Image(name, index_media_type=media_type, index_data=to_json(doc),
                 children=children, native_child=native_child, extra=extra or {})


# --------------------------------------------------------------------------
# The busybox root filesystem, from the host's Debian busybox
# --------------------------------------------------------------------------

def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)


def check_dynamic_busybox() -> str:
    if not os.path.exists(HOST_BUSYBOX):
        raise ToolError(f"{HOST_BUSYBOX} is missing (apt-get install busybox)")
    version = run([HOST_BUSYBOX]).stdout.splitlines()[:1]
    return version[0].strip() if version else "unknown"


def ldd_paths(binary: str) -> list[str]:
    """Absolute paths of the shared libraries (and loader) ldd lists."""
    proc = run(["ldd", binary])
    if proc.returncode != 0 or "not a dynamic executable" in proc.stdout + proc.stderr:
        raise ToolError(f"{binary} is not dynamically linked: install Debian's dynamic "
                        "`busybox` package, not busybox-static")
    paths = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if "=>" in line:
            line = line.split("=>", 1)[1].strip()
        path = line.split(" (", 1)[0].strip()
        if path.startswith("/"):
            paths.append(path)
    if not paths:
        raise ToolError(f"ldd listed no libraries for {binary}")
    return paths


def image_path(host_path: str) -> str:
    """Where a host path lands in the image's merged-/usr layout."""
    rel = os.path.normpath(host_path).lstrip("/")
    first, _, rest = rel.partition("/")
    if first in MERGED_USR_DIRS + EXTRA_MERGED_DIRS and rest:
        return f"usr/{first}/{rest}"
    return rel


def host_file_entry(host_path: str, dest: str) -> Entry:
    """A regular-file entry with the real bytes and mode behind host_path."""
    real = os.path.realpath(host_path)
    with open(real, "rb") as fh:
        data = fh.read()
    mode = os.stat(real).st_mode & 0o7777
    return f(dest, data, mode)


def busybox_applets() -> list[str]:
    proc = run([HOST_BUSYBOX, "--list"])
    if proc.returncode != 0:
        raise ToolError(f"{HOST_BUSYBOX} --list failed: {proc.stderr}")
    names = {n.strip() for n in proc.stdout.splitlines()}
    return sorted(n for n in names if n and "/" not in n and n != "busybox")


def base_dirs() -> list[Entry]:
    entries = [d(p) for p in ("etc", "home", "proc", "sys", "dev", "var", "run",
                              "usr", "usr/bin", "usr/sbin", "usr/lib", "usr/lib64")]
    entries += [d("tmp", 0o1777), d("root", 0o700), d("home/app", 0o755, 1000, 1000)]
    entries += [symlink(top, f"usr/{top}") for top in MERGED_USR_DIRS]
    return entries


def etc_files() -> list[Entry]:
    return [f("etc/passwd", PASSWD), f("etc/group", GROUP), f("etc/nsswitch.conf", NSSWITCH)]


def busybox_rootfs() -> tuple[list[Entry], list[str]]:
    """Entries of the busybox layer, and the host libraries copied into it."""
    entries = base_dirs() + etc_files()
    entries.append(host_file_entry(HOST_BUSYBOX, "usr/bin/busybox"))
    libs = ldd_paths(HOST_BUSYBOX)
    seen = {e.path for e in entries}
    for lib in libs:
        dest = image_path(lib)
        if dest not in seen:
            seen.add(dest)
            entries.append(host_file_entry(lib, dest))
    for applet in busybox_applets():
        dest = f"usr/bin/{applet}"
        if dest not in seen:
            seen.add(dest)
            entries.append(symlink(dest, "busybox"))
    return add_parent_dirs(entries), libs


# --------------------------------------------------------------------------
# The other layers
# --------------------------------------------------------------------------

def grpc_health_layer(busybox_paths: set[str]) -> tuple[Layer, list[str]]:
    """The grpc-health server and the libraries it needs that the busybox layer lacks."""
    if not os.path.exists(GRPC_HEALTH_BIN):
        raise ToolError(f"{GRPC_HEALTH_BIN} is missing: run `cargo build --release --example "
                        "grpc-health` first (hack/setup.sh does)")
    entries = [host_file_entry(GRPC_HEALTH_BIN, "usr/bin/grpc-health")]
    libs = [lib for lib in ldd_paths(GRPC_HEALTH_BIN) if image_path(lib) not in busybox_paths]
    entries += [host_file_entry(lib, image_path(lib)) for lib in libs]
    return gzip_layer(add_parent_dirs(entries)), libs


def layered_layer2() -> Layer:
    """zstd layer: files, a hard link, a symlink, setuid, ownership, an xattr."""
    entries = [
        d("data"), d("data/sub"),
        f("data/a", "a\n", xattrs={"user.bosun": "yes"}),
        f("data/b", "b\n"),
        f("data/c", "c\n"),
        f("data/sub/x", "x\n"),
        hardlink("data/hl", "data/a"),
        symlink("data/link", "a"),
        f("data/suid", "#!/bin/sh\necho suid\n", 0o4755),
        f("data/owned", "owned\n", uid=1000, gid=1000),
    ]
    tar = make_tar(entries)
    return Layer(tar, zstd_bytes(tar), MT_OCI_LAYER_ZSTD)


def layered_layer3() -> Layer:
    """Uncompressed layer: a whiteout, an opaque dir, new files."""
    entries = [
        d("data"), d("data/sub"),
        f("data/.wh.b", b"", 0o600),
        f("data/sub/.wh..wh..opq", b"", 0o600),
        f("data/sub/y", "y\n"),
        f("data/d", "d\n"),
    ]
    tar = make_tar(entries)
    return Layer(tar, tar, MT_OCI_LAYER)


def big_layer() -> tuple[Layer, dict]:
    payload = random.Random(42).randbytes(BIG_FILE_SIZE)
    entries = [d("big"), f(BIG_FILE_PATH, payload)]
    info = {"path": "/" + BIG_FILE_PATH, "size": len(payload), "sha256": sha256_digest(payload)}
    return gzip_layer(entries, level=1), info


def layered_expectations() -> dict:
    return {
        "paths": LAYERED_EXPECTED_PATHS,
        "absent": LAYERED_EXPECTED_ABSENT,
        "files": {
            "/data/a": {"type": "file", "content": "a\n", "mode": "0644",
                        "xattrs": {"user.bosun": "yes"}},
            "/data/c": {"type": "file", "content": "c\n", "mode": "0644"},
            "/data/d": {"type": "file", "content": "d\n", "mode": "0644"},
            "/data/hl": {"type": "hardlink", "target": "/data/a", "content": "a\n"},
            "/data/link": {"type": "symlink", "target": "a"},
            "/data/suid": {"type": "file", "mode": "04755"},
            "/data/owned": {"type": "file", "content": "owned\n", "uid": 1000, "gid": 1000},
            "/data/sub": {"type": "dir", "children": ["y"]},
            "/data/sub/y": {"type": "file", "content": "y\n"},
        },
    }


# --------------------------------------------------------------------------
# The image catalogue
# --------------------------------------------------------------------------

def build_images() -> tuple[list[Image], dict]:
    """Builds every test image in memory; returns them and build metadata."""
    native = native_platform()
    decoy = decoy_platform(native)
    version = check_dynamic_busybox()
    entries, libs = busybox_rootfs()
    bb = gzip_layer(entries)
    bb_hist = [f"bosun testimages: {version} + {' '.join(libs)} + applet symlinks"]
    verify_busybox_layer(bb)

    def simple(name: str, spec: ConfigSpec, layers=None, hist=None, docker=False,
               plat=None, label=None) -> Manifest:
        return make_manifest(plat or native, spec, layers or [bb], hist or bb_hist,
                             label or name, docker)

    images = [
        Image("busybox", simple("busybox", ConfigSpec(["sh"]))),
        Image("nonroot", simple("nonroot", ConfigSpec(["sleep", "3600"], user="app"))),
        Image("numeric-user", simple("numeric-user", ConfigSpec(["sh"], user="1000:1000"))),
        Image("stopsignal", simple("stopsignal", ConfigSpec(
            ["sh", "-c", "trap 'echo got-usr1; exit 0' USR1; while true; do sleep 0.1; done"],
            stop_signal="SIGUSR1"))),
        Image("entrypoint", simple("entrypoint", ConfigSpec(
            ["cmd"], entrypoint=["/bin/echo", "entry"], workdir="/tmp", env=["FOO=bar"]))),
    ]

    layers = [bb, layered_layer2(), layered_layer3()]
    hist = bb_hist + ["bosun testimages: /data files (zstd)",
                      "bosun testimages: whiteouts (uncompressed)"]
    check_layered_merge(layers)
    images.append(Image("layered", simple("layered", ConfigSpec(["sh"]), layers, hist),
                        extra={"expected_data": layered_expectations()}))

    busybox = images[0].top
    arm = simple("index", ConfigSpec(["arm64"]), plat=decoy, label="index/decoy")
    images.append(make_index("index", MT_OCI_INDEX, [arm, busybox], 1))

    schema2 = simple("docker-schema2", ConfigSpec(["sh"]), docker=True)
    images.append(Image("docker-schema2", schema2))
    arm_docker = simple("docker-list", ConfigSpec(["arm64"]), docker=True, plat=decoy,
                        label="docker-list/decoy")
    images.append(make_index("docker-list", MT_DOCKER_LIST, [arm_docker, schema2], 1))

    big, big_info = big_layer()
    big_hist = bb_hist + [f"bosun testimages: {BIG_FILE_SIZE} random bytes (seed 42)"]
    images.append(Image("big", simple("big", ConfigSpec(["sh"]), [bb, big], big_hist),
                        extra={"big_file": big_info}))

    grpc, grpc_libs = grpc_health_layer({e.path for e in entries})
    grpc_hist = bb_hist + [f"bosun testimages: grpc-health server + {' '.join(grpc_libs)}"]
    images.append(Image("grpc-health", simple(
        "grpc-health", ConfigSpec(["--port", "50051"], entrypoint=["/usr/bin/grpc-health"]),
        [bb, grpc], grpc_hist)))

    meta = {"native_platform": native, "decoy_platform": decoy,
            "busybox_version": version, "busybox_host_libs": libs}
    return images, meta


# --------------------------------------------------------------------------
# Self-checks
# --------------------------------------------------------------------------

def extract_tar(tar_bytes: bytes, dest: str) -> None:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        kwargs: dict[str, Any] = {"numeric_owner": True}
        if "filter" in inspect.signature(tar.extractall).parameters:
            kwargs["filter"] = "fully_trusted"
        tar.extractall(dest, **kwargs)


def chroot_run(root: str, *argv: str) -> str:
    proc = run(["chroot", root, *argv])
    return proc.stdout + proc.stderr


def verify_busybox_layer(layer: Layer) -> None:
    """Extracts the layer and runs busybox in it with chroot (root only)."""
    if os.geteuid() != 0:
        log("warning: not root: skipping the chroot check of the busybox layer")
        return
    with tempfile.TemporaryDirectory(prefix="bosun-testimages-") as tmp:
        extract_tar(layer.tar, tmp)
        out = chroot_run(tmp, "/bin/sh", "-c", "echo ok; ls /; id; id app")
        expect(out.startswith("ok\n"), "busybox sh does not run under chroot", out)
        expect("uid=0(root) gid=0(root)" in out, "`id` did not resolve root", out)
        expect("uid=1000(app) gid=1000(app) groups=1000(app),29(audio)" in out,
               "`id app` did not resolve app and its groups", out)
        for top in ("bin", "etc", "lib64", "tmp", "usr"):
            expect(f"\n{top}\n" in out, f"`ls /` does not show {top}", out)
        for applet in ("wget", "httpd"):
            out = chroot_run(tmp, f"/bin/{applet}", "--help")
            expect(f"Usage: {applet}" in out, f"applet {applet} is missing", out)


def expect(cond: bool, message: str, output: str = "") -> None:
    if not cond:
        raise ToolError(f"verification failed: {message}\n--- output ---\n{output}")


def merged_paths(layers: list[Layer]) -> set[str]:
    """Applies OCI whiteouts over the layers' path sets (a reference model)."""
    paths: set[str] = set()
    for layer in layers:
        with tarfile.open(fileobj=io.BytesIO(layer.tar)) as tar:
            names = ["/" + m.name.rstrip("/") for m in tar.getmembers()]
        lower = set(paths)
        for name in names:
            parent, base = name.rsplit("/", 1)
            if base == ".wh..wh..opq":
                paths -= {p for p in lower if p.startswith(parent + "/")}
            elif base.startswith(".wh."):
                gone = parent + "/" + base[4:]
                paths -= {p for p in lower if p == gone or p.startswith(gone + "/")}
        paths |= {n for n in names if not n.rsplit("/", 1)[1].startswith(".wh.")}
    return paths


def check_layered_merge(layers: list[Layer]) -> None:
    data = sorted(p for p in merged_paths(layers) if p.startswith("/data/"))
    expect(data == LAYERED_EXPECTED_PATHS, "layered merge differs from expectation",
           "\n".join(data))


# --------------------------------------------------------------------------
# Writers: OCI layout, oci-archive, docker-archive, summary
# --------------------------------------------------------------------------

def write_oci_layout(image: Image, path: str) -> None:
    blob_dir = os.path.join(path, "blobs", "sha256")
    os.makedirs(blob_dir)
    for digest, data in sorted(image.blobs().items()):
        with open(os.path.join(blob_dir, digest_hex(digest)), "wb") as fh:
            fh.write(data)
    index = {
        "schemaVersion": 2,
        "mediaType": MT_OCI_INDEX,
        "manifests": [descriptor(image.media_type, image.data, annotations={REF_NAME: TAG})],
    }
    with open(os.path.join(path, "index.json"), "wb") as fh:
        fh.write(to_json(index))
    with open(os.path.join(path, "oci-layout"), "wb") as fh:
        fh.write(to_json({"imageLayoutVersion": "1.0.0"}))


def tar_dir_entries(root: str) -> list[tuple[str, str]]:
    """(archive name, filesystem path) of everything under root, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            out.append((os.path.relpath(full, root), full))
    return sorted(out, key=lambda item: sort_key(item[0]))


def write_oci_archive(layout: str, path: str) -> None:
    tmp = path + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, full in tar_dir_entries(layout):
            if os.path.isdir(full):
                tar.addfile(entry_tarinfo(d(name)))
            else:
                info = entry_tarinfo(Entry(name, "file", 0o644))
                info.size = os.path.getsize(full)
                with open(full, "rb") as fh:
                    tar.addfile(info, fh)
    os.replace(tmp, path)


def docker_v1_ids(manifest: Manifest) -> list[str]:
    """Deterministic legacy v1 layer ids (chained, the last includes the config)."""
    ids, parent = [], ""
    for i, layer in enumerate(manifest.layers):
        seed = f"{parent}\n{layer.diff_id}"
        if i == len(manifest.layers) - 1:
            seed += "\n" + manifest.config_digest
        parent = hashlib.sha256(seed.encode()).hexdigest()
        ids.append(parent)
    return ids


def write_docker_archive(name: str, manifest: Manifest, path: str) -> None:
    repo = f"{DOCKER_TAG_PREFIX}/{name}"
    config_name = digest_hex(manifest.config_digest) + ".json"
    ids = docker_v1_ids(manifest)
    entries = [f(config_name, manifest.config)]
    for i, (layer_id, layer) in enumerate(zip(ids, manifest.layers)):
        v1: dict[str, Any] = {"id": layer_id}
        if i:
            v1["parent"] = ids[i - 1]
        v1.update({"created": CREATED, "container_config": {"Cmd": None}, "os": "linux"})
        entries += [d(layer_id), f(f"{layer_id}/VERSION", "1.0"),
                    f(f"{layer_id}/json", to_json(v1)), f(f"{layer_id}/layer.tar", layer.tar)]
    entries.append(f("manifest.json", to_json([{
        "Config": config_name,
        "RepoTags": [f"{repo}:{TAG}"],
        "Layers": [f"{layer_id}/layer.tar" for layer_id in ids],
    }])))
    entries.append(f("repositories", to_json({repo: {TAG: ids[-1]}})))
    write_file_atomic(path, make_tar(entries))


def manifest_summary(m: Manifest) -> dict:
    config = json.loads(m.config)
    return {
        "media_type": m.media_type,
        "manifest_digest": m.digest,
        "manifest_size": len(m.data),
        "config_digest": m.config_digest,
        "image_id": m.config_digest,
        "config_media_type": m.config_media_type,
        "config_size": len(m.config),
        "platform": m.platform,
        "config": config["config"],
        "layers": [{"digest": l.digest, "diff_id": l.diff_id, "media_type": mt,
                    "size": len(l.blob), "uncompressed_size": len(l.tar)}
                   for l, mt in zip(m.layers, m.layer_media_types)],
    }


def image_summary(image: Image, has_docker_tar: bool) -> dict:
    out: dict[str, Any] = {
        "name": image.name,
        "kind": "index" if image.is_index else "manifest",
        "ref_name": TAG,
        "oci_layout": image.name,
        "oci_archive": f"{image.name}.oci.tar",
        "docker_archive": f"{image.name}.docker.tar" if has_docker_tar else None,
        "docker_ref": f"{DOCKER_TAG_PREFIX}/{image.name}:{TAG}" if has_docker_tar else None,
    }
    if image.is_index:
        native = image.children[image.native_child]
        out.update({
            "media_type": image.media_type,
            "manifest_digest": image.digest,
            "manifest_size": len(image.data),
            "native_manifest_digest": native.digest,
            "native_config_digest": native.config_digest,
            "manifests": [dict(manifest_summary(m), native=(i == image.native_child))
                          for i, m in enumerate(image.children)],
        })
    else:
        out.update(manifest_summary(image.top))
    out.update(image.extra)
    return out


def write_image(image: Image, out_dir: str) -> dict:
    layout = os.path.join(out_dir, image.name)
    tmp_layout = os.path.join(out_dir, f".{image.name}.tmp")
    remove_path(tmp_layout)
    write_oci_layout(image, tmp_layout)
    remove_path(layout)
    os.rename(tmp_layout, layout)
    write_oci_archive(layout, os.path.join(out_dir, f"{image.name}.oci.tar"))
    docker_tar = os.path.join(out_dir, f"{image.name}.docker.tar")
    if image.is_index:
        remove_path(docker_tar)
    else:
        write_docker_archive(image.name, image.top, docker_tar)
    return image_summary(image, not image.is_index)


def cmd_build(args: argparse.Namespace) -> None:
    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    images, meta = build_images()
    summary: dict[str, Any] = {"version": 1, "generated_by": "hack/testimages.py",
                               "docker_tag_prefix": DOCKER_TAG_PREFIX, **meta, "images": {}}
    for image in images:
        summary["images"][image.name] = write_image(image, out_dir)
        print(f"built {image.name:15} {image.digest}")
    data = json.dumps(summary, indent=2).encode() + b"\n"
    write_file_atomic(os.path.join(out_dir, "manifest.json"), data)
    print(f"wrote {len(images)} images to {out_dir}")


# --------------------------------------------------------------------------
# push: a minimal Docker distribution v2 client
# --------------------------------------------------------------------------

class Registry:
    def __init__(self, hostport: str, user: str | None, password: str | None,
                 tls_ca: str | None = None):
        self.user, self.password = user, password
        self.auth: str | None = self._basic() if user is not None else None
        handlers: list = [urllib.request.ProxyHandler({})]
        if tls_ca:
            # HTTPS with a private CA (the TLS registry tests start).
            ctx = ssl.create_default_context(cafile=tls_ca)
            handlers.append(urllib.request.HTTPSHandler(context=ctx))
            self.base = f"https://{hostport}"
        else:
            self.base = f"http://{hostport}"
        self.opener = urllib.request.build_opener(*handlers)

    def _basic(self) -> str:
        token = base64.b64encode(f"{self.user}:{self.password or ''}".encode()).decode()
        return "Basic " + token

    def url(self, path: str) -> str:
        return urllib.parse.urljoin(self.base + "/", path)

    def request(self, method: str, url: str, data: bytes | None = None,
                headers: dict | None = None, ok: tuple = (200,)) -> tuple[int, Any, bytes]:
        status, hdrs, body = self._send(method, url, data, headers or {})
        if status == 401:
            status, hdrs, body = self._retry_auth(method, url, data, headers or {}, hdrs)
        if status not in ok:
            snippet = body[:500].decode(errors="replace")
            raise ToolError(f"{method} {url}: HTTP {status} (expected {ok}): {snippet}")
        return status, hdrs, body

    def _retry_auth(self, method, url, data, headers, hdrs) -> tuple[int, Any, bytes]:
        challenge = hdrs.get("WWW-Authenticate", "")
        if not challenge.lower().startswith("basic"):
            raise ToolError(f"{method} {url}: HTTP 401 with unsupported challenge "
                            f"{challenge!r} (only Basic auth is supported)")
        if self.user is None:
            raise ToolError(f"{self.base} requires authentication ({challenge}): "
                            "pass --user and --password")
        if self.auth is not None:
            raise ToolError(f"{self.base} rejected the credentials of user {self.user!r}")
        self.auth = self._basic()
        status, hdrs, body = self._send(method, url, data, headers)
        if status == 401:
            raise ToolError(f"{self.base} rejected the credentials of user {self.user!r}")
        return status, hdrs, body

    def _send(self, method: str, url: str, data: bytes | None,
              headers: dict) -> tuple[int, Any, bytes]:
        req = urllib.request.Request(url, data=data, method=method, headers=dict(headers))
        if self.auth:
            req.add_header("Authorization", self.auth)
        if data is not None:
            req.add_header("Content-Length", str(len(data)))
        try:
            with self.opener.open(req, timeout=120) as resp:
                return resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.headers, err.read()
        except (urllib.error.URLError, OSError) as err:
            raise ToolError(f"{method} {url}: cannot reach the registry: {err}") from None

    def ping(self) -> None:
        self.request("GET", self.url("/v2/"))

    def blob_exists(self, repo: str, digest: str) -> bool:
        status, _, _ = self.request("HEAD", self.url(f"/v2/{repo}/blobs/{digest}"),
                                    ok=(200, 404))
        return status == 200

    def upload_blob(self, repo: str, digest: str, data: bytes) -> None:
        start = self.url(f"/v2/{repo}/blobs/uploads/")
        _, hdrs, _ = self.request("POST", start, data=b"", ok=(202,))
        location = hdrs.get("Location")
        if not location:
            raise ToolError(f"POST {start}: no Location header in the answer")
        url = urllib.parse.urljoin(start, location)
        sep = "&" if urllib.parse.urlsplit(url).query else "?"
        url += sep + urllib.parse.urlencode({"digest": digest})
        _, hdrs, _ = self.request("PUT", url, data=data, ok=(201,),
                                  headers={"Content-Type": "application/octet-stream"})
        check_digest_header(hdrs, digest, f"blob upload to {repo}")

    def push_blob(self, repo: str, digest: str, data: bytes) -> None:
        if not self.blob_exists(repo, digest):
            self.upload_blob(repo, digest, data)

    def put_manifest(self, repo: str, ref: str, media_type: str, data: bytes) -> None:
        url = self.url(f"/v2/{repo}/manifests/{ref}")
        _, hdrs, _ = self.request("PUT", url, data=data, ok=(201,),
                                  headers={"Content-Type": media_type})
        check_digest_header(hdrs, sha256_digest(data), f"manifest {repo}:{ref}")

    def manifest_digest(self, repo: str, ref: str, media_type: str) -> str | None:
        url = self.url(f"/v2/{repo}/manifests/{ref}")
        _, hdrs, _ = self.request("HEAD", url, headers={"Accept": media_type})
        return hdrs.get("Docker-Content-Digest")


def check_digest_header(hdrs: Any, digest: str, what: str) -> None:
    got = hdrs.get("Docker-Content-Digest")
    if got and got != digest:
        raise ToolError(f"{what}: registry reports digest {got}, expected {digest}")


class Layout:
    """A read-only OCI image layout on disk."""

    def __init__(self, path: str):
        self.path = path
        self.name = os.path.basename(path.rstrip("/"))
        with open(os.path.join(path, "index.json"), "rb") as fh:
            self.index = json.load(fh)

    def blob(self, digest: str) -> bytes:
        with open(os.path.join(self.path, "blobs", "sha256", digest_hex(digest)), "rb") as fh:
            data = fh.read()
        if sha256_digest(data) != digest:
            raise ToolError(f"{self.path}: blob {digest} is corrupt")
        return data

    def tagged(self) -> list[tuple[str, dict]]:
        out = []
        for desc in self.index.get("manifests", []):
            ref = desc.get("annotations", {}).get(REF_NAME)
            if ref:
                out.append((ref, desc))
        if not out:
            raise ToolError(f"{self.path}: index.json has no {REF_NAME} annotation")
        return out


def find_layouts(directory: str, only: list[str] | None) -> list[Layout]:
    names = sorted(n for n in os.listdir(directory)
                   if os.path.isfile(os.path.join(directory, n, "oci-layout")))
    if only:
        missing = sorted(set(only) - set(names))
        if missing:
            raise ToolError(f"no image layout in {directory} for: {', '.join(missing)}")
        names = [n for n in names if n in only]
    if not names:
        raise ToolError(f"no OCI image layouts found in {directory} (run `build` first)")
    return [Layout(os.path.join(directory, n)) for n in names]


def push_manifest_tree(reg: Registry, layout: Layout, repo: str, desc: dict,
                       ref: str) -> None:
    """Pushes the blobs and child manifests desc references, then desc as ref."""
    data = layout.blob(desc["digest"])
    doc = json.loads(data)
    media_type = desc.get("mediaType") or doc.get("mediaType")
    if media_type in INDEX_MEDIA_TYPES:
        for child in doc["manifests"]:
            push_manifest_tree(reg, layout, repo, child, child["digest"])
    elif media_type in MANIFEST_MEDIA_TYPES:
        for blob in [doc["config"], *doc["layers"]]:
            reg.push_blob(repo, blob["digest"], layout.blob(blob["digest"]))
    else:
        raise ToolError(f"{layout.path}: unsupported manifest media type {media_type!r}")
    reg.put_manifest(repo, ref, media_type, data)


def push_layout(reg: Registry, layout: Layout, prefix: str, by_ref: bool = False) -> None:
    for name, desc in layout.tagged():
        if by_ref:
            from critest_images import registry_path
            repo, ref = registry_path(name)
        else:
            repo = f"{prefix}/{layout.name}" if prefix else layout.name
            ref = name
        push_manifest_tree(reg, layout, repo, desc, ref)
        got = reg.manifest_digest(repo, ref, desc["mediaType"])
        if got and got != desc["digest"]:
            raise ToolError(f"{repo}:{ref}: registry serves {got}, pushed {desc['digest']}")
        print(f"pushed {repo}:{ref} {desc['digest']}", flush=True)


def cmd_push(args: argparse.Namespace) -> None:
    if args.password is not None and args.user is None:
        raise ToolError("--password needs --user")
    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    layouts = find_layouts(args.dir, only)
    reg = Registry(args.registry, args.user, args.password, args.tls_ca)
    reg.ping()
    for layout in layouts:
        push_layout(reg, layout, args.prefix.strip("/"), args.by_ref)


def cmd_build_critest(args: argparse.Namespace) -> None:
    from critest_images import build
    build(args.out)


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------

def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the test images into DIR")
    build.add_argument("--out", required=True, metavar="DIR")
    build.set_defaults(func=cmd_build)
    push = sub.add_parser("push", help="push the images of DIR to a v2 registry (HTTP)")
    push.add_argument("--dir", required=True, metavar="DIR")
    push.add_argument("--registry", required=True, metavar="HOST:PORT")
    push.add_argument("--user")
    push.add_argument("--password")
    push.add_argument("--prefix", default="bosun")
    push.add_argument("--only", metavar="NAME,...")
    push.add_argument("--tls-ca", metavar="PEM", help="push over HTTPS trusting this CA")
    push.add_argument("--by-ref", action="store_true",
                      help="push each ref name (HOST/REPO:TAG) as REPO:TAG (critest's images)")
    push.set_defaults(func=cmd_push)
    critest = sub.add_parser("build-critest", help="build critest's images into DIR")
    critest.add_argument("--out", required=True, metavar="DIR")
    critest.set_defaults(func=cmd_build_critest)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        args.func(args)
    except ToolError as err:
        print(f"testimages: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
