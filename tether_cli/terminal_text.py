"""Text a host can influence, made safe to put on a terminal.

A rented host writes the training log, the heartbeat (exit reasons, checkpoint and misplaced
paths, restore reasons) and the manifests in the bucket; all of it reaches `tether status`,
`logs`, `download`, `demo`, `rehearse` and `local up`. A terminal obeys control characters in
what it prints: ESC starts sequences that set the window title, write the clipboard (OSC 52),
move the cursor or hide text, and so does the 8-bit CSI (U+009B). rich drops only BEL, BS, VT,
FF and CR. So every print site of such text passes it through `visible` first: each control
character is shown as Python writes it in a string, never obeyed:

- `\\t`, `\\n`, `\\r` for tab, newline and carriage return (a log keeps its newlines and tabs);
- `\\xNN` for the other C0 controls (ESC is `\\x1b`), DEL (`\\x7f`) and the C1 controls
  (U+0080–U+009F: the 8-bit CSI is `\\x9b`);
- `\\uNNNN` for the bidirectional embeddings, overrides and isolates (U+202A–U+202E,
  U+2066–U+2069), which reorder what the eye reads, and for the invisible characters that hide
  or split text without showing: zero-width space, joiners and marks (U+200B–U+200F), the line
  and paragraph separators (U+2028, U+2029), word joiner and invisible operators
  (U+2060–U+2064) and the byte-order mark (U+FEFF).

A backslash already in the text is left as it is (a Windows path stays readable), so `\\x1b`
on screen is either an escaped ESC or those four characters: never an ESC.

`--json` output keeps the data: `json_visible` writes the same characters as JSON `\\uNNNN`
escapes (the encoders escape C0 themselves but not DEL, C1 or bidi), which parse back to the
very same strings.
"""

from __future__ import annotations

import re

# Every character `visible` rewrites; with `keep_newlines`, newline and tab are kept.
_INVISIBLE = r"\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
_HIDDEN = re.compile(rf"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]")
_HIDDEN_BUT_LINES = re.compile(rf"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]")
# What JSON encoders leave raw (C0 is always escaped there).
_RAW_IN_JSON = re.compile(rf"[\x7f-\x9f{_INVISIBLE}]")
_SHORT_FORMS = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT_FORMS.get(char)
    if short is not None:
        return short
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str, *, keep_newlines: bool) -> str:
    """`text` with every control character (C0, DEL, C1) and bidi control written out as an
    escape; `keep_newlines` keeps newline and tab as they are (logs, multi-line errors)."""
    return (_HIDDEN_BUT_LINES if keep_newlines else _HIDDEN).sub(_shown, text)


def json_visible(document: str) -> str:
    """A JSON document with DEL, C1 and bidi controls written as `\\uNNNN`: the same data once
    parsed. (These characters can only occur inside JSON strings, where the escape is valid.)"""
    return _RAW_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", document)
