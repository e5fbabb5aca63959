"""Downloading finished videos: streamed, atomic, resumable, and never with the API key.

A source is resolved to its video URL (``_sources``); the body is streamed by
``Transport.stream`` (no ``Authorization`` to the media host) into a temporary file, resumed
with ``Range`` and renamed over the destination once complete (``_file``). See
``docs/downloads.md``.
"""
