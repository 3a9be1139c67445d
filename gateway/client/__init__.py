"""The native asyncio client."""
