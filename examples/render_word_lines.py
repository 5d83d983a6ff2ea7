"""Render lines of dictionary words in Debian's fonts: a training folder and a test folder whose
fonts the training never sees, each with a ``labels.txt``, ready for ``onemodel-cy pack``.

    apt-get update
    apt-get install -y fonts-dejavu-core fonts-dejavu-extra fonts-liberation fonts-liberation2 \\
        fonts-freefont-ttf fonts-crosextra-carlito fonts-crosextra-caladea fonts-urw-base35 \\
        fonts-open-sans fonts-lato fonts-texgyre fonts-linuxlibertine fonts-noto-core \\
        fonts-roboto-unhinted wamerican
    python examples/render_word_lines.py lines/            # lines/train (22,000), lines/test (2,000)
    onemodel-cy pack lines/train train.pack --labels lines/train/labels.txt
    onemodel-cy pack lines/test test.pack --labels lines/test/labels.txt --vocabulary-from train.pack

Fonts: every TrueType, OpenType and Type 1 file under ``--font-dir`` (default
``/usr/share/fonts`` and TeX Gyre's ``/usr/share/texmf/fonts``), one per family and style,
kept when it draws every symbol of the vocabulary with a glyph of its own (not the font's
"missing glyph" box); symbol, math and ornament faces, and the weights thinner than Light,
are left out. The families of ``TEST_FAMILIES`` are the test set's and never the training
set's: Palatino's design (URW P052, TeX Gyre Pagella), Lato's (Lato and its derivative
Carlito) and Caladea. Each line picks a family uniformly, then one of its styles, so that a
family with many weights (Noto, Lato) weighs no more than one with four.

Text: 1 to ``--max-words`` words of ``--words`` (default ``/usr/share/dict/words`` from
Debian's ``wamerican``; only the words spelt with the vocabulary), sometimes capitalised or
in capitals, sometimes followed by a comma or a full stop, sometimes a number instead. The
vocabulary is ``VOCABULARY``: letters, digits, space and ``'.,``.

Pictures: dark text on a light background (each line its own ink and paper grey), drawn at
a large size between the font's own top and bottom (its ``Hgjpqy`` box, so a word without
ascenders is not blown up), with random margins, then scaled to ``--height`` (32) pixels,
8-bit grey PNG. Everything is a pure function of ``--seed`` and the installed fonts.
"""
from __future__ import annotations

import argparse
import glob
import os
import random
import re
import string
import sys
import time

from PIL import Image, ImageDraw, ImageFont

VOCABULARY = string.ascii_letters + string.digits + " '.,"
TEST_FAMILIES = ("P052", "TeX Gyre Pagella", "Lato", "Carlito", "Caladea")
# Faces whose letters are not letters (symbols, math, ornaments, initials) or not for text lines.
EXCLUDED = re.compile(r"Symbols?|Math|Music|Dingbats|D050000L|Initials|Keyboard|Z003|Chorus|Numerals|Siyaq")
THIN = re.compile(r"Hairline|Thin|ExtraLight|Extra Light|UltraLight")
FONT_DIRS = ("/usr/share/fonts", "/usr/share/texmf/fonts")
APT_LINE = ("apt-get update && apt-get install -y fonts-dejavu-core fonts-dejavu-extra fonts-liberation "
            "fonts-liberation2 fonts-freefont-ttf fonts-crosextra-carlito fonts-crosextra-caladea fonts-urw-base35 "
            "fonts-open-sans fonts-lato fonts-texgyre fonts-linuxlibertine fonts-noto-core fonts-roboto-unhinted "
            "wamerican")
DRAW_SIZE = 48          # pixels per em when drawing, before scaling to the line height
MISSING = "\U0010fffd"  # a private-use code point no text font has: its drawing is the "missing glyph" box


def font_files(dirs):
    found = []
    for folder in dirs:
        for pattern in ("**/*.ttf", "**/*.otf", "**/*.t1", "**/*.pfb"):
            found += glob.glob(os.path.join(folder, pattern), recursive=True)
    return sorted(set(found))


def glyph_bitmap(font, text):
    mask = font.getmask(text)
    return mask.size, bytes(mask)


def draws_every_symbol(font, symbols):
    """True when ``font`` draws each symbol (space aside) with ink, and not as its missing-glyph box."""
    missing = glyph_bitmap(font, MISSING)
    for symbol in symbols:
        if symbol == " ":
            continue
        drawn = glyph_bitmap(font, symbol)
        if drawn == missing or not any(drawn[1]):
            return False
    return True


def find_fonts(dirs, symbols):
    """{family: [(style, path), ...]} of the usable faces, one file per (family, style)."""
    families, skipped = {}, 0
    for path in font_files(dirs):
        try:
            font = ImageFont.truetype(path, DRAW_SIZE)
        except OSError:
            skipped += 1
            continue
        family, style = font.getname()
        if family is None or EXCLUDED.search(family) or THIN.search(f"{family} {style}"):
            continue
        styles = families.setdefault(family, {})
        if style in styles or not draws_every_symbol(font, symbols):
            continue
        styles[style] = path
    return {family: sorted(styles.items()) for family, styles in sorted(families.items()) if styles}, skipped


def read_words(path, symbols):
    try:
        with open(path, encoding="utf-8") as fh:
            words = [w.strip() for w in fh]
    except OSError as error:
        raise SystemExit(f"{path}: {error.strerror}; install Debian's word list (wamerican: {APT_LINE}) or pass "
                         f"--words FILE (one word a line)") from None
    allowed = set(symbols) - {" "}
    words = sorted({w for w in words if w and set(w) <= allowed})
    if len(words) < 100:
        raise SystemExit(f"{path}: only {len(words)} words are spelt with the vocabulary {symbols!r}; "
                         f"at least 100 are needed")
    return words


def line_text(rng, words, max_words):
    tokens = []
    for _ in range(rng.randint(1, max_words)):
        if rng.random() < 0.08:
            token = str(rng.choice([rng.randint(0, 99), rng.randint(100, 9999), rng.randint(1900, 2029)]))
        else:
            token = rng.choice(words)
            case = rng.random()
            if case < 0.15:
                token = token[:1].upper() + token[1:]
            elif case < 0.2:
                token = token.upper()
        if rng.random() < 0.1:
            token += rng.choice(",.")
        tokens.append(token)
    return " ".join(tokens)


def render(rng, text, font_path, height):
    """``text`` in the font at ``font_path``: an 8-bit grey line ``height`` pixels high."""
    font = ImageFont.truetype(font_path, DRAW_SIZE)
    top, bottom = font.getbbox("Hgjpqy")[1::2]         # the font's own line box
    left, _, right, _ = font.getbbox(text)
    box = bottom - top
    pad_top, pad_bottom = (int(rng.uniform(0.02, 0.2) * box) for _ in range(2))
    pad_left, pad_right = (int(rng.uniform(0.05, 0.5) * box) for _ in range(2))
    ink, paper = rng.randint(0, 90), rng.randint(165, 255)
    image = Image.new("L", (right - left + pad_left + pad_right, box + pad_top + pad_bottom), paper)
    ImageDraw.Draw(image).text((pad_left - left, pad_top - top), text, font=font, fill=ink)
    width = max(1, round(image.width * height / image.height))
    return image.resize((width, height), Image.LANCZOS)


def write_set(folder, count, fonts, words, args, rng):
    """``count`` lines into ``folder`` (``000000.png``, ...) and its ``labels.txt``."""
    os.makedirs(folder, exist_ok=True)
    families = sorted(fonts)
    with open(os.path.join(folder, "labels.txt"), "w", encoding="utf-8") as labels:
        for k in range(count):
            text = line_text(rng, words, args.max_words)
            _, font_path = rng.choice(fonts[rng.choice(families)])
            name = f"{k:06d}.png"
            render(rng, text, font_path, args.height).save(os.path.join(folder, name))
            labels.write(f"{name}\t{text}\n")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="the folder to write train/ and test/ into")
    p.add_argument("--train-lines", type=int, default=22000)
    p.add_argument("--test-lines", type=int, default=2000)
    p.add_argument("--max-words", type=int, default=3, help="words per line: 1 to this many")
    p.add_argument("--height", type=int, default=32, help="line height in pixels")
    p.add_argument("--words", default="/usr/share/dict/words", help="the word list, one word a line")
    p.add_argument("--font-dir", action="append", help=f"where to look for fonts (default: {', '.join(FONT_DIRS)})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--list-fonts", action="store_true", help="print the train and test fonts and stop")
    args = p.parse_args(argv)
    if args.train_lines < 1 or args.test_lines < 1 or args.max_words < 1 or args.height < 8:
        p.error("--train-lines, --test-lines and --max-words must be >= 1 and --height >= 8")
    return args


def split_fonts(fonts):
    test = {family: styles for family, styles in fonts.items() if family in TEST_FAMILIES}
    train = {family: styles for family, styles in fonts.items() if family not in TEST_FAMILIES}
    if not test or not train:
        raise SystemExit(f"found {len(train)} training and {len(test)} test font families (the test ones: "
                         f"{', '.join(TEST_FAMILIES)}); install Debian's fonts first: {APT_LINE}")
    return train, test


def describe(name, fonts):
    faces = sum(len(styles) for styles in fonts.values())
    return f"{name}: {len(fonts)} families, {faces} faces"


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    fonts, unreadable = find_fonts(args.font_dir or FONT_DIRS, VOCABULARY)
    train_fonts, test_fonts = split_fonts(fonts)
    print(f"{describe('training fonts', train_fonts)}; {describe('test fonts', test_fonts)} "
          f"({', '.join(sorted(test_fonts))}); {unreadable} files Pillow could not open", flush=True)
    if args.list_fonts:
        for name, chosen in (("train", train_fonts), ("test", test_fonts)):
            for family, styles in chosen.items():
                print(f"{name}\t{family}\t{', '.join(style for style, _ in styles)}")
        return 0
    words = read_words(args.words, VOCABULARY)
    started = time.perf_counter()
    rng = random.Random(args.seed)
    train_dir, test_dir = os.path.join(args.out, "train"), os.path.join(args.out, "test")
    write_set(train_dir, args.train_lines, train_fonts, words, args, rng)
    write_set(test_dir, args.test_lines, test_fonts, words, args, rng)
    print(f"wrote {args.train_lines} training and {args.test_lines} test lines of {len(words)} words to "
          f"{train_dir} and {test_dir} in {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
