"""What a job carries, checked: its args, result and meta as JSON every store
can hold, its keys, its id, and the error text a worker writes."""

from __future__ import annotations

import json
import operator
import re
import traceback
from typing import Any, overload

from .errors import ConfigError, PayloadError

__all__ = [
    "MAX_ERROR_CHARS", "MAX_KEY_BYTES", "MAX_NESTING", "MAX_TRACEBACK_CHARS", "STORED_ERROR_CHARS",
    "STORED_SNOOZE_CHARS", "STORED_TRACEBACK_CHARS", "check_job_id", "check_key", "describe", "dump_json",
    "is_storable", "safe_str", "storable_text", "stored_failure", "traceback_text", "unique_keys",
]


#: a NUL that json.dumps escaped: ``\u0000`` after an odd number of backslashes
#: (an even number is the user's own backslashes, then the six characters)
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def dump_json(value: Any, what: str, cap: int) -> str:
    """JSON text of ``value``, or a PayloadError that says what is wrong with it.

    Every args, result and meta JSON is made here, and it must be storable on
    every backend: no NUL character (PostgreSQL's text and jsonb cannot hold
    one; SQLite can, but a job's data must be storable on both, and a tether
    server refuses it for both) and no lone surrogate (not Unicode: UTF-8
    cannot encode it)."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise PayloadError(f"{what} must be JSON (dicts, lists, str, int, float, bool, None): {exc}") from None
    # json.dumps escapes NUL as \u0000 even with ensure_ascii=False: a cheap
    # test first, the precise one only when it matches
    key = _non_text_key(value)
    if key is _TOO_DEEP:
        raise PayloadError(f"{what} nests more than {MAX_NESTING} levels of lists and dicts; flatten it (each "
                           "reader of a deeper value pays for it: a page that pretty-prints it, a parser's stack)")
    if key is not _NO_KEY:
        as_text = json.dumps({key: 0})[1:-4]  # what JSON makes of it: 1 -> "1", None -> "null"
        raise PayloadError(f"{what} must be JSON: a dict key must be a string, got {type(key).__name__} "
                           f"{key!r} (JSON would turn it into the string {as_text}, and two keys such as "
                           "1 and '1' into one)")
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise PayloadError(f"{what} contains a NUL (\\u0000) character, which the database cannot store")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise PayloadError(f"{what} is not valid Unicode (a lone surrogate, {exc.object[exc.start:exc.end]!r}, "
                           "which UTF-8 cannot encode), so the database cannot store it") from None
    if size > cap:
        raise PayloadError(
            f"{what} is {size} bytes of JSON, over the cap of {cap} bytes; store large "
            "data elsewhere and pass a reference, or raise max_payload_bytes"
        )
    return text


#: the deepest args, meta or result may nest lists and dicts (``[[1]]`` is 2):
#: far more than any job's data needs, far less than what Python's own
#: recursion limit let through (~950 levels, which made a 242 KB value render
#: as a 230 MB page)
MAX_NESTING = 64
_NO_KEY, _TOO_DEEP = object(), object()
_NESTED = (dict, list, tuple)


def _non_text_key(value: Any) -> Any:
    """The first dict key in ``value`` that is not a string, ``_TOO_DEEP`` when
    it nests past ``MAX_NESTING``, or ``_NO_KEY``. ``json.dumps`` writes an
    int, float, bool or None key as a string, so the handler would get
    ``{"1": ...}`` for ``{1: ...}``, and one of ``{1: a, "1": b}``'s values
    would be lost without a word. Only dicts and sequences are walked: a
    payload of scalars costs one type test."""
    if not isinstance(value, _NESTED):
        return _NO_KEY
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_NESTING:
            return _TOO_DEEP
        if isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str):
                    return key
                if isinstance(inner, _NESTED):
                    stack.append((inner, depth + 1))
        else:
            stack.extend((inner, depth + 1) for inner in item if isinstance(inner, _NESTED))
    return _NO_KEY


#: the longest failure error and traceback, in characters, a worker writes
#: (``storable_text``) and a tether server takes (``store/http/wire.py``: fail)
MAX_ERROR_CHARS = 100_000
MAX_TRACEBACK_CHARS = 1_000_000
#: what a store keeps of them (``stored_failure``: the middle cut): every
#: attempt keeps a row, and a job's page and ``get_job`` show them all
STORED_ERROR_CHARS = 4_000
STORED_TRACEBACK_CHARS = 32_000
#: a snooze (``tether.Retry``) is no error: what it may say is kept this short, and no traceback
STORED_SNOOZE_CHARS = 200


def check_job_id(job_id: object) -> int:
    """``job_id`` as an int, or a ConfigError: ``True`` or ``"1"`` read job 1
    on SQLite (its columns take any type) and failed on PostgreSQL with the
    driver's error."""
    if not isinstance(job_id, bool):
        try:
            value = operator.index(job_id)  # type: ignore[arg-type]
        except TypeError:
            pass
        else:  # past a 64-bit int: SQLite's driver raised OverflowError, where PostgreSQL found no job
            if -(2**63) <= value < 2**63:
                return value
            raise ConfigError(f"job id {value} is out of range: a job id is a 64-bit int")
    raise ConfigError(f"a job id is an int, got {type(job_id).__name__} {job_id!r}")


def is_storable(text: str) -> bool:
    """Text every backend stores as given: no NUL (PostgreSQL's text cannot
    hold one) and no lone surrogate (UTF-8 cannot encode one)."""
    if "\x00" in text:
        return False
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return False
    return True


#: the most UTF-8 bytes a dedup_key or exclusive_key may take: PostgreSQL's
#: B-tree indexes them and refuses a row over 2,704 bytes (the key plus the
#: index's other columns), so a longer key would enqueue on SQLite and fail on
#: PostgreSQL with the driver's error. Longer keys can be hashed.
MAX_KEY_BYTES = 2000


def _clip(key: object) -> str:
    text = repr(key)
    return text if len(text) <= 80 else f"{text[:60]}...({len(text)} characters)"


def check_key(where: str, name: str, key: object) -> None:
    """ConfigError unless ``key`` (a dedup_key or exclusive_key; None passes)
    is a non-empty storable string every backend can index."""
    if key is None:
        return
    if not isinstance(key, str) or not key:
        raise ConfigError(f"{where}: {name} must be a non-empty string, got {_clip(key)}")
    if not is_storable(key):  # as args are (dump_json): else a driver's error
        raise ConfigError(f"{where}: {name} {_clip(key)} holds a NUL character or a lone "
                          "surrogate, which the database cannot store")
    size = len(key.encode())
    if size > MAX_KEY_BYTES:
        raise ConfigError(f"{where}: {name} is {size} bytes of UTF-8, over the {MAX_KEY_BYTES} a key may take "
                          f"(PostgreSQL indexes it); hash a longer key, e.g. hashlib.sha256(key.encode()).hexdigest()")


@overload
def storable_text(text: str, limit: int | None = None) -> str: ...
@overload
def storable_text(text: None, limit: int | None = None) -> None: ...
def storable_text(text: str | None, limit: int | None = None) -> str | None:
    """Free text a worker writes for a handler and must never have refused (a
    failure's error and traceback, a progress message), made storable on every
    backend: each NUL becomes the four characters ``\\x00`` and each lone
    surrogate its escape (``\\ud800``: backslashreplace), the text Python's
    ``repr`` shows. Visible escapes rather than U+FFFD, so whoever reads the
    error sees what the handler's text held, not just that something was lost.
    Past ``limit`` characters (a tether server refuses longer), the middle is
    cut: the head says what failed, the tail (a traceback's last lines) where."""
    if text is None:
        return None
    if not is_storable(text):
        text = text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    if limit is not None and len(text) > limit:
        keep = max(limit - 100, limit // 2)  # room for the note of the cut
        head = keep // 2
        text = f"{text[:head]}\n[... {len(text) - keep} characters cut ...]\n{text[len(text) - (keep - head):]}"
    return text


def stored_failure(snoozed: bool, error: str | None, traceback: str | None) -> tuple[str | None, str | None]:
    """A failure's error and traceback as a store keeps them: storable, cut to
    ``STORED_ERROR_CHARS`` and ``STORED_TRACEBACK_CHARS`` (a snooze to
    ``STORED_SNOOZE_CHARS`` and no traceback), whoever reported it."""
    if snoozed:
        return storable_text(error, STORED_SNOOZE_CHARS), None
    return storable_text(error, STORED_ERROR_CHARS), storable_text(traceback, STORED_TRACEBACK_CHARS)


def traceback_text(exc: BaseException) -> str:
    """The traceback an attempt records (an exception whose ``str()`` raises
    is shown as ``<exception str() failed>``, not raised); for one raised in
    a handler's child process (isolation="process"), the child's traceback."""
    remote = getattr(exc, "__tether_traceback__", None)
    return remote if isinstance(remote, str) else "".join(traceback.format_exception(exc))


def safe_str(value: object) -> str:
    """``str(value)``; a note in its place when that raises: the attempt's
    outcome must be written whatever the handler raised (a typo in an
    exception's ``__str__`` once left its job running under a live lease)."""
    try:
        return str(value)
    except Exception as exc:
        return f"<str() raised {type(exc).__name__}>"


def describe(exc: BaseException) -> str:
    """``Type: message`` (``Type`` alone without one), the error an attempt records."""
    text = safe_str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' ``object_pairs_hook`` for JSON that comes from outside
    (a tether server's request bodies, ``tether enqueue --args``): an object
    that names a key twice is refused, not collapsed to its last value, as
    ``dump_json`` refuses keys that would merge."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {key!r} is given twice in one JSON object")
            seen.add(key)
    return value
