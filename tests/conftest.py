"""Test-suite settings: every probe read is checked against its reader's declaration (strict mode).

Set in the environment, so the CLI run in-process and ``python -m llmdoctor`` subprocesses are strict too.
"""

from __future__ import annotations

import os

from llmdoctor.context import STRICT_ENV

os.environ[STRICT_ENV] = "1"
