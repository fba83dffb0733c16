#!/usr/bin/env python3
"""The kind node image as a docker-archive: Debian's root file system tar, then bosun's layer.

archive.py BASE_TAR BOSUN_BINARY REPO OUT_TAR (run by hack/kind/build.sh)
"""
import hashlib
import io
import json
import sys
import tarfile

TAG = "localhost/bosun-node:dev"
MTIME = 1700000000

# /etc/bosun/config.toml in the node: the kubelet's cgroup driver, containerd's socket path.
CONFIG = """\
# bosun in a kind node (hack/kind/build.sh; docs/kind.md)
cgroup_driver = "systemd"
extra_sockets = ["/run/containerd/containerd.sock"]
"""


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def info(name, **kw):
    t = tarfile.TarInfo(name)
    t.mtime = MTIME
    for k, v in kw.items():
        setattr(t, k, v)
    return t


def bosun_layer(binary, repo):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add_dir(path):
            tar.addfile(info(path, type=tarfile.DIRTYPE, mode=0o755))

        def add_file(path, data, mode=0o644):
            tar.addfile(info(path, size=len(data), mode=mode), io.BytesIO(data))

        def add_link(path, target):
            tar.addfile(info(path, type=tarfile.SYMTYPE, linkname=target, mode=0o777))

        for d in ["etc", "etc/bosun", "etc/containerd", "etc/containerd/certs.d", "etc/cni",
                  "etc/cni/net.d", "etc/systemd", "etc/systemd/system",
                  "etc/systemd/system/multi-user.target.wants", "usr", "usr/local",
                  "usr/local/bin"]:
            add_dir(d)
        with open(binary, "rb") as f:
            add_file("usr/local/bin/bosun", f.read(), 0o755)
        add_link("usr/local/bin/ctr", "bosun")
        with open(f"{repo}/contrib/systemd/bosun.service", "rb") as f:
            add_file("etc/systemd/system/bosun.service", f.read())
        add_link("etc/systemd/system/multi-user.target.wants/bosun.service",
                 "/etc/systemd/system/bosun.service")
        with open(f"{repo}/contrib/crictl.yaml", "rb") as f:
            add_file("etc/crictl.yaml", f.read())
        add_file("etc/bosun/config.toml", CONFIG.encode())
    return buf.getvalue()


def main():
    base, binary, repo, out = sys.argv[1:5]
    top = bosun_layer(binary, repo)
    base_id = sha256_file(base)
    top_id = hashlib.sha256(top).hexdigest()
    config = json.dumps({
        "architecture": "amd64",
        "os": "linux",
        "created": "2023-11-14T22:13:20Z",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "container=docker"],
            "Cmd": ["/sbin/init"],
            "StopSignal": "SIGRTMIN+3",
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{base_id}", f"sha256:{top_id}"]},
    }, sort_keys=True).encode()
    config_id = hashlib.sha256(config).hexdigest()
    manifest = json.dumps([{
        "Config": f"{config_id}.json",
        "RepoTags": [TAG],
        "Layers": [f"{base_id}/layer.tar", f"{top_id}/layer.tar"],
    }]).encode()
    with tarfile.open(out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in (base_id, top_id):
            tar.addfile(info(d, type=tarfile.DIRTYPE, mode=0o755))
        t = tar.gettarinfo(base, arcname=f"{base_id}/layer.tar")
        t.mtime, t.uid, t.gid, t.uname, t.gname = MTIME, 0, 0, "", ""
        with open(base, "rb") as f:
            tar.addfile(t, f)
        tar.addfile(info(f"{top_id}/layer.tar", size=len(top)), io.BytesIO(top))
        tar.addfile(info(f"{config_id}.json", size=len(config)), io.BytesIO(config))
        tar.addfile(info("manifest.json", size=len(manifest)), io.BytesIO(manifest))


if __name__ == "__main__":
    main()
