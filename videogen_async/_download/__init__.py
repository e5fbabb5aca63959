"""Downloading finished videos: streamed, atomic, resumable, and never with the API key.

One download goes like this:

1. The source is resolved to a URL: a :class:`~videogen_async.Task` that succeeded carries its
   ``video_url``; a task id is fetched first (and must have succeeded); an ``http(s)`` URL is
   used as it is.
2. The body is streamed in chunks (bounded memory) through ``Transport.stream``, which never
   sends the ``Authorization`` header: the video lives on a media host, not on the service,
   and the key must not leak there. ``Accept-Encoding: identity`` is asked for, so that the
   bytes counted are the bytes declared by ``Content-Length``.
3. Chunks go to a temporary file *in the destination's directory* (``.NAME.XXXX.part``), written
   from a worker thread so that the event loop never blocks on the disk.
4. A connection that breaks mid-file is resumed with ``Range: bytes=N-`` (plus ``If-Range`` when
   the first answer carried a validator). A resumed answer is used only when it is a ``206``
   whose ``Content-Range`` starts exactly at ``N`` and names the same total size; a ``200`` (the
   host ignored ``Range``) or any other range starts the file over. A few attempts are made in
   all, with a short jittered backoff between them.
5. The received size must equal ``Content-Length`` (or the total of ``Content-Range``): a short
   body is never accepted, a longer one neither. Only then is the temporary file flushed,
   ``fsync``-ed and renamed over the destination (``os.replace``, atomic on one filesystem).
   On any failure, or cancellation, the temporary file is removed: a file at the destination
   path is always a complete download.
"""
