#!/bin/sh
# Regenerates gateway/pb/ from proto/; run from anywhere.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
"$py" -m grpc_tools.protoc -I "$root/proto" --python_out="$root/gateway/pb" --pyi_out="$root/gateway/pb" "$root/proto/gateway.proto"
for f in "$root"/gateway/pb/gateway_pb2.py "$root"/gateway/pb/gateway_pb2.pyi; do
  { echo "# Generated from proto/gateway.proto; do not edit. Regenerate: proto/generate.sh"; cat "$f"; } > "$f.tmp"
  mv "$f.tmp" "$f"
done
