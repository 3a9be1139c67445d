"""Generated protobuf modules (see proto/generate.sh); never edit by hand."""
