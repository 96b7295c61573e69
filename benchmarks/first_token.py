"""Seconds from an `up` call to the first measured token of its sweep (gpu_vllm.sh coldwarm).

Usage: first_token.py UP_CALLED_AT RUN_DIR OUT_JSON. Each request row carries `t_start` (the send,
on this machine's clock) and `ttft_s`; the first token of the run is the earliest send plus its TTFT.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    t_up, run, out_path = float(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    rows = [json.loads(x) for x in (run / "rows.jsonl").read_text().splitlines() if x.strip()]
    firsts = [r["t_start"] + r["ttft_s"] for r in rows
              if isinstance(r.get("t_start"), float) and isinstance(r.get("ttft_s"), float)]
    first = min(firsts) if firsts else None
    out = {"up_called_at": t_up, "first_token_at": first,
           "s_to_first_token": None if first is None else round(first - t_up, 3)}
    out_path.write_text(json.dumps(out, indent=1))
    print(out)


if __name__ == "__main__":
    main()
