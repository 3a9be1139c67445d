#!/bin/sh
# Regenerates gateway/pb/ from every proto/*.proto; run from anywhere.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
for src in "$root"/proto/*.proto; do
  name=$(basename "$src" .proto)
  "$py" -m grpc_tools.protoc -I "$root/proto" --python_out="$root/gateway/pb" --pyi_out="$root/gateway/pb" "$src"
  for f in "$root/gateway/pb/${name}_pb2.py" "$root/gateway/pb/${name}_pb2.pyi"; do
    { echo "# Generated from proto/$name.proto; do not edit. Regenerate: proto/generate.sh"; cat "$f"; } > "$f.tmp"
    mv "$f.tmp" "$f"
  done
done
