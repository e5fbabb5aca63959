"""Downloading finished videos: streamed, atomic, resumable, and never with the API key.

One download goes like this:

1. The source is resolved to a URL: a :class:`~videogen_async.Task` that succeeded carries its
   ``video_url``; a task id is fetched first (and must have succeeded); an ``http(s)`` URL is
   used as it is.
2. The body is streamed in chunks through ``Transport.stream``, which never sends the
   ``Authorization`` header to the media host, asking for ``Accept-Encoding: identity`` so that
   the bytes counted are the bytes ``Content-Length`` declares.
3. Chunks go to a temporary file in the destination's directory (``.NAME.XXXX.part``), written
   from a worker thread so that the event loop never blocks on the disk.
4. A broken connection is resumed with ``Range: bytes=N-`` (and ``If-Range`` when the first
   answer carried a validator), used only when it is a ``206`` whose ``Content-Range`` starts
   exactly at ``N`` with the same total size; anything else starts the file over. A few
   attempts are made in all, as the one retry decision says.
5. The received size must equal the declared one, neither shorter nor longer. Only then is the
   temporary file flushed, ``fsync``-ed and renamed over the destination (``os.replace``). On
   any failure, or cancellation, it is removed: a file at the destination is always complete.
"""
