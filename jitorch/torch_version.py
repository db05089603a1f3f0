"""``TorchVersion``: the type of ``jitorch.__version__``, a ``str`` that also compares as a PEP 440 version.

As ``torch.__version__``, it compares with version strings (``"2.0"``, ``"0.1.0rc1"``), with tuples of numbers (read
as ``MAJOR.MINOR.PATCH``) and with ``packaging.version.Version`` objects; a string that is no version (``"parrot"``)
falls back to plain string comparison. ``!=`` and hashing stay those of ``str``, as in torch.

>>> v = TorchVersion("0.1.0")
>>> v >= (0, 1), v < "0.10", v == (0, 1, 0), v > "0.1.0rc2", isinstance(v, str)
(True, True, True, True, True)
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["TorchVersion", "InvalidVersion"]


class InvalidVersion(ValueError):
    """A string that is not a PEP 440 version (``packaging``'s error of the same name)."""


# PEP 440's grammar (epoch, release, pre, post, dev, local) in its permissive spelling.
_PATTERN = re.compile(r"""
    v?(?:(?P<epoch>[0-9]+)!)?(?P<release>[0-9]+(?:\.[0-9]+)*)
    (?:[-_.]?(?P<pre_l>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?P<pre_n>[0-9]+)?)?
    (?:-(?P<post_n1>[0-9]+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?)?
    (?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>[0-9]+)?)?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
""", re.VERBOSE | re.IGNORECASE)
_PRE = {"alpha": "a", "a": "a", "beta": "b", "b": "b", "c": "rc", "pre": "rc", "preview": "rc", "rc": "rc"}
_LOW, _HIGH = (-1, ""), (1 << 62, "")  # below / above every (number, text) part of the sort key


def _version_key(text):
    """PEP 440's ordering of ``text`` as a tuple, or ``InvalidVersion``."""
    m = _PATTERN.fullmatch(text.strip())
    if m is None:
        raise InvalidVersion(f"Invalid version: {text!r}")
    release = [int(p) for p in m["release"].split(".")]
    while len(release) > 1 and release[-1] == 0:  # 1.0.0 == 1.0 == 1
        release.pop()
    pre = (("a", "b", "rc").index(_PRE[m["pre_l"].lower()]), int(m["pre_n"] or 0)) if m["pre_l"] else None
    post_n = m["post_n1"] or m["post_n2"]
    post = (int(post_n or 0), "") if (m["post_n1"] or m["post_l"]) else None
    dev = (int(m["dev_n"] or 0), "") if m["dev_l"] else None
    if pre is None:
        # A dev release of a final version sorts before its pre-releases; a final after them.
        pre = _LOW if (post is None and dev is not None) else _HIGH
    local = () if m["local"] is None else tuple(
        (int(p), "") if p.isdigit() else (-1, p.lower()) for p in re.split(r"[-_.]", m["local"]))
    return (int(m["epoch"] or 0), tuple(release), pre, post or _LOW, dev or _HIGH, local)


class TorchVersion(str):
    """A version string comparable with strings, tuples and ``packaging`` versions (``torch.torch_version``)."""

    __slots__ = ()

    def _key_of(self, other: Any):
        if isinstance(other, str):
            return _version_key(other)
        if hasattr(other, "release") and hasattr(other, "public"):  # a packaging.version.Version
            return _version_key(str(other))
        if isinstance(other, Iterable):
            return _version_key(".".join(str(item) for item in other))
        raise InvalidVersion(f"Invalid version: {other!r}")

    def _compare(self, other: Any, method: str) -> bool:
        try:
            mine, theirs = _version_key(self), self._key_of(other)
        except InvalidVersion:
            # Not a version ('parrot'): compare as plain strings, as torch does.
            return getattr(str, method)(self, other)
        return getattr(mine, method)(theirs)

    def __gt__(self, other):
        return self._compare(other, "__gt__")

    def __lt__(self, other):
        return self._compare(other, "__lt__")

    def __ge__(self, other):
        return self._compare(other, "__ge__")

    def __le__(self, other):
        return self._compare(other, "__le__")

    def __eq__(self, other):
        return self._compare(other, "__eq__")

    __ne__ = str.__ne__  # torch leaves ``!=`` to str
    __hash__ = str.__hash__
