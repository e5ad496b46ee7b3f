"""`python -m rlft.docs [--check] [--root DIR]`: write (or check) the generated reference pages."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlft.docs.generate import generate, stale

ROOT = Path(__file__).resolve().parents[2]


def _link_on_the_way(root: Path, path: str) -> str | None:
    """Why writing page `path` under `root` would go through a symbolic link (the page, or a folder between the root
    and it), or None."""
    place = root
    for part in Path(path).parts:
        place = place / part
        if place.is_symlink():
            return f"{place.relative_to(root)} is a link to {place.readlink()}"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rlft.docs", description=__doc__)
    ap.add_argument("--check", action="store_true", help="exit 1 naming each stale page instead of writing")
    ap.add_argument("--root", type=Path, default=ROOT, help="the repository root (default: this checkout)")
    args = ap.parse_args(argv)
    if args.check:
        old = stale(args.root)
        for path in old:
            print(f"stale: {path} (regenerate with: python -m rlft.docs)", file=sys.stderr)
        return 1 if old else 0
    pages = generate()
    linked = [why for path in pages if (why := _link_on_the_way(args.root, path))]
    if linked:  # written through, a link would replace a file elsewhere: nothing is written
        print(f"error: not writing through a symbolic link: {'; '.join(linked)}; replace the link with the file "
              f"(or folder) itself and run again", file=sys.stderr)
        return 2
    for path, text in pages.items():
        target = args.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
