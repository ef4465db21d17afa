"""Check every internal link of a built site: each href and src of each HTML
page must name a file of the site, and a #fragment an id in that page.
External links (a scheme or //host) are not followed: no network.

    python scripts/check_links.py site/

Exit 1 with one line per broken link; 0 with a count otherwise.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name") and (name == "id" or tag == "a"):
                self.ids.add(value)
            elif (name == "href" and tag in ("a", "link")) or (name == "src" and tag in ("img", "script")):
                self.links.append(value)


def _parse(path: Path, cache: dict[Path, _Page]) -> _Page:
    if path not in cache:
        page = _Page()
        page.feed(path.read_text(encoding="utf-8", errors="replace"))
        cache[path] = page
    return cache[path]


def _target(site: Path, page: Path, path: str) -> Path | None:
    """The file a link's path names (a folder: its index.html), or None."""
    base = site if path.startswith("/") else page.parent
    found = (base / unquote(path.lstrip("/"))).resolve()
    if found.is_dir():
        found = found / "index.html"
    if not found.is_file() or not found.is_relative_to(site):
        return None
    return found


def check(site: Path) -> tuple[int, list[str]]:
    site = site.resolve()
    cache: dict[Path, _Page] = {}
    broken: list[str] = []
    checked = 0
    for page_path in sorted(site.rglob("*.html")):
        page = _parse(page_path, cache)
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:", "data:")):
                continue
            checked += 1
            where = page_path.relative_to(site)
            target = _target(site, page_path, parts.path) if parts.path else page_path
            if target is None:
                broken.append(f"{where}: {link}: no such file")
                continue
            fragment = unquote(parts.fragment)
            if fragment and target.suffix == ".html" and fragment not in _parse(target, cache).ids:
                broken.append(f"{where}: {link}: no #{fragment} in {target.relative_to(site)}")
    return checked, broken


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: check_links.py SITE_DIR", file=sys.stderr)
        return 2
    checked, broken = check(Path(argv[0]))
    for line in broken:
        print(line)
    if broken:
        print(f"{len(broken)} broken of {checked} internal links", file=sys.stderr)
        return 1
    print(f"{checked} internal links checked, none broken")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
