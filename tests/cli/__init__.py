"""Tests of the ``videogen`` command line."""
