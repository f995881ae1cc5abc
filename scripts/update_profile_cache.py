"""Write the parsed copies of the bundled profiles (``memmodel/hardware/profiles/_parsed/``).

Every start-up reads the profile asked for and the one it derives from; reading their parsed
copies instead of parsing the YAML saves about 10 ms of a ~200 ms command. A copy is used only
if it was made of the YAML file's exact bytes (``memmodel.hardware.load.content_key``), so a
stale copy costs speed, never correctness. Run this after editing a bundled profile;
``--check`` exits 1 if a copy is stale or missing (the test suite checks the same).

    python scripts/update_profile_cache.py [--check]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from memmodel.hardware.load import PARSED_DIR, parsed_entry  # noqa: E402


def expected() -> dict[Path, str]:
    """Each parsed copy's path and the text it should hold; every YAML file parsed with the
    same loader :func:`memmodel.hardware.load.load_file` uses."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out: dict[Path, str] = {}
    for source in sorted(PARSED_DIR.parent.glob("*.yaml")):
        text = source.read_text(encoding="utf-8")
        entry = parsed_entry(text, yaml.load(text, Loader=loader))
        out[PARSED_DIR / f"{source.stem}.json"] = json.dumps(entry, separators=(",", ":"), ensure_ascii=False) + "\n"
    return out


def stale() -> list[str]:
    """What is out of date: copies to write or rewrite, and copies of no YAML file."""
    want = expected()
    problems = [
        f"{p.relative_to(ROOT)} is {'stale' if p.exists() else 'missing'}"
        for p, text in want.items()
        if not p.exists() or p.read_text(encoding="utf-8") != text
    ]
    problems += [f"{p.relative_to(ROOT)} has no YAML file" for p in sorted(PARSED_DIR.glob("*.json")) if p not in want]
    return problems


def main(argv: list[str]) -> int:
    if "--check" in argv:
        problems = stale()
        for line in problems:
            print(f"{line}: run python scripts/update_profile_cache.py", file=sys.stderr)
        return 1 if problems else 0
    want = expected()
    PARSED_DIR.mkdir(exist_ok=True)
    for p in PARSED_DIR.glob("*.json"):
        if p not in want:
            p.unlink()
    for p, text in want.items():
        if not p.exists() or p.read_text(encoding="utf-8") != text:
            p.write_text(text, encoding="utf-8")
            print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
