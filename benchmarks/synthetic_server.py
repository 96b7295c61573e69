#!/usr/bin/env python3
"""Entry point kept for scripts that start the synthetic server by path (benchmarks/probe_capacity.py).

The server itself lives with the other fakes in tailpod/sandbox/synthetic_server.py.
"""

from __future__ import annotations

import sys

from tailpod.sandbox.synthetic_server import main

if __name__ == "__main__":
    sys.exit(main())
