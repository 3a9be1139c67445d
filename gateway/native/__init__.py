"""The native protocol: protobuf frames over TCP."""
