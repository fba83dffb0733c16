#!/bin/sh
# Builds a checkpoint OCI image from a checkpoint archive without buildah (KEP 2008: the
# archive's files as the one layer, CRI-O's annotation naming the container), as an OCI
# image layout tar, for a node (kind, CI) that has bosun but no buildah:
#
#   hack/checkpoint-image.sh ARCHIVE CONTAINER OUT.tar
#   bosun image import OUT.tar --tag localhost/counter-checkpoint:latest      # on the node
#   skopeo copy oci-archive:OUT.tar docker://127.0.0.1:5000/counter-checkpoint:latest  # or a registry
#
# The layer is the archive itself (a tar is a layer). Needs sha256sum, stat and tar.
set -eu
[ $# -eq 3 ] || { echo "usage: $0 ARCHIVE CONTAINER OUT.tar" >&2; exit 2; }
archive=$1 container=$2 out=$3
[ -f "$archive" ] || { echo "$0: $archive: no such archive" >&2; exit 1; }
case "$container" in
  '' | *[!a-z0-9-]*) echo "$0: container name '$container': lowercase letters, digits and '-' only" >&2; exit 1 ;;
esac
case "$(uname -m)" in
  x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; *) arch=$(uname -m) ;;
esac
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/blobs/sha256"
# blob TEXT: stores TEXT as a blob, prints its digest (hex).
blob() {
  d=$(printf '%s' "$1" | sha256sum | cut -d' ' -f1)
  printf '%s' "$1" >"$dir/blobs/sha256/$d"
  echo "$d"
}
layer=$(sha256sum "$archive" | cut -d' ' -f1)
cp "$archive" "$dir/blobs/sha256/$layer"
layer_size=$(stat -c %s "$archive")
config='{"architecture":"'$arch'","os":"linux","config":{},"rootfs":{"type":"layers","diff_ids":["sha256:'$layer'"]}}'
config_digest=$(blob "$config")
manifest='{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",'
manifest=$manifest'"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:'$config_digest'","size":'${#config}'},'
manifest=$manifest'"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:'$layer'","size":'$layer_size'}],'
manifest=$manifest'"annotations":{"io.kubernetes.cri-o.annotations.checkpoint.name":"'$container'"}}'
manifest_digest=$(blob "$manifest")
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s}]}' \
  "$manifest_digest" "${#manifest}" >"$dir/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' >"$dir/oci-layout"
tar -C "$dir" -cf "$out" oci-layout index.json blobs
