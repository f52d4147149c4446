#!/usr/bin/env python3
"""Checks relative links and #anchors: in the built mdBook (HTML) and in Markdown files.

    scripts/check-links.py --book docs/book README.md BENCHMARKS.md ARCHITECTURE.md

Every relative link (href, src) must name a file that exists, and every #anchor an id in the
page it points to (in-page or cross-page). In Markdown files, links are resolved against the
file's folder and anchors against the target's headings as GitHub names them. http(s), mailto
and other links with a scheme are not checked (no network). Prints one line per broken link
and a summary; exits 1 when any link is broken. Python 3 standard library only.
"""

import argparse
import html.parser
import os
import re
import sys
import urllib.parse

SKIP_SCHEMES = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


class Page(html.parser.HTMLParser):
    """The ids and the links of one HTML page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.links = []  # (attribute value, line)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id",):
            if attrs.get(key):
                self.ids.add(attrs[key])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            value = attrs.get(key)
            if value is not None and tag in ("a", "img", "link", "script", "iframe", "source"):
                self.links.append((value, self.getpos()[0]))


def parse_html(path):
    page = Page()
    with open(path, encoding="utf-8") as f:
        page.feed(f.read())
    return page


def github_slug(heading):
    """The anchor GitHub (and, for plain headings, mdBook) gives a Markdown heading."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links -> their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def markdown_ids(path):
    """Anchors of a Markdown file's headings (duplicates get -1, -2, ... as on GitHub)."""
    ids, seen, fence = set(), {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^(```+|~~~+)", line)
            if m:
                if fence is None:
                    fence = m.group(1)
                elif line.startswith(fence):
                    fence = None
                continue
            if fence is None:
                h = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if h:
                    slug = github_slug(h.group(1))
                    n = seen.get(slug, 0)
                    seen[slug] = n + 1
                    ids.add(slug if n == 0 else f"{slug}-{n}")
            ids.update(re.findall(r'<a\s+(?:id|name)="([^"]+)"', line))
    return ids


def markdown_links(path):
    """(target, line) of every inline link and image outside code."""
    links, fence = [], None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = re.match(r"^\s*(```+|~~~+)", line)
            if m:
                if fence is None:
                    fence = m.group(1)
                elif line.strip().startswith(fence):
                    fence = None
                continue
            if fence is not None:
                continue
            line = re.sub(r"`[^`]*`", "", line)  # inline code
            for target in re.findall(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", line):
                links.append((target, number))
            for target in re.findall(r"^\s*\[[^\]]+\]:\s*(\S+)", line):  # reference definitions
                links.append((target, number))
    return links


class Checker:
    def __init__(self):
        self.html_cache = {}
        self.md_cache = {}
        self.checked = 0
        self.broken = []

    def ids_of(self, path):
        if path.endswith((".html", ".htm")):
            if path not in self.html_cache:
                self.html_cache[path] = parse_html(path).ids
            return self.html_cache[path]
        if path.endswith(".md"):
            if path not in self.md_cache:
                self.md_cache[path] = markdown_ids(path)
            return self.md_cache[path]
        return None  # anchors into other files are not checked

    def check(self, source, line, link, base_dir, own_ids, index="index.html"):
        if not link or SKIP_SCHEMES.match(link) or link.startswith("//"):
            return
        self.checked += 1
        parts = urllib.parse.urlsplit(link)
        path = urllib.parse.unquote(parts.path)
        fragment = urllib.parse.unquote(parts.fragment)
        where = f"{source}:{line}: {link}"
        if path.startswith("/"):
            self.broken.append(f"{where}: absolute path (use a relative link)")
            return
        if path:
            target = os.path.normpath(os.path.join(base_dir, path))
            if os.path.isdir(target):
                target = os.path.join(target, index)
            if not os.path.exists(target):
                self.broken.append(f"{where}: no file {os.path.relpath(target)}")
                return
            ids = self.ids_of(target) if fragment else None
        else:
            ids = own_ids
        if fragment and ids is not None and fragment not in ids:
            self.broken.append(f"{where}: no anchor #{fragment}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--book", help="the built mdBook folder (HTML)")
    parser.add_argument("markdown", nargs="*", help="Markdown files to check")
    args = parser.parse_args()
    checker = Checker()
    pages = 0
    if args.book:
        for folder, _, files in os.walk(args.book):
            for name in sorted(files):
                # 404.html resolves its links against the site root (<base href>), not itself.
                if not name.endswith(".html") or name == "404.html":
                    continue
                path = os.path.join(folder, name)
                page = parse_html(path)
                checker.html_cache[os.path.normpath(path)] = page.ids
                pages += 1
                for link, line in page.links:
                    checker.check(os.path.relpath(path), line, link, folder, page.ids)
    for md in args.markdown:
        pages += 1
        own = markdown_ids(md)
        for link, line in markdown_links(md):
            checker.check(md, line, link, os.path.dirname(md) or ".", own, index="README.md")
    for b in checker.broken:
        print(f"broken link: {b}", file=sys.stderr)
    print(f"docs: {pages} pages, {checker.checked} links checked, {len(checker.broken)} broken")
    return 1 if checker.broken else 0


if __name__ == "__main__":
    sys.exit(main())
