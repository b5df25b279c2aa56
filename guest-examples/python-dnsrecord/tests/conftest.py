"""The shared fixtures rate children with the operon binary (``$OPERON``, else
``operon`` on ``PATH``). In this repository, the one ``cargo build -p operon``
writes serves when neither is set, so ``python3 -m pytest`` works as it is."""

import os
import shutil
from pathlib import Path

_BUILT = Path(__file__).resolve().parents[3] / "target" / "debug" / "operon"

if not os.environ.get("OPERON") and shutil.which("operon") is None and _BUILT.is_file():
    os.environ["OPERON"] = str(_BUILT)
