from __future__ import annotations

from tests import _aioresponses_compat

_aioresponses_compat.install()
