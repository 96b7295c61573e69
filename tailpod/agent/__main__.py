"""`python3 -I agent.pyz <verb> [<sub>]` (or `python -m tailpod.agent ...`): see docs/agent.md."""

from __future__ import annotations

import sys

from .verbs import main

sys.exit(main())
