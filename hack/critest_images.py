"""The images critest (cri-tools v1.32) pulls, built offline from Debian's binaries.

    hack/testimages.py build-critest --out test-images/critest
    hack/testimages.py push --by-ref --dir test-images/critest --registry 127.0.0.1:5000

Each image is an OCI layout DIR/NAME whose index.json names it by every upstream reference it
stands for (registry.k8s.io/e2e-test-images/busybox:1.29-2, gcr.io/k8s-staging-cri-tools/...);
`push --by-ref` pushes each as REPOSITORY:TAG with the registry host dropped, which is where a
daemon that mirrors registry.k8s.io, gcr.io and docker.io to that registry looks.

What critest checks of them, and how these images meet it:
- busybox with hard-linked applets in /bin (critest masks /bin/ls: a masked symlink would mask
  busybox itself), Debian's dynamic busybox (its sh execs /bin/ls, it runs no applet in-process)
  with the host's libc, and the users and groups the user specs expect (www-data 33, ...);
- `pgrep` (busybox has none: a small sh script over /proc) and `ipcs` (util-linux's);
- nginx from Debian's nginx .deb (fetched by hack/setup.sh, never installed: `BOSUN_NGINX_DEB`
  or target/debs/nginx_*.deb), serving "Welcome to nginx!" on :80, or on 127.0.0.1:12003 for the
  host-network image, and writing /var/run/nginx.pid;
- httpd (busybox httpd on :80, its log line names httpd), nonewprivs (a static setuid-root
  program printing its effective uid, built with gcc), images with a User of each form, and
  marker layers that make the tag specs' images distinct or the same.
Not reproducible: test-image-digest@sha256:9700f9a2... is pinned to upstream's bytes; the
digest spec fails offline. No pause image: bosun runs pods without one.
"""

from __future__ import annotations

import glob
import io
import json
import os
import subprocess
import tarfile
import tempfile

from testimages import (
    CREATED, HOST_BUSYBOX, LABEL, MT_OCI_INDEX, REF_NAME, ConfigSpec, Entry, Image, Layer,
    ToolError, add_parent_dirs, check_dynamic_busybox, chroot_run, d, descriptor, digest_hex,
    entry_tarinfo, expect, extract_tar, f, gzip_bytes, host_file_entry, ldd_paths, log,
    make_manifest, native_platform, remove_path, run, sort_key, symlink, to_json,
)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
G = "gcr.io/k8s-staging-cri-tools"
E = "registry.k8s.io/e2e-test-images"

PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\n"
    "daemon:x:1:1:daemon:/usr/sbin:/bin/false\n"
    "bin:x:2:2:bin:/bin:/bin/false\n"
    "sys:x:3:3:sys:/dev:/bin/false\n"
    "sync:x:4:100:sync:/bin:/bin/sync\n"
    "mail:x:8:8:mail:/var/spool/mail:/bin/false\n"
    "www-data:x:33:33:www-data:/var/www:/bin/false\n"
    "operator:x:37:37:Operator:/var:/bin/false\n"
    "nobody:x:65534:65534:nobody:/home:/bin/false\n"
)
GROUP = (
    "root:x:0:\ndaemon:x:1:\nbin:x:2:\nsys:x:3:\nadm:x:4:\ntty:x:5:\ndisk:x:6:\n"
    "wheel:x:10:root\nmail:x:12:\nwww-data:x:33:\noperator:x:37:\nusers:x:100:\n"
    "nogroup:x:65534:\n"
)
PGREP = """#!/bin/sh
# pgrep [-x] PATTERN: the pids whose name matches (an ERE; -x: the whole name), not its own
x=; [ "$1" = "-x" ] && { x=1; shift; }
rc=1
for dir in /proc/[0-9]*; do
  pid=${dir#/proc/}; [ "$pid" = "$$" ] && continue
  comm=$(cat "$dir/comm" 2>/dev/null) || continue
  if [ -n "$x" ]; then [ "$comm" = "$1" ] || continue
  else echo "$comm" | grep -qE -- "$1" || continue; fi
  echo "$pid"; rc=0
done
exit $rc
"""
NNP_C = '#include <stdio.h>\n#include <unistd.h>\n' \
        'int main(void) { printf("Effective uid: %d\\n", (int)geteuid()); return 0; }\n'
NGINX_CONF = """user www-data;
worker_processes 1;
pid /var/run/nginx.pid;
error_log /dev/stderr;
events { worker_connections 256; }
http {
    access_log /dev/stdout;
    default_type text/html;
    types { text/html html htm; }
    server {
        listen LISTEN;
        server_name localhost;
        location / { root /usr/share/nginx/html; index index.html; }
    }
}
"""
HTTPD_CMD = ("trap 'exit 0' TERM; echo 'httpd (busybox) listening on :80'; "
             "httpd -f -v -p 80 -h /usr/local/apache2/htdocs & wait")


def ordered_layer(entries: list[Entry], first: str = "") -> Layer:
    """A gzip layer whose tar has `first` (a hard links' target) before the sorted rest."""
    entries = sorted(entries, key=lambda e: (e.path != first, sort_key(e.path)))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            data = io.BytesIO(entry.data) if entry.kind == "file" else None
            tar.addfile(entry_tarinfo(entry), data)
    raw = buf.getvalue()
    return Layer(raw, gzip_bytes(raw), "application/vnd.oci.image.layer.v1.tar+gzip")


def with_libs(entries: list[Entry], binary: str) -> list[Entry]:
    """entries plus the shared libraries (at their host paths) binary needs."""
    seen = {e.path for e in entries}
    for lib in ldd_paths(binary):
        dest = os.path.normpath(lib).lstrip("/")
        if dest not in seen:
            seen.add(dest)
            entries.append(host_file_entry(lib, dest))
    return entries


def busybox_layer() -> Layer:
    dirs = ["bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "home", "proc", "sys", "dev",
            "var", "var/run", "var/www", "run"]
    entries = [d(p) for p in dirs] + [d("tmp", 0o1777), d("root", 0o700)]
    entries.append(host_file_entry(HOST_BUSYBOX, "bin/busybox"))
    entries = with_libs(entries, HOST_BUSYBOX)
    applets = run([HOST_BUSYBOX, "--list-full"]).stdout.split()
    seen = {e.path for e in entries}
    for path in applets:
        if path not in seen and path != "linuxrc":
            seen.add(path)
            entries.append(Entry(path, "hardlink", 0o755, link="bin/busybox"))
    entries += [f("etc/passwd", PASSWD), f("etc/group", GROUP),
                f("etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n"),
                f("etc/hosts", ""), f("etc/resolv.conf", ""), f("etc/hostname", ""),
                f("usr/bin/pgrep", PGREP, 0o755)]
    entries.append(host_file_entry("/usr/bin/ipcs", "usr/bin/ipcs"))
    entries = with_libs(entries, "/usr/bin/ipcs")
    return ordered_layer(add_parent_dirs(entries), "bin/busybox")


def nginx_deb() -> str:
    explicit = os.environ.get("BOSUN_NGINX_DEB")
    found = [explicit] if explicit else sorted(
        glob.glob(os.path.join(REPO_ROOT, "target", "debs", "nginx_*.deb")))
    if not found or not os.path.isfile(found[-1]):
        raise ToolError("no nginx .deb: hack/setup.sh fetches it into target/debs "
                        "(apt-get download nginx), or set BOSUN_NGINX_DEB")
    return found[-1]


def nginx_layer(nginx_bin: str, listen: str) -> Layer:
    entries = [host_file_entry(nginx_bin, "usr/sbin/nginx")]
    entries = with_libs(entries, nginx_bin)
    entries += [d("etc/nginx"), d("var/log/nginx"), d("var/lib/nginx"), d("var/cache/nginx"),
                symlink("var/log/nginx/access.log", "/dev/stdout"),
                symlink("var/log/nginx/error.log", "/dev/stderr"),
                f("etc/nginx/nginx.conf", NGINX_CONF.replace("LISTEN", listen)),
                f("usr/share/nginx/html/index.html",
                  "<html><body><h1>Welcome to nginx!</h1></body></html>\n")]
    return ordered_layer(add_parent_dirs(entries))


def nnp_layer() -> Layer:
    with tempfile.TemporaryDirectory(prefix="bosun-nnp-") as tmp:
        src, out = os.path.join(tmp, "nnp.c"), os.path.join(tmp, "nnp")
        with open(src, "w") as fh:
            fh.write(NNP_C)
        proc = run(["gcc", "-static", "-O2", "-o", out, src])
        if proc.returncode != 0:
            raise ToolError(f"gcc -static nnp.c failed (build-essential): {proc.stderr}")
        with open(out, "rb") as fh:
            data = fh.read()
    return ordered_layer(add_parent_dirs([f("usr/local/bin/nnp", data, 0o4755)]))


def marker_layer(name: str) -> Layer:
    return ordered_layer([f(name, "")])


def predefined_group_layer() -> Layer:
    passwd = PASSWD + "default-user:x:1000:1000::/home/default-user:/bin/sh\n"
    group = GROUP + "default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n"
    return ordered_layer([d("etc"), f("etc/passwd", passwd), f("etc/group", group),
                          d("home"), d("home/default-user", 0o755, 1000, 1000)])


def httpd_layer() -> Layer:
    html = "<html><body><h1>It works!</h1></body></html>\n"
    return ordered_layer(add_parent_dirs([f("usr/local/apache2/htdocs/index.html", html)]))


def catalogue() -> tuple[list[tuple[str, ConfigSpec, list[Layer], list[str]]], str]:
    """(layout name, config, layers, upstream references) of every critest image, and the
    busybox version."""
    version = check_dynamic_busybox()
    bb = busybox_layer()
    verify_busybox(bb)
    with tempfile.TemporaryDirectory(prefix="bosun-nginx-") as tmp:
        subprocess.run(["dpkg-deb", "-x", nginx_deb(), tmp], check=True)
        nginx80 = nginx_layer(os.path.join(tmp, "usr/sbin/nginx"), "80")
        nginx12003 = nginx_layer(os.path.join(tmp, "usr/sbin/nginx"), "127.0.0.1:12003")
    arch = native_platform()["architecture"]
    sh = ConfigSpec(["sh"])
    nginx_cmd = ["nginx", "-g", "daemon off;"]
    out = [
        ("busybox", sh, [bb], [f"{E}/busybox:1.29-2", "docker.io/library/busybox:1.36.1",
                               "docker.io/library/busybox:latest"]),
        ("nginx", ConfigSpec(nginx_cmd), [bb, nginx80], [f"{E}/nginx:1.14-2"]),
        ("hostnet-nginx", ConfigSpec(nginx_cmd), [bb, nginx12003],
         [f"{G}/hostnet-nginx-{arch}:latest", f"{G}/hostnet-nginx:latest"]),
        ("httpd", ConfigSpec(["sh", "-c", HTTPD_CMD]), [bb, httpd_layer()],
         [f"{E}/httpd:2.4.39-4"]),
        ("nonewprivs", ConfigSpec(["/usr/local/bin/nnp"]), [bb, nnp_layer()],
         [f"{E}/nonewprivs:1.3"]),
        ("test-image-user-uid", ConfigSpec(["sh"], user="1002"), [bb],
         [f"{G}/test-image-user-uid:latest"]),
        ("test-image-user-username", ConfigSpec(["sh"], user="www-data"), [bb],
         [f"{G}/test-image-user-username:latest"]),
        ("test-image-user-uid-group", ConfigSpec(["sh"], user="1003:1004"), [bb],
         [f"{G}/test-image-user-uid-group:latest"]),
        ("test-image-user-username-group", ConfigSpec(["sh"], user="www-data:1004"), [bb],
         [f"{G}/test-image-user-username-group:latest"]),
        ("test-image-predefined-group", ConfigSpec(["sh"], user="1000"),
         [bb, predefined_group_layer()], [f"{G}/test-image-predefined-group:latest"]),
    ]
    for mark in ("test-image-1", "test-image-2", "test-image-3", "test-image-latest",
                 "test-image-digest"):
        out.append((mark, sh, [bb, marker_layer(mark)], [f"{G}/{mark}:latest"]))
    out += [
        ("test-image-tags", sh, [bb, marker_layer("same-image")],
         [f"{G}/test-image-tags:{n}" for n in (1, 2, 3)]),
        ("test-image-tag-test", sh, [bb, marker_layer("test")], [f"{G}/test-image-tag:test"]),
        ("test-image-tag-all", sh, [bb, marker_layer("all")], [f"{G}/test-image-tag:all"]),
    ]
    return out, version


def write_layout(image: Image, refs: list[str], path: str) -> None:
    """An OCI layout of image whose index names it by every ref."""
    remove_path(path)
    os.makedirs(os.path.join(path, "blobs", "sha256"))
    for digest, data in sorted(image.blobs().items()):
        with open(os.path.join(path, "blobs", "sha256", digest_hex(digest)), "wb") as fh:
            fh.write(data)
    index = {"schemaVersion": 2, "mediaType": MT_OCI_INDEX,
             "manifests": [descriptor(image.media_type, image.data,
                                      annotations={REF_NAME: ref}) for ref in refs]}
    with open(os.path.join(path, "index.json"), "wb") as fh:
        fh.write(to_json(index))
    with open(os.path.join(path, "oci-layout"), "wb") as fh:
        fh.write(to_json({"imageLayoutVersion": "1.0.0"}))


def build(out_dir: str) -> None:
    out_dir = os.path.abspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    native = native_platform()
    images, version = catalogue()
    summary = {"generated_by": "hack/testimages.py build-critest", "created": CREATED,
               "busybox_version": version, "images": {}}
    for name, spec, layers, refs in images:
        hist = [f"bosun critest images: layer {i}" for i in range(len(layers))]
        image = Image(name, make_manifest(native, spec, layers, hist, f"critest/{name}"))
        write_layout(image, refs, os.path.join(out_dir, name))
        summary["images"][name] = {"digest": image.digest, "refs": refs}
        print(f"built critest/{name:31} {image.digest}")
    with open(os.path.join(out_dir, "images.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
        fh.write("\n")
    print(f"wrote {len(images)} critest images to {out_dir} (label {LABEL})")


def registry_path(ref: str) -> tuple[str, str]:
    """(repository, tag) of a full reference, its registry host dropped."""
    host, _, rest = ref.partition("/")
    repo, _, tag = rest.rpartition(":")
    if not host or not repo or not tag or "/" in tag:
        raise ToolError(f"{ref!r} is not HOST/REPOSITORY:TAG")
    return repo, tag


def verify_busybox(layer: Layer) -> None:
    """Runs the layer's sh, ls, id, pgrep and ipcs with chroot (root only)."""
    if os.geteuid() != 0:
        log("warning: not root: skipping the chroot check of critest's busybox layer")
        return
    with tempfile.TemporaryDirectory(prefix="bosun-critest-bb-") as tmp:
        extract_tar(layer.tar, tmp)
        script = "echo ok; id www-data; pgrep -x sh; ipcs -m >/dev/null && echo ipcs-ok"
        text = chroot_run(tmp, "/bin/sh", "-c", script)
        expect(text.startswith("ok\n"), "critest busybox sh does not run under chroot", text)
        expect("uid=33(www-data) gid=33(www-data)" in text, "www-data does not resolve", text)
        expect("ipcs-ok" in text, "ipcs does not run", text)
        expect(os.stat(f"{tmp}/bin/ls").st_ino == os.stat(f"{tmp}/bin/busybox").st_ino,
               "/bin/ls is not a hard link of busybox", text)
