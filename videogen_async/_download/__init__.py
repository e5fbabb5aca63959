"""Downloading finished videos: streamed, atomic, resumable, and never with the API key.

A source (a succeeded ``Task``, a task id, or an ``http(s)`` URL) is resolved to its video URL
(``_sources``); the body is streamed through ``Transport.stream``, which never sends the
``Authorization`` header to the media host, into a temporary file beside the destination,
resumed with ``Range`` after a broken connection, and renamed over the destination only once
complete and of the declared size (``_file``). ``docs/downloads.md`` tells how each step is
guarded.
"""
