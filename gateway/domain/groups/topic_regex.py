"""Topic subscriptions by regular expression (ConsumerGroupHeartbeat's `SubscribedTopicRegex`).

KIP-848 specifies RE2/J syntax, and Kafka matches a topic when the whole name matches
(`Pattern.matcher(topic).matches()`). Python's `re` is a backtracking engine with a different
dialect, so a pattern is first scanned and, where the two differ, translated or refused:

- refused (RE2 has no such thing, so Kafka would refuse the pattern too): backreferences (`\\1`,
  `\\k<name>`, `(?P=name)`), lookahead and lookbehind, atomic groups `(?>...)`, possessive
  quantifiers (`a*+`), conditionals `(?(1)...)`, comments `(?#...)` and `\\Z`;
- refused because `re` cannot express them faithfully: Unicode classes (`\\pL`, `\\p{Greek}`), `\\C`,
  the ungreedy flag `U`, negated POSIX classes `[[:^alpha:]]`;
- translated: `\\z` to `\\Z`, `(?<name>` to `(?P<name>`, `\\Q...\\E` to an escaped literal, POSIX
  classes such as `[[:alpha:]]` to their ASCII sets;
- matched with `re.fullmatch` and `re.ASCII`, as RE2's `\\d \\w \\s \\b` are ASCII. Topic names are
  ASCII without newlines, so the remaining differences (`$` before a final newline, Unicode case
  folding) cannot change which topics match.

A backtracking engine can take exponential time on some patterns where RE2 cannot; topic names are
at most 249 characters, which bounds that.
"""

from __future__ import annotations

import re
from functools import lru_cache

from gateway.domain.groups.errors import GroupError, GroupErrorKind

_POSIX = {
    "alnum": "0-9A-Za-z", "alpha": "A-Za-z", "ascii": "\\x00-\\x7f", "blank": "\\t ", "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9", "graph": "!-~", "lower": "a-z", "print": " -~", "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ", "upper": "A-Z", "word": "0-9A-Za-z_", "xdigit": "0-9A-Fa-f",
}


def _refuse(regex: str, what: str) -> GroupError:
    return GroupError(
        GroupErrorKind.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex `{regex}`: {what} are not supported (RE2 syntax)"
    )


def _escape_literal(text: str, in_class: bool) -> str:
    if not in_class:
        return re.escape(text)
    return "".join(ch if ch.isalnum() else "\\" + ch for ch in text)


def translate(regex: str) -> str:
    """The `re` pattern matching what the RE2 pattern `regex` matches; GroupError when it cannot."""
    out: list[str] = []
    i, n = 0, len(regex)
    in_class = False
    while i < n:
        c = regex[i]
        if c == "\\":
            if i + 1 >= n:
                raise _refuse(regex, "trailing backslashes")
            d = regex[i + 1]
            if d == "Q":
                end = regex.find("\\E", i + 2)
                literal = regex[i + 2:] if end < 0 else regex[i + 2:end]
                out.append(_escape_literal(literal, in_class))
                i = n if end < 0 else end + 2
                continue
            if d in "123456789" or d == "k":
                raise _refuse(regex, "backreferences")
            if d in "pP":
                raise _refuse(regex, "Unicode classes")
            if d in "ZC":
                raise _refuse(regex, f"\\{d} escapes")
            out.append("\\Z" if d == "z" else regex[i:i + 2])
            i += 2
            continue
        if in_class:
            if regex.startswith("[:", i) and (end := regex.find(":]", i + 2)) > 0:
                name = regex[i + 2:end]
                if name.startswith("^") or name not in _POSIX:
                    raise _refuse(regex, f"POSIX classes like [:{name}:]")
                out.append(_POSIX[name])
                i = end + 2
                continue
            if c == "]":
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            start = i + 1 + (regex.startswith("^", i + 1))
            if regex.startswith("]", start):  # a "]" first in a class is a literal in both dialects
                start += 1
            out.append(regex[i:start])
            i = start
            continue
        if regex.startswith("(?", i):
            rest = regex[i + 2:]
            if rest.startswith(("=", "!", "<=", "<!")):
                raise _refuse(regex, "lookaround assertions")
            if rest.startswith(">"):
                raise _refuse(regex, "atomic groups")
            if rest.startswith("("):
                raise _refuse(regex, "conditionals")
            if rest.startswith("P="):
                raise _refuse(regex, "backreferences")
            if rest.startswith("#"):
                raise _refuse(regex, "comments")
            if rest.startswith("<"):
                out.append("(?P<")
                i += 3
                continue
            flags = re.match(r"[a-zA-Z-]*", rest)
            if flags is not None and "U" in flags.group():
                raise _refuse(regex, "ungreedy flags")
        if c in "*+?}" and regex.startswith("+", i + 1):
            raise _refuse(regex, "possessive quantifiers")
        out.append(c)
        i += 1
    return "".join(out)


@lru_cache(maxsize=1024)
def topic_pattern(regex: str) -> re.Pattern[str]:
    """The compiled pattern of a subscription regex; GroupError(INVALID_REGULAR_EXPRESSION) when it
    is not a valid RE2 pattern `re` can match alike."""
    try:
        return re.compile(translate(regex), re.ASCII)
    except re.error as exc:
        raise GroupError(
            GroupErrorKind.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}"
        ) from None


def matching(regex: str, topics: list[str]) -> tuple[str, ...]:
    """The topics whose whole name matches `regex`, sorted."""
    pattern = topic_pattern(regex)
    return tuple(sorted(t for t in topics if pattern.fullmatch(t)))
