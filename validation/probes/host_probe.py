"""What the host costs a call, on the lent H200 (issue #30, item 1): ``memmodel calibrate``'s ``host``
step run alone (:mod:`memmodel.gpu.calibrate_host`, whose docstring says what each section
measures), one JSON line a measurement. Its record is the reference the bundled profile's ``host.*``
and ``implementations.<name>.call_host`` figures are fitted to (:mod:`memmodel.calibration.host`).

    python validation/probes/host_probe.py OUT.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from memmodel.gpu.calibrate_host import measure_host  # noqa: E402


def main(out: str) -> None:
    with open(out, "w") as fh:

        def write(row: dict) -> None:
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            print(json.dumps({k: v for k, v in row.items() if k != "kernels"})[:240], flush=True)

        measure_host(on_row=write)


if __name__ == "__main__":
    main(sys.argv[1])
